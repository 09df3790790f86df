"""The class's self-check: a student's Self-check button, judged on the instructor's side.

On the hub the hidden tests are out of the students' reach (``classroom start`` closes
``autograder/`` to them), so a student's kernel cannot grade its own notebook. This service,
which ``classroom start`` runs as root beside the hub, does it for them:

- it listens on a Unix socket, ``<classroom>/check/check.sock`` (the folder ``0711``, the
  socket ``0666``): every local account can connect, and the kernel tells *who* connects
  (``SO_PEERCRED``), not anything the student sends. Only the classroom's accounts are served.
- the request: one JSON line ``{"notebook": "<file name>", "size": N}``, then the notebook's
  N bytes (at most :data:`MAX_BYTES`, within :data:`READ_SECONDS`). The file name only picks
  the day (:func:`autograder.selfcheck.check.day_of`); it never becomes a path.
- the check: the bytes go to a fresh root-only folder and ``python -m autograder selfcheck
  --sandbox --no-save --no-helper`` grades them exactly as ``grade`` grades a submission
  (admission, the sandbox, the judge, a fresh secret per check; the same report as the
  self-paced button). One check runs at a time (the machine also serves the class), for
  :data:`CHECK_SECONDS` at most (then its whole session is killed); the report is kept in
  memory and sent after the next check has the slot, within :data:`SEND_SECONDS`. A student
  has one connection in flight at most (a second is refused at once), and at most
  ``--checks-per-day`` a calendar day per assignment (``check/usage.json``, kept across
  restarts; 0: no limit). Every check graded counts; one whose student left before its
  turn (told every :data:`WAIT_NOTE` seconds that it waits, so a closed connection shows) is
  not graded, and one that failed on the grader's side is given back. An account outside
  the classroom is refused before anything is held for it; :data:`MAX_HANDLERS` connections
  are answered at once, more are closed unanswered.
- the answer: the report's lines (printable, :data:`MAX_LINE` characters each, at most
  :data:`MAX_REPORT` in all, never a line of the protocol's own), then
  :data:`autograder.selfcheck.protocol.SENTINEL` and the exit status (0 full marks, 1 points
  lost, 2 not graded or refused). ``course.progress.selfcheck`` is the client
  (``$TFS_HUB_CHECK`` names the socket in every server the hub starts).

Nothing a student sends is kept: the folder of each check is removed when it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder.classroom.hubcheck_io import (  # noqa: F401 - re-exported
    MAX_BYTES,
    MAX_HEADER,
    MAX_LINE,
    READ_SECONDS,
    Gone,
    Refused,
    Usage,
    _close_gently,
    _gone,
    _line,
    _peer_uid,
    read_request,
)
from autograder.selfcheck.protocol import SENTINEL

SOCKET_NAME = "check.sock"
CHECK_SECONDS = 300.0               # one check, grading included; then its processes are killed
SEND_SECONDS = 30.0                 # the whole report, to a client that reads it slowly
MAX_REPORT = 64 * 1024              # characters of report, all lines together
MAX_CONNECTIONS = 64                # checks at once, classroom accounts only
MAX_HANDLERS = 256                  # connections being answered at once, anyone's
WAIT_NOTE = 30.0                    # seconds between "still waiting" lines


def socket_path(folder: Path) -> Path:
    """Where the service listens in the classroom ``folder``."""
    return folder / "check" / SOCKET_NAME


class HubCheck:
    """The service's state: who may ask, who is being served, the one grading slot."""

    def __init__(self, folder: Path, root: Path, per_day: int, python: str = sys.executable):
        from autograder.classroom.setup import account_uids

        self.folder, self.root, self.python = folder, root, python
        self.accounts = account_uids(folder)            # uid -> name, classroom accounts only
        self.work = folder / "check" / "work"
        self.usage = Usage(folder / "check" / "usage.json", per_day)
        self.busy: set[str] = set()
        self.lock = threading.Lock()
        self.slot = threading.Semaphore(1)
        self.waiting = 0

    def who(self, sock: socket.socket) -> str:
        name = self.accounts.get(_peer_uid(sock))
        if name is None:
            raise Refused("only the classroom's accounts can use the class's check")
        return name

    def claim(self, name: str) -> None:
        """Mark ``name`` as served (raises Refused when a check of theirs is in flight);
        :meth:`serve_one` releases it."""
        with self.lock:
            if name in self.busy:
                raise Refused("a check of yours is already running: wait for its report")
            self.busy.add(name)

    def serve_one(self, sock: socket.socket, name: str, send) -> int:
        """Answer one connection of account ``name``: returns the exit status sent after the
        report."""
        from autograder.core.course import PipelineError
        from autograder.selfcheck.check import day_of

        try:
            filename, data = read_request(sock)
            try:
                day = day_of(Path(filename), self.root)
            except PipelineError as exc:          # no day of the course
                raise Refused(str(exc)) from None
            left = self.usage.take(name, day)
            graded = False
            try:
                with self.lock:
                    ahead = self.waiting
                    self.waiting += 1
                try:
                    if ahead:
                        send(f"Waiting for {ahead} check(s) of the class ahead of yours...")
                    # Told every WAIT_NOTE seconds that it waits: a client that left is found
                    # (the line fails) and its check is not graded.
                    while not self.slot.acquire(timeout=WAIT_NOTE):
                        send("... still waiting for the checks ahead of yours")
                    try:
                        if _gone(sock):
                            raise Gone("the client left while it waited")
                        rc, report = self.grade(name, day, filename, data)
                        graded = True
                    finally:
                        self.slot.release()
                finally:
                    with self.lock:
                        self.waiting -= 1
            finally:
                if not graded:
                    self.usage.refund(name, day)
            if report:                      # sent once the slot is free for the next check
                send("\n".join(report))
            if left >= 0:
                send(f"({left} check(s) of {day} left today.)")
            return rc
        finally:
            with self.lock:
                self.busy.discard(name)

    def grade(self, name: str, day: str, filename: str, data: bytes) -> tuple[int, list[str]]:
        """Grade ``data`` as ``name``'s ``day`` in a fresh folder: (exit status, report lines).

        The grading runs in a session of its own; at :data:`CHECK_SECONDS` the whole session
        is killed and the report is what came so far: no check holds the slot longer."""
        from autograder.grading.pipeline import notebook_name

        self.work.mkdir(parents=True, exist_ok=True)
        os.chmod(self.work, 0o700)
        tmp = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.work))
        lines: list[str] = []
        try:
            copy = tmp / day / notebook_name(day)
            copy.parent.mkdir()
            copy.write_bytes(data)
            cmd = [self.python, "-m", "autograder", "selfcheck", "--root", str(self.root),
                   "--sandbox", "--no-save", "--no-helper", "--shown", filename, str(copy)]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=tmp, start_new_session=True)
            fd = proc.stdout.fileno() if proc.stdout is not None else -1
            stop = threading.Event()

            def read() -> None:
                """Lines of the report from the raw pipe, until it ends or ``stop`` (a helper
                that left the session may hold the pipe open: never waited for)."""
                buf, size = b"", 0
                while not stop.is_set():
                    ready, _, _ = select.select([fd], [], [], 0.2)
                    if not ready:
                        continue
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    buf += chunk
                    *done, buf = buf.split(b"\n")
                    for raw in done:
                        if raw.startswith(b"\x1e") or size > MAX_REPORT:
                            continue
                        text = _line(raw.decode("utf-8", "replace"))
                        size += len(text) + 1
                        lines.append(text)
                    buf = buf[-MAX_LINE * 4:]      # an endless line keeps only its tail

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            try:
                rc = proc.wait(timeout=CHECK_SECONDS)
            except subprocess.TimeoutExpired:
                rc = None
            reader.join(5 if rc is not None else 0)
            if rc is None or reader.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)      # the grading and its helpers
                proc.wait()
            stop.set()
            reader.join(2)
            if proc.stdout is not None and not reader.is_alive():
                proc.stdout.close()
            report = list(lines)
            if rc is None:
                report.append(f"The check was stopped after {CHECK_SECONDS:.0f} s (a cell "
                              "that runs long?): not graded.")
                return 2, report
            return (rc if rc in (0, 1) else 2), report
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def make_server(service: HubCheck, path: Path) -> socketserver.ThreadingUnixStreamServer:
    """The listening server (the socket ``0666`` in a ``0711`` root folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path.parent, 0, 0)
    os.chmod(path.parent, 0o711)
    path.unlink(missing_ok=True)
    active = threading.BoundedSemaphore(MAX_CONNECTIONS)
    handlers = threading.BoundedSemaphore(MAX_HANDLERS)

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            if not handlers.acquire(blocking=False):
                return                                  # a flood: closed unanswered
            try:
                self._handle(self.request)
            finally:
                handlers.release()

        def _handle(self, sock: socket.socket) -> None:
            deadline = [0.0]

            def send(text: str) -> None:
                """Send ``text``'s lines, all within SEND_SECONDS (a slow reader is dropped)."""
                end = deadline[0] or time.monotonic() + SEND_SECONDS
                for line in text.split("\n"):
                    left = end - time.monotonic()
                    if left <= 0:
                        raise Gone("the client reads too slowly")
                    try:
                        sock.settimeout(left)
                        sock.sendall((line if line.startswith(SENTINEL) else _line(line))
                                     .encode("utf-8", "replace") + b"\n")
                    except OSError as exc:           # a timeout too
                        raise Gone(str(exc)) from None

            try:
                name = service.who(sock)            # before anything is held for it
                service.claim(name)
            except Refused as exc:
                with contextlib.suppress(Gone, OSError):
                    send(f"Self-check refused: {exc}")
                    send(f"{SENTINEL}2")
                    _close_gently(sock, 0.2)
                return
            if not active.acquire(blocking=False):
                with service.lock:
                    service.busy.discard(name)
                return                                  # too many at once: closed unanswered
            try:
                try:
                    rc = service.serve_one(sock, name, send)
                except Refused as exc:
                    rc = 2
                    send(f"Self-check refused: {exc}")
                except Gone:
                    raise
                except Exception as exc:  # noqa: BLE001 - answered, logged in one line
                    rc = 2
                    print(f"check of {name}: {type(exc).__name__}: {str(exc)[:200]}",
                          file=sys.stderr, flush=True)
                    send("Self-check failed on the grader's side (the check was not counted): "
                         "tell your instructor.")
                deadline[0] = time.monotonic() + 5
                send(f"{SENTINEL}{rc}")
                _close_gently(sock)
            except (Gone, OSError):
                pass                                    # the student's side went away
            finally:
                active.release()

    class Server(socketserver.ThreadingUnixStreamServer):
        daemon_threads = True
        request_queue_size = socket.SOMAXCONN       # a burst of connects waits, not fails

    server = Server(str(path), Handler)
    os.chmod(path, 0o666)
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder.classroom.hubcheck")
    p.add_argument("--dir", type=Path, required=True, help="the classroom's folder")
    p.add_argument("--root", type=Path, required=True, help="the course checkout")
    p.add_argument("--checks-per-day", type=int, default=20)
    args = p.parse_args(argv)
    folder = args.dir.resolve()
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))   # many refused clients at once
    service = HubCheck(folder, args.root.resolve(), args.checks_per_day)
    server = make_server(service, socket_path(folder))
    print(f"class self-check listening on {socket_path(folder)}", flush=True)
    try:
        server.serve_forever()
    finally:
        socket_path(folder).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
