"""A warm helper for ``python -m autograder selfcheck``: the report in seconds after the first.

Most of a self-check's time goes before the notebook is read: starting Python, importing
nbgrader and the day's checks, and starting a kernel that imports PyTorch (4-6 s of the 5-9 s
on 2 cores). The notebook's Self-check button hides that behind a standby started ahead of
time (:mod:`autograder.selfcheck.standby`); this helper does the same for the command line.

- ``selfcheck NOTEBOOK`` (:func:`check`) asks the learner's helper, a background process of
  their own that listens on a Unix socket in a folder only they can open
  (``$XDG_RUNTIME_DIR/tfs-selfcheck``, else ``/tmp/tfs-selfcheck-<uid>``; a folder of another
  owner, or one others can open, is refused). If none answers, it starts one
  (``python -m autograder.selfcheck.helper``) and asks again: the first check of a login costs
  what a check always cost.
- The helper answers with the report of a standby: the one it started for that notebook after
  the last check (ready by now), or a new one. After each check it starts a fresh standby for
  the same notebook (a standby grades once), so the next check of it only grades.
- Bounds: standbys for the :data:`MAX_STANDBYS` notebooks checked last (each about 0.6 GB: a
  kernel with PyTorch and a process with nbgrader), older ones stopped; the helper exits after
  :data:`IDLE_SECONDS` without a request, after :data:`MAX_LIFETIME`, when a request comes
  from other code (the course or the grader changed: :func:`code_stamp`), and on ``stop``. Its
  standbys end with it (their input closes), and it ends with the login where the runtime
  folder does.
- Same verdicts as ``grade``: a standby grades with ``selfcheck``'s pipeline (nbgrader
  autograde, the day's hidden tests, the judge, a fresh secret per check).
- ``--no-helper`` or ``TFS_SELFCHECK_HELPER=0``: grade in the command's own process.

One helper serves one Python and one environment (:func:`helper_name`): a check from another
virtual environment, or with another ``COURSE_*`` setting, gets a helper of its own.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import os
import socket
import socketserver
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder.selfcheck.protocol import READY, SENTINEL

MAX_STANDBYS = 2
IDLE_SECONDS = 30 * 60
MAX_LIFETIME = 8 * 3600
RESTART = "\x1erestart"
BYE = "\x1ebye"
MAX_REQUEST = 64 * 1024
# What a standby's result depends on besides the notebook and the code (one helper per value).
_ENV_PREFIXES = ("COURSE_", "TFS_", "PYTHON", "OMP_", "MKL_", "CUDA_", "NBGRADER_")
_ENV_NAMES = ("HOME", "XDG_RUNTIME_DIR", "JUPYTER_PATH", "JUPYTER_CONFIG_DIR")


class HelperError(Exception):
    """The helper cannot be used here (the caller grades in its own process)."""


def enabled() -> bool:
    return os.environ.get("TFS_SELFCHECK_HELPER", "1").strip() != "0"


def runtime_dir() -> Path:
    """The learner's private folder for the helper's socket, lock and log.

    Raises:
        HelperError: the folder exists but is not the learner's alone (owner, mode 0700).
    """
    forced = os.environ.get("TFS_SELFCHECK_DIR", "").strip()
    xdg = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if forced:
        base = Path(forced)
    elif xdg and Path(xdg).is_dir():
        base = Path(xdg) / "tfs-selfcheck"
    else:
        base = Path(tempfile.gettempdir()) / f"tfs-selfcheck-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise HelperError(f"{base} is not a folder that only you can open (mode 0700, yours)")
    return base


def helper_name() -> str:
    """The helper's name for this Python and environment: 16 hex digits."""
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES)
    blob = json.dumps([sys.executable, env])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def code_stamp(root: Path) -> str:
    """A hash of what a self-check's verdicts depend on besides the notebook: the grader's and
    the course package's code and the course's source notebooks (names, sizes, change times).
    A helper serving other code stops, and a new one starts."""
    import course

    h = hashlib.sha256()
    grader = Path(__file__).resolve().parents[1]          # the autograder package
    trees = [(grader, "*.py"), (Path(course.__file__).parent, "*.py"),
             (Path(root) / "source", "*.ipynb")]
    for top, pattern in trees:
        for path in sorted(top.rglob(pattern)):
            with contextlib.suppress(OSError):
                st = path.stat()
                h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- the client


def check(notebook: Path, root: Path | None = None, save: bool = True,
          out=None) -> int | None:
    """Self-check ``notebook`` through the learner's helper (started if none runs); print the
    report to ``out`` (default stdout). Returns the exit status (as ``selfcheck``'s), or None
    when the helper cannot be used: the caller then grades in its own process."""
    from autograder.core.course import PipelineError, find_root

    out = out or sys.stdout
    notebook = Path(notebook).expanduser().resolve()
    if not enabled() or not notebook.is_file():
        return None          # a missing notebook gets its error from the usual path
    try:
        folder = runtime_dir()
        course_root = find_root(root or notebook.parent)
    except (HelperError, OSError, PipelineError) as exc:
        print(f"selfcheck: grading without the helper ({exc})", file=sys.stderr)
        return None
    path = folder / f"{helper_name()}.sock"
    if len(str(path)) > 100:                     # a Unix socket's path holds 107 bytes
        return None
    request = {"op": "check", "notebook": str(notebook),
               "root": str(root.resolve()) if root else None, "save": bool(save),
               "stamp": code_stamp(course_root)}
    for _ in range(2):
        sock = _connect(path) or _start(folder, path)
        if sock is None:
            print(f"selfcheck: the helper did not start (its log: {path.with_suffix('.log')});"
                  " grading without it", file=sys.stderr)
            return None
        with sock:
            answer = _relay(sock, request, out)
        if answer != RESTART:
            return answer
    return None


def stop(folder: Path | None = None) -> bool:
    """Ask this environment's helper to stop; True if one answered."""
    path = (folder or runtime_dir()) / f"{helper_name()}.sock"
    sock = _connect(path)
    if sock is None:
        return False
    with sock:
        sock.sendall(json.dumps({"op": "stop"}).encode() + b"\n")
        with contextlib.suppress(OSError):
            sock.makefile("rb").readline()
    return True


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def _start(folder: Path, path: Path, wait: float = 30.0) -> socket.socket | None:
    """Start the helper (one at a time: the lock) and connect to it."""
    with open(folder / f"{path.stem}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _connect(path)                    # another command started it meanwhile
        if sock is not None:
            return sock
        log = path.with_suffix(".log")
        with contextlib.suppress(OSError):
            if log.stat().st_size > 1 << 20:
                log.unlink()
        with open(log, "ab") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "autograder.selfcheck.helper", str(path)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, cwd="/",
                start_new_session=True, close_fds=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and proc.poll() is None:
            sock = _connect(path)
            if sock is not None:
                threading.Thread(target=proc.wait, daemon=True).start()
                return sock
            time.sleep(0.05)
        return None


def _relay(sock: socket.socket, request: dict, out) -> int | str | None:
    """Send the request; print the report lines; the exit status, RESTART, or None."""
    sock.sendall(json.dumps(request).encode() + b"\n")
    reader = sock.makefile("r", encoding="utf-8", errors="replace", newline="\n")
    printed = False
    for line in reader:
        if line.startswith(SENTINEL):
            with contextlib.suppress(ValueError):
                return int(line[len(SENTINEL):].strip())
            return 2
        if line.rstrip("\n") == RESTART:
            return RESTART
        out.write(line)
        out.flush()
        printed = True
    print("selfcheck: the helper stopped before the report was complete"
          + ("; grading again without it" if printed else "; grading without it"),
          file=sys.stderr)
    return None


# --------------------------------------------------------------------------- the helper


class Helper:
    """The server: standbys per (notebook, root, save), the bounds, the clean-up."""

    def __init__(self, path: Path, idle: float = IDLE_SECONDS, lifetime: float = MAX_LIFETIME,
                 max_standbys: int = MAX_STANDBYS):
        self.path = path
        self.idle, self.lifetime, self.max_standbys = idle, lifetime, max_standbys
        self.standbys: collections.OrderedDict = collections.OrderedDict()
        self.stamps: dict[str, str] = {}
        self.lock = threading.Lock()
        self.busy = 0
        self.started = self.last = time.monotonic()
        self.closing = False
        self.server: socketserver.ThreadingUnixStreamServer | None = None
        self.alive = None        # the lock file held while this helper serves its name

    def _unlist(self) -> None:
        """Remove the socket and release the name: no new client reaches this helper. Once
        only: after the release the path may be the next helper's socket."""
        if self.alive is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.alive.close()
        self.alive = None

    def _standby(self, key: tuple[str, str | None, bool]) -> subprocess.Popen:
        notebook, root, save = key
        cmd = [sys.executable, "-m", "autograder", "selfcheck", "--standby", "--no-helper"]
        if not save:
            cmd.append("--no-save")
        if root:
            cmd += ["--root", root]
        cmd.append(notebook)
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, encoding="utf-8",
                                errors="replace", cwd=str(Path(notebook).parent),
                                start_new_session=False)

    @staticmethod
    def _release(proc: subprocess.Popen) -> None:
        """Close a standby's input (it stops without grading) and reap it in the background."""
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.close()
        threading.Thread(target=proc.wait, daemon=True).start()

    def handle(self, rfile, wfile) -> None:
        def send(text: str) -> None:
            with contextlib.suppress(OSError, ValueError):
                wfile.write(text.encode("utf-8", "replace"))
                wfile.flush()

        try:
            request = json.loads(rfile.readline(MAX_REQUEST))
            op = request.get("op")
        except (ValueError, AttributeError):
            send(f"selfcheck helper: not a request\n{SENTINEL}2\n")
            return
        if op == "stop":
            send(BYE + "\n")
            self.shutdown()
            return
        try:
            key = (str(request["notebook"]), request.get("root"), bool(request["save"]))
            stamp = str(request["stamp"])
            course_root = request.get("root") or str(Path(key[0]).parent)
        except (KeyError, TypeError):
            send(f"selfcheck helper: not a request\n{SENTINEL}2\n")
            return
        with self.lock:
            if self.closing or self.stamps.setdefault(course_root, stamp) != stamp:
                self.closing = True
                self._unlist()           # the client's next helper may start at once
                send(RESTART + "\n")
                threading.Thread(target=self.shutdown, daemon=True).start()
                return
            self.busy += 1
            self.last = time.monotonic()
            proc = self.standbys.pop(key, None)
        try:
            if proc is None or proc.poll() is not None:
                proc = self._standby(key)
            self._grade(proc, send)
        finally:
            self._release(proc)
            with self.lock:
                self.busy -= 1
                self.last = time.monotonic()
                if not self.closing:
                    self._keep(key, self._standby(key))

    def _grade(self, proc: subprocess.Popen, send) -> None:
        """'go' to the standby; every report line to the client (the ready line is the
        standby's own). A client that went away does not stop the check (progress is saved)."""
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        except (OSError, ValueError):
            pass
        for line in proc.stdout:
            if line.rstrip("\n") == READY:
                continue
            send(line)
            if line.startswith(SENTINEL):
                return
        send(f"selfcheck helper: the check stopped without a report (exit code "
             f"{proc.wait()})\n{SENTINEL}2\n")

    def _keep(self, key, proc: subprocess.Popen) -> None:
        """Keep ``proc`` ready for ``key``; stop the least recently used beyond the bound.
        Called with the lock held."""
        old = self.standbys.pop(key, None)
        if old is not None:
            self._release(old)
        self.standbys[key] = proc
        while len(self.standbys) > self.max_standbys:
            _, oldest = self.standbys.popitem(last=False)
            self._release(oldest)

    def watch(self) -> None:
        """Stop after the idle time or the lifetime; forget standbys that died."""
        while not self.closing:
            time.sleep(min(5.0, self.idle / 4))
            with self.lock:
                now = time.monotonic()
                for key in [k for k, p in self.standbys.items() if p.poll() is not None]:
                    del self.standbys[key]
                quiet = self.busy == 0 and now - self.last > self.idle
                if quiet or now - self.started > self.lifetime:
                    self.closing = True
            if self.closing:
                self.shutdown()

    def shutdown(self) -> None:
        with self.lock:
            self.closing = True
            standbys = list(self.standbys.values())
            self.standbys.clear()
        for proc in standbys:
            self._release(proc)
        with self.lock:
            self._unlist()
        if self.server is not None:
            threading.Thread(target=self.server.shutdown, daemon=True).start()

    def serve(self) -> int:
        alive = open(self.path.with_suffix(".alive"), "a")  # noqa: SIM115 - held while serving
        deadline = time.monotonic() + 15
        while True:      # a helper that is stopping lets go of the name within seconds
            try:
                fcntl.flock(alive, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline or _connect(self.path) is not None:
                    alive.close()
                    return 0                              # another helper serves this name
                time.sleep(0.1)
        self.alive = alive
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()                            # a dead helper's socket
        helper = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                helper.handle(self.rfile, self.wfile)

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

        old_umask = os.umask(0o077)
        try:
            self.server = Server(str(self.path), Handler)
        finally:
            os.umask(old_umask)
        print(f"helper {os.getpid()} serving {self.path}", file=sys.stderr, flush=True)
        threading.Thread(target=self.watch, daemon=True).start()
        try:
            self.server.serve_forever(poll_interval=0.5)
        finally:
            self.shutdown()
            self.server.server_close()
        return 0


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m autograder.selfcheck.helper SOCKET (started by selfcheck)",
              file=sys.stderr)
        return 2
    idle = float(os.environ.get("TFS_SELFCHECK_IDLE", IDLE_SECONDS))
    return Helper(Path(args[0]), idle=idle).serve()


if __name__ == "__main__":
    sys.exit(main())
