"""Shared fixtures: the course root, and a bin folder on PATH for nbgrader's helpers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# nbgrader runs `alembic` and Jupyter kernels from PATH: use this interpreter's.
_bindir = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _bindir:
    os.environ["PATH"] = _bindir + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def fresh_python():
    """Run ``code`` in a new interpreter (this one's executable); returns the CompletedProcess.

    For checks that need a clean ``sys.modules`` (what an import pulls in, or touches).
    """
    def run(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    return run
