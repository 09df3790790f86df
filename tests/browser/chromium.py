"""What the browser tests share: Debian's Chromium (never a downloaded browser), the flags it
runs with here, a free local port, and the folder screenshots go to."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# No sandbox of Chromium's own (the tests run as root in a container), no GPU, no network
# traffic of its own, and /tmp instead of a small /dev/shm.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-dev-shm-usage"]


def chromium() -> str | None:
    """The Chromium executable: ``$CHROMIUM``, else Debian's ``/usr/bin/chromium``, else one on
    ``PATH``; None when there is none."""
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def artifacts() -> Path:
    """Where screenshots and browser logs go: ``$BROWSER_ARTIFACTS_DIR``, else
    ``build/browser-artifacts`` (created)."""
    out = Path(os.environ.get("BROWSER_ARTIFACTS_DIR") or ROOT / "build" / "browser-artifacts")
    out.mkdir(parents=True, exist_ok=True)
    return out
