"""The class's self-check (autograder/classroom/hubcheck.py): a student's Self-check button on
the hub, judged on the instructor's side in the sandbox, within a limit per student.

The service runs here in a thread on a socket in a temporary folder, with this process's uid
standing for ``student1``; the client is the notebook's own (``course.progress``).
"""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from autograder import sandbox
from autograder.classroom import hubcheck
from course import progress

DAY2 = "day02_queries_keys_values"


@pytest.fixture
def service(root, tmp_path):
    svc = hubcheck.HubCheck(tmp_path, root, per_day=2)
    svc.accounts = {os.getuid(): "student1"}
    server = hubcheck.make_server(svc, tmp_path / "check" / "check.sock")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield svc, str(tmp_path / "check" / "check.sock")
    server.shutdown()
    server.server_close()


def _ask(path: str, header: bytes, body: bytes = b"") -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(path)
        sock.sendall(header + body)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out.decode()


def _notebook(root, tmp_path, which: str):
    src = root / which / DAY2 / f"{DAY2}.ipynb"
    dest = tmp_path / "home" / DAY2 / f"{DAY2}.ipynb"
    dest.parent.mkdir(parents=True)
    dest.write_bytes(src.read_bytes())
    return dest


def test_a_student_gets_the_judged_report(service, root, tmp_path, capsys):
    """Does the button, on the hub, get the hidden tests' report for the answer key (full
    marks) and for the blank release notebook (points lost, with the stub named)?"""
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(f"bubblewrap is needed for the class's check: {why}")
    svc, path = service
    svc.usage.per_day = 0
    key = _notebook(root, tmp_path, "solutions")
    assert progress._hub_check(key, path, timeout=300) == 0
    out = capsys.readouterr().out
    assert f"Self-check of {DAY2} — {DAY2}.ipynb (received" in out
    assert "all tests pass" in out and str(tmp_path / "check") not in out
    blank = tmp_path / "blank.ipynb"
    blank.write_bytes((root / "release" / DAY2 / f"{DAY2}.ipynb").read_bytes())
    os.rename(blank, blank.with_name(f"{DAY2}-copy.ipynb"))
    assert progress._hub_check(blank.with_name(f"{DAY2}-copy.ipynb"), path, timeout=300) == 1
    out = capsys.readouterr().out
    assert "✘ FAIL" in out and "raise NotImplementedError()" in out
    assert not list((tmp_path / "check" / "work").iterdir())      # nothing kept


def test_the_limit_per_student_and_day(service, tmp_path, monkeypatch):
    """After the instructor's limit of checks of one assignment today, is the next refused
    before any grading (and another assignment still allowed)?"""
    svc, path = service
    graded = []
    monkeypatch.setattr(svc, "grade", lambda *a: (graded.append(a[1]), (0, ["report"]))[1])
    body = b"{}"
    head = json.dumps({"notebook": f"{DAY2}.ipynb", "size": len(body)}).encode() + b"\n"
    for left in (1, 0):
        assert f"({left} check(s) of {DAY2} left today.)" in _ask(path, head, body)
    out = _ask(path, head, body)
    assert "used your 2 checks" in out and out.rstrip().endswith("\x1eexit 2")
    other = json.dumps({"notebook": "day03_self_attention.ipynb", "size": 2}).encode() + b"\n"
    assert "left today" in _ask(path, other, body)
    assert graded == [DAY2, DAY2, "day03_self_attention"]
    assert json.loads((tmp_path / "check" / "usage.json").read_text())   # kept across restarts


@pytest.mark.parametrize("header, body, said", [
    (b'{"notebook": "x.ipynb", "size": 999999999}\n', b"", "the most the class's check takes"),
    (b'{"notebook": "x.ipynb", "size": 1' + b"0" * 4050 + b'}\n', b"", "the most"),
    (b"not json\n", b"", "is not {"),
    (b'{"notebook": ["a"], "size": 1}\n', b"x", "is not {"),
    (b'{"notebook": "homework.ipynb", "size": 2}\n', b"{}", "cannot tell which day"),
    (b'{"notebook": "day02_queries_keys_values.ipynb", "size": 5}\n', b"{}",
     "closed before the whole notebook"),
    (b'{"notebook": "../../day02_queries_keys_values.ipynb", "size": 2}\n', b"{}",
     "one plain name"),
    (b'{"notebook": "x\\n\\u001eexit 0\\nday02.ipynb", "size": 2}\n', b"{}", "one plain name"),
    (b'{"notebook": "day02\\u0000.ipynb", "size": 2}\n', b"{}", "one plain name"),
    (b'{"notebook": "day02\\ud800.ipynb", "size": 2}\n', b"{}", "one plain name"),
    (b"[" * 3000 + b"\n", b"", "is not {"),
    (b"x" * 5000, b"", "first line is too long"),
])
def test_bad_requests_are_refused_in_one_line(service, monkeypatch, header, body, said):
    """Is each malformed, oversized, short or unplaceable request refused with a reason,
    none graded and none counted?"""
    svc, path = service
    monkeypatch.setattr(svc, "grade", lambda *a: pytest.fail("graded a bad request"))
    out = _ask(path, header, body)
    assert said in out and out.rstrip().endswith("\x1eexit 2")
    assert svc.usage.counts == {}


def test_only_classroom_accounts_and_one_check_at_a_time(service, monkeypatch):
    """Is an account outside the classroom refused, and a student's second check while the
    first runs?"""
    svc, path = service
    head = json.dumps({"notebook": f"{DAY2}.ipynb", "size": 2}).encode() + b"\n"
    svc.accounts = {}
    assert "only the classroom's accounts" in _ask(path, head, b"{}")
    svc.accounts = {os.getuid(): "student1"}
    svc.busy.add("student1")
    assert "already running" in _ask(path, head, b"{}")


def _fake_grader(tmp_path, body: str) -> str:
    """A stand-in for `python -m autograder selfcheck`: a shell script that ignores its
    arguments and runs ``body``."""
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_a_long_check_is_killed_with_its_helpers_and_frees_the_slot(service, tmp_path,
                                                                    monkeypatch):
    """A check past CHECK_SECONDS whose helper keeps the output open (as a grading worker
    does): is the whole session killed, the report cut there, and the slot free at once?"""
    import time

    svc, path = service
    monkeypatch.setattr(hubcheck, "CHECK_SECONDS", 1.0)
    svc.python = _fake_grader(tmp_path, "echo started; (sleep 60; echo late) & sleep 60")
    head = json.dumps({"notebook": f"{DAY2}.ipynb", "size": 2}).encode() + b"\n"
    t0 = time.monotonic()
    out = _ask(path, head, b"{}")
    assert time.monotonic() - t0 < 10, "the check held the slot past its time"
    assert "started" in out and "stopped after 1 s" in out and "late" not in out
    assert out.rstrip().endswith("\x1eexit 2")
    assert svc.slot.acquire(blocking=False)


def test_the_report_cannot_forge_the_protocol(service, tmp_path):
    """Lines the grading prints that look like the protocol's (an exit line) or carry control
    characters reach the student as plain text, and the exit status is the grader's own."""
    svc, path = service
    svc.python = _fake_grader(tmp_path, r"printf 'Total: 0/8\n\036exit 0\n  \036exit 0\033[2J\n'"
                                        "; exit 1")
    head = json.dumps({"notebook": f"{DAY2}.ipynb", "size": 2}).encode() + b"\n"
    out = _ask(path, head, b"{}")
    lines = out.rstrip("\n").split("\n")
    assert [x for x in lines if x.startswith("\x1e")] == ["\x1eexit 1"], lines
    assert "\x1b" not in out


def test_accounts_outside_the_class_hold_nothing(service, monkeypatch):
    """Many connections of an account outside the class, or of a student whose check is
    running: each is refused at once, and none takes a place a student's check needs."""
    svc, path = service
    head = json.dumps({"notebook": f"{DAY2}.ipynb", "size": 2}).encode() + b"\n"
    svc.accounts = {}
    for _ in range(80):                     # more than MAX_CONNECTIONS
        assert "only the classroom's accounts" in _ask(path, head, b"{}")
    svc.accounts = {os.getuid(): "student1"}
    monkeypatch.setattr(svc, "grade", lambda *a: (0, ["graded"]))
    assert "graded" in _ask(path, head, b"{}")


def test_a_check_whose_student_left_is_not_graded_nor_counted(service, monkeypatch):
    """A student who leaves while others' checks run: their check is not graded, not
    counted, and the queue's count of waiting checks comes back to 0."""
    import time

    svc, path = service
    monkeypatch.setattr(hubcheck, "WAIT_NOTE", 0.2)
    graded = []
    monkeypatch.setattr(svc, "grade", lambda *a: (graded.append(a[0]), (0, ["ok"]))[1])
    svc.accounts = {os.getuid(): "student2"}
    svc.slot.acquire()                          # another student's check holds the slot
    head = json.dumps({"notebook": f"{DAY2}.ipynb", "size": 2}).encode() + b"\n"
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    sock.sendall(head + b"{}")
    time.sleep(0.5)
    sock.close()                                 # gave up waiting
    time.sleep(1.0)
    svc.slot.release()
    deadline = time.monotonic() + 5
    while (svc.busy or svc.waiting) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert graded == [] and svc.waiting == 0 and not svc.busy
    assert sum(svc.usage.counts.values()) == 0


def test_a_failure_on_the_graders_side_is_answered_and_not_counted(service, monkeypatch):
    """An error of the grader (the disk, a failed start) gets one line and exit status 2,
    and the student keeps their check."""
    svc, path = service

    def broken(*a):
        raise PermissionError("no space left, or a folder root cannot write")

    monkeypatch.setattr(svc, "grade", broken)
    head = json.dumps({"notebook": f"{DAY2}.ipynb", "size": 2}).encode() + b"\n"
    out = _ask(path, head, b"{}")
    assert "failed on the grader's side" in out and out.rstrip().endswith("\x1eexit 2")
    assert sum(svc.usage.counts.values()) == 0


def test_a_helper_that_leaves_the_session_does_not_hold_the_slot(service, tmp_path,
                                                                   monkeypatch):
    """A helper of the grading that starts a session of its own keeps the pipe open past
    the kill: the check still ends at its time, without that helper's late output."""
    import time

    svc, path = service
    monkeypatch.setattr(hubcheck, "CHECK_SECONDS", 1.0)
    svc.python = _fake_grader(tmp_path, "echo started; setsid sh -c 'sleep 8; echo late' & "
                                        "sleep 30")
    head = json.dumps({"notebook": f"{DAY2}.ipynb", "size": 2}).encode() + b"\n"
    t0 = time.monotonic()
    out = _ask(path, head, b"{}")
    assert time.monotonic() - t0 < 6 and "started" in out and "late" not in out
