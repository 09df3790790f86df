"""Shared fixtures: the course root, and a bin folder on PATH for nbgrader's helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# `selfcheck` commands in tests grade in their own process unless a test turns the warm helper
# on (tests/test_selfcheck_helper.py), so that no helper outlives the tests.
os.environ.setdefault("TFS_SELFCHECK_HELPER", "0")

# nbgrader runs `alembic` and Jupyter kernels from PATH: use this interpreter's.
_bindir = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _bindir:
    os.environ["PATH"] = _bindir + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _close_figures():
    """Close the figures a test drew (matplotlib warns once more than 20 are open)."""
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails, as on a machine without network."""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network unreachable (refused by the test)")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture(scope="session")
def fresh_python():
    """Run ``code`` in a new interpreter (this one's executable); returns the CompletedProcess.

    For checks that need a clean ``sys.modules`` (what an import pulls in, or touches).
    """
    def run(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    return run


# --------------------------------------------------------------------------- skipped tests
# A test skipped in CI is a test that does not exist: with CI set (``.ci/run`` sets it), any
# skip fails the run and is named. Locally, skips are allowed and the end of the run says
# which Debian packages would make them run.

PACKAGES_FOR = {  # words of a skip reason -> the Debian packages that remove it
    "bubblewrap": "bubblewrap",
    "bwrap": "bubblewrap",
    "Chromium": "chromium",
    "chromium": "chromium",
    "configurable-http-proxy": "nodejs npm (then: npm install -g configurable-http-proxy)",
}


def skipped_report(skips: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """Lines naming each skipped test with its reason, and the Debian packages to install."""
    lines = [f"  {nodeid}: {reason}" for nodeid, reason in skips]
    packages = sorted({pkg for _, reason in skips for word, pkg in PACKAGES_FOR.items()
                       if word in reason})
    return lines, packages


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    skips = [(r.nodeid, _skip_reason(r)) for r in reporter.stats.get("skipped", [])]
    if not skips:
        return
    lines, packages = skipped_report(skips)
    strict = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    reporter.write_sep("=", f"{len(skips)} test(s) skipped" + (" - not allowed in CI"
                                                                   if strict else ""))
    for line in lines:
        reporter.write_line(line)
    if packages:
        reporter.write_line(f"to run them: apt-get install {' '.join(packages)}")
    if strict and session.exitstatus == 0:
        session.exitstatus = 1
