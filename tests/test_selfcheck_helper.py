"""The warm helper behind ``python -m autograder selfcheck`` (autograder/selfcheck/helper.py):
the same report as a check in the command's own process, standbys kept ready and bounded, a
private folder, and a helper that stops when its code changed, when idle, or when asked."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_selfcheck import _buggy_day2, _standby_processes  # the same notebook and scan

from autograder.selfcheck import helper

VERDICTS = ("  ✔", "  ✘", "         checks:")


@pytest.fixture
def helper_env(tmp_path, monkeypatch):
    """A private folder for this test's helper, the helper switched on, and every helper it
    started stopped afterwards."""
    folder = Path("/tmp") / f"tfs-h-{os.getpid()}-{tmp_path.name[-6:]}"   # short: socket path
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("TFS_SELFCHECK_DIR", str(folder))
    monkeypatch.setenv("TFS_SELFCHECK_HELPER", "1")
    yield folder
    helper.stop(folder)
    shutil.rmtree(folder, ignore_errors=True)


def _processes(*needles: str) -> dict[int, str]:
    """Live processes whose command line holds every needle: pid -> command line."""
    return {pid: cmd for pid, cmd in _standby_processes(needles[0]).items()
            if all(n in cmd for n in needles)}


def _wait(predicate, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def _cli(nb_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", "selfcheck", "--no-save",
                           *extra, str(nb_path)], capture_output=True, text=True, timeout=300,
                          cwd=str(nb_path.parent), env=dict(os.environ))


def test_a_folder_others_can_open_is_refused(tmp_path, monkeypatch, capsys):
    """Would the helper put its socket where another user could reach it? (No: the check
    falls back to grading in the command's own process, and says why.)"""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setenv("TFS_SELFCHECK_DIR", str(shared))
    monkeypatch.setenv("TFS_SELFCHECK_HELPER", "1")
    with pytest.raises(helper.HelperError, match="only you can open"):
        helper.runtime_dir()
    nb = tmp_path / "day02_queries_keys_values.ipynb"
    nb.write_text("{}")
    assert helper.check(nb) is None
    assert "grading without the helper" in capsys.readouterr().err
    assert list(shared.iterdir()) == []


def test_one_helper_per_environment(monkeypatch):
    """Does a check with another course profile or Python path get a helper of its own (its
    standbys would grade with the other settings)?"""
    monkeypatch.delenv("COURSE_PROFILE", raising=False)
    plain = helper.helper_name()
    monkeypatch.setenv("COURSE_PROFILE", "gpu")
    assert helper.helper_name() != plain
    monkeypatch.setenv("JPY_SESSION_NAME", "whatever")       # not a setting: same helper
    assert helper.helper_name() == helper.helper_name()


def test_a_request_that_is_not_one_gets_an_answer(helper_env, tmp_path):
    """Does a stray line on the socket get a clear refusal, not a hang or a crash?"""
    path = helper_env / "t.sock"
    srv = helper.Helper(path, idle=60)
    rfile, wfile = io.BytesIO(b"not json\n"), io.BytesIO()
    srv.handle(rfile, wfile)
    assert wfile.getvalue().decode().endswith("\x1eexit 2\n")


@pytest.mark.slow
def test_the_helper_reports_what_selfcheck_reports_and_stops_cleanly(root, tmp_path,
                                                                       helper_env):
    """The first command starts the helper; the second is answered by the standby it kept
    ready. Both give exactly the verdicts of a check in the command's own process, and the
    same exit status. A request from other code (the course changed) stops the helper and
    its standbys; so does idleness."""
    nb_path = _buggy_day2(root, tmp_path)
    direct = _cli(nb_path, "--no-helper")
    assert direct.returncode == 1, direct.stderr
    want = [x for x in direct.stdout.splitlines() if x.startswith(VERDICTS)]
    assert any("✘ FAIL  0/2  day02_attention_mask" in x for x in want)

    for _ in range(2):
        run = _cli(nb_path)
        assert run.returncode == 1, run.stderr
        assert "without the helper" not in run.stderr
        assert [x for x in run.stdout.splitlines() if x.startswith(VERDICTS)] == want
        assert "Total: 6/8 points (75%), 1 test to fix" in run.stdout
        # after each check, a standby for this notebook is kept ready for the next one
        assert _wait(lambda: len(_processes("--standby", str(nb_path))) == 1)
    sockets = list(helper_env.glob("*.sock"))
    assert len(sockets) == 1 and (sockets[0].stat().st_mode & 0o077) == 0   # the owner's only

    # a client of other code: the helper answers "restart" and stops with its standbys
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sockets[0]))
        s.sendall(json.dumps({"op": "check", "notebook": str(nb_path), "root": None,
                              "save": False, "stamp": "other code"}).encode() + b"\n")
        assert s.makefile("r").readline().rstrip("\n") == helper.RESTART
    assert _wait(lambda: not _processes("autograder.selfcheck.helper", str(helper_env)))
    assert _wait(lambda: not _processes("--standby", str(nb_path)))
    assert not sockets[0].exists()

    # a helper that is idle for longer than its limit stops, and so do its standbys
    os.environ["TFS_SELFCHECK_IDLE"] = "2"
    try:
        run = _cli(nb_path)
    finally:
        del os.environ["TFS_SELFCHECK_IDLE"]
    assert run.returncode == 1 and "without the helper" not in run.stderr
    assert _wait(lambda: not _processes("autograder.selfcheck.helper", str(helper_env)), 30)
    assert _wait(lambda: not _processes("--standby", str(nb_path)), 30)


def test_a_helper_that_restarts_leaves_the_next_helpers_socket_alone(helper_env):
    """Code changed: the helper answers "restart", the client starts the next helper at once,
    and the old one, stopping, must not remove the new one's socket (the next check would
    wait for a helper that nobody can reach, then grade without it)."""
    import threading

    path = helper_env / f"{helper.helper_name()}.sock"
    old = helper.Helper(path)
    old.stamps[str(helper_env)] = "old code"
    serving = threading.Thread(target=old.serve, daemon=True)
    serving.start()
    assert _wait(lambda: helper._connect(path) is not None, 10)
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        s.sendall(json.dumps({"op": "check", "notebook": str(helper_env / "nb.ipynb"),
                              "root": None, "save": False, "stamp": "new code"}).encode()
                  + b"\n")
        assert s.makefile("r").readline().rstrip("\n") == helper.RESTART
    new = subprocess.Popen([sys.executable, "-m", "autograder.selfcheck.helper", str(path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        serving.join(30)
        assert not serving.is_alive()      # serve() returns after its clean-up
        assert _wait(lambda: helper._connect(path) is not None, 30)
        assert new.poll() is None and path.exists()
        assert helper._connect(path) is not None
    finally:
        helper.stop(helper_env)
        new.wait(30)
