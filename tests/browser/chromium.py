"""What the browser tests share: Debian's Chromium (never a downloaded browser), the flags it
runs with here, a free local port, and the folder screenshots go to."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
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


@contextlib.contextmanager
def jupyter_lab(work: Path, root_dir: Path, **env_extra: str):
    """JupyterLab on 127.0.0.1 serving ``root_dir``, as `make lab` runs it (its Jupyter config,
    ``autograder/selfcheck/lab``: nbgrader off), with its own home, runtime and settings under
    ``work`` and no news pop-up; yields ``{"base", "token"}``, stops it afterwards."""
    import pytest

    port, token = free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "NBGRADER_EXECUTION", "COURSE_PROFILE", "JPY_SESSION_NAME")}
    env.update(OMP_NUM_THREADS="1", HOME=str(work / "home"),
               PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
               JUPYTER_CONFIG_PATH=str(ROOT / "autograder" / "selfcheck" / "lab"),
               JUPYTER_RUNTIME_DIR=str(work / "runtime"), JUPYTER_CONFIG_DIR=str(work / "cfg"),
               JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"),
               XDG_RUNTIME_DIR=str(work / "xdg"), **env_extra)
    for d in ("home", "xdg"):
        (work / d).mkdir(mode=0o700, exist_ok=True)
    # No "Jupyter news" pop-up or update check: nothing may cover the widgets (or go online).
    settings = work / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}', encoding="utf-8")
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", f"--ServerApp.token={token}", "--ServerApp.password=",
           f"--ServerApp.root_dir={root_dir}", "--LabApp.expose_app_in_browser=True",
           "--ServerApp.port_retries=0", f"--LabApp.user_settings_dir={work / 'settings'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:   # CI containers run as root
        cmd.append("--allow-root")
    log_path = work / "jupyter.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                        break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        log.flush()
                        pytest.fail("JupyterLab did not start:\n"
                                    + log_path.read_text(errors="replace")[-3000:])
                    time.sleep(0.3)
            yield {"base": base, "token": token, "log": log_path}
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
