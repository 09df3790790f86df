"""Does a skipped test fail a CI run (naming it and its reason), and only say which Debian
packages would make it run on a learner's machine?"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SKIPPING = '''
import pytest

def test_sandbox_thing():
    pytest.skip("bubblewrap (bwrap) is not installed; on Debian/Ubuntu: apt-get install bubblewrap")

def test_fine():
    assert 1 + 1 == 2
'''


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_x.py").write_text(SKIPPING)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


def test_a_skip_fails_ci(tmp_path):
    """With CI=true, does a run with one skip fail and name the test and its reason?"""
    proc = _run(tmp_path, "true")
    assert proc.returncode == 1, proc.stdout
    assert "not allowed in CI" in proc.stdout
    assert "test_x.py::test_sandbox_thing: bubblewrap (bwrap) is not installed" in proc.stdout


def test_a_skip_passes_locally_and_names_the_package(tmp_path):
    """Without CI, does the run pass and say which Debian package to install?"""
    proc = _run(tmp_path, None)
    assert proc.returncode == 0, proc.stdout
    assert "1 test(s) skipped" in proc.stdout
    assert "to run them: apt-get install bubblewrap" in proc.stdout
