"""A fork server per grading worker: PyTorch imported once, a fresh kernel process per submission.

Without it every graded notebook pays for a new interpreter that imports PyTorch, IPython and
matplotlib (about 1.5 of the 2.5 CPU seconds a notebook costs the grader). With it (root
grading, sandboxed: the class-grading case), each worker starts one bubblewrap sandbox, like a
kernel's, running :mod:`autograder.sandbox.forkserver_main`, which imports them once and forks one
kernel at a time:

- each kernel is a new process with a uid of its own (``FORKED_UID_BASE`` + its worker's pid
  and a counter), its own cgroup (the host moves it there before it runs anything), its
  rlimits, no capabilities and no new privileges, the sandbox's seccomp filter, fresh
  folders, its own environment and connection file;
- between two kernels the server kills every process left in the sandbox, removes everything
  a kernel could write and checks that no System V IPC object or socket is left; when it
  cannot (or a kernel left too many files to remove), it exits and the next kernel gets a
  new sandbox;
- the host never trusts the server's sandbox for anything but the kernel's sockets (reached
  through ``/proc/<pid>/root`` as before): the kernel's pid comes from the kernel's socket
  credentials, its log goes to a host file through a descriptor, its exit status and the
  memory ceiling are read by the host.

:class:`ForkServer` is the host's end; :class:`ForkedKernel` is what jupyter_client's
provisioner holds instead of a ``Popen`` (``GradingKernelManager`` asks :func:`current`).
Without root, or with ``TFS_FORK_SERVER=0``, each kernel gets its own sandbox as before
(:mod:`autograder.sandbox`).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

from autograder import sandbox
from autograder.sandbox import kernel_files, seccomp
from autograder.sandbox.cgroups import _cgroup_oom, _join_cgroup, _remove_cgroups
from autograder.sandbox.kernel_files import KERNEL_ARGS, read_capped

MAX_MSG = 1 << 16
CAPS = (
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_KILL",
    "CAP_CHOWN",
    "CAP_FOWNER",
    "CAP_DAC_OVERRIDE",
    "CAP_SETPCAP",
)
# Variables the server's interpreter reads when it starts; a kernel that needs other values
# gets a new server. The rest of a kernel's environment is its own (set after the fork).
START_ENV = (
    "PATH",
    "LANG",
    "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE",
    "MALLOC_ARENA_MAX",
    "MPLBACKEND",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "TZ",
)
_SERVER: ForkServer | None = None
_KERNELS = itertools.count(1)  # kernels this worker has forked, across its servers
_NEXT: tuple | None = None  # (server, spec) of the kernel the worker is about to start


def wanted(settings: dict) -> bool:
    """Whether kernels of these settings are forked from a server: sandboxed, root grader."""
    return (
        bool(settings.get("sandbox"))
        and os.geteuid() == 0
        and os.environ.get("TFS_FORK_SERVER", "1") != "0"
    )


class ForkServerError(RuntimeError):
    pass


class ForkServer:
    """One sandbox whose server process forks kernels, for the settings of ``spec``."""

    def __init__(self, spec: sandbox.Spec, python: str, log: Path):
        self.key = _sandbox_key(spec, python)
        self.busy: ForkedKernel | None = None
        self.cleaning: ForkedKernel | None = None  # exited; its sandbox not yet said clean
        bw = sandbox.bwrap_path()
        if bw is None:
            raise ForkServerError("bubblewrap vanished; refusing to run kernels unsandboxed")
        self.ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        info_r, info_w = os.pipe()
        box = sandbox.Spec(
            sandbox=True,
            limits=spec.limits,
            private=spec.private,
            hide=spec.hide,
            ro_bind=spec.ro_bind,
            env=_start_env(spec),
        )
        filt = seccomp.program_fd()
        argv = sandbox.bwrap_argv(box, bw, as_root=True, caps=CAPS, seccomp_fd=filt)
        source = (Path(__file__).with_name("forkserver_main.py")).read_text()
        argv += ["--info-fd", str(info_w), "--", python, "-c", source, str(theirs.fileno())]
        logfd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=logfd,
                stderr=logfd,
                pass_fds=(theirs.fileno(), info_w, *([filt] if filt is not None else [])),
                env={"PATH": "/usr/bin:/bin"},
            )
        finally:
            if filt is not None:
                os.close(filt)
            os.close(logfd)
            os.close(info_w)
            theirs.close()
        try:
            self.sandbox_pid = sandbox.read_child_pid(info_r)
            if self.sandbox_pid is None:
                raise ForkServerError("bubblewrap did not start the sandbox")
            ready = self._recv(120)
            if "ready" not in ready:
                raise ForkServerError(ready.get("error") or "no ready message")
        except (ValueError, KeyError, UnicodeDecodeError, OSError, ForkServerError) as exc:
            self.close()
            raise ForkServerError(
                f"the fork server did not start: {exc}; its log: "
                + read_capped(log, 2000, tail=True).decode("utf-8", "replace")
            ) from None

    # ------------------------------------------------------------------ messages
    def _recv(self, timeout: float | None) -> dict:
        self.ctrl.settimeout(timeout)
        try:
            msg = self.ctrl.recv(MAX_MSG)
        finally:
            self.ctrl.settimeout(None)
        if not msg:
            raise ForkServerError("the fork server is gone")
        data = json.loads(msg)
        if not isinstance(data, dict):
            raise ForkServerError("a malformed message")
        return data

    def alive(self) -> bool:
        return self.proc.poll() is None and self.busy is None

    def settle(self, timeout: float = 30) -> bool:
        """Wait for the server's ``clean`` after the last kernel's exit (it cleans while the
        host scores); False, with the server closed, when it could not clean the sandbox."""
        kernel, self.cleaning = self.cleaning, None
        if kernel is None:
            return self.alive()
        try:
            msg = self._recv(timeout)
        except (OSError, ValueError, ForkServerError):
            msg = {}
        # Every process of the kernel is gone now: its cgroups can go.
        _remove_cgroups(kernel.groups)
        if msg.get("clean") is not True:
            self.close()
            return False
        return self.alive()

    def close(self) -> None:
        if self.busy is not None:  # its kernel dies with the sandbox: let go of it
            self.busy.abandon()
        if self.cleaning is not None:
            _remove_cgroups(self.cleaning.groups)
            self.cleaning = None
        try:
            self.ctrl.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    # ------------------------------------------------------------------ kernels
    def spawn(self, spec: sandbox.Spec, connection_file: str) -> ForkedKernel:
        """Fork one kernel with ``spec``'s environment and limits, speaking through the
        connection ``connection_file`` (its sockets inside the sandbox)."""
        if not self.settle():
            raise ForkServerError("the fork server is not ready for a kernel")
        private = Path(spec.private)
        info = json.loads(Path(connection_file).read_text())
        info.update(transport="ipc", ip=sandbox.INNER_IPC)
        uid = _next_uid()
        conn = f"{sandbox.INNER_KERNEL}/connection.json"
        startup_dir = f"{sandbox.INNER_IPYTHON}/profile_default/startup"
        startup = read_capped(Path(spec.startup), 1 << 15).decode() if spec.startup else ""
        req = {
            "uid": uid,
            "env": spec.env,
            "rlimits": sandbox.rlimits(spec.limits),
            "cwd": sandbox.INNER_WORK,
            "argv": ["-c", "-f", conn, *KERNEL_ARGS],
            "folders": [
                sandbox.INNER_HOME,
                sandbox.INNER_WORK,
                sandbox.INNER_KERNEL,
                sandbox.INNER_IPYTHON,
                f"{sandbox.INNER_IPYTHON}/profile_default",
                startup_dir,
                *([kernel_files.INNER_STANDINS] if spec.standins else []),
            ],
            "files": {
                conn: json.dumps(info),
                # the stand-ins of the days before this kernel's (course.standins)
                **(kernel_files.standins_files(spec.standins) if spec.standins else {}),
                **({f"{startup_dir}/{sandbox.STARTUP_NAME}": startup} if startup else {}),
            },
        }
        log = os.open(
            private / "kernel.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600
        )
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        pidfd = None
        try:
            socket.send_fds(
                self.ctrl, [json.dumps({"spawn": req}).encode()], [log, theirs.fileno()]
            )
            os.close(log)
            log = None
            theirs.close()
            reply = self._recv(30)
            if "spawned" not in reply:
                raise ForkServerError(reply.get("error") or "no spawned message")
            host_pid = _peer_pid(ours, 30)
            pidfd = os.pidfd_open(host_pid)
            if _ns_pid(host_pid) != int(reply["spawned"]):
                raise ForkServerError("the forked kernel is not the one the server started")
            sandbox._write_json(private / "sandbox.json", {"child-pid": self.sandbox_pid})
            groups = []
            if spec.cgroup_parent:
                groups = _join_cgroup(spec.cgroup_parent, spec.limits, host_pid)
            ours.send(b"go")
        except (OSError, ValueError, KeyError, ForkServerError) as exc:
            if pidfd is not None:
                os.close(pidfd)
            self.close()
            raise ForkServerError(f"the fork server could not start a kernel: {exc}") from None
        finally:
            if log is not None:
                os.close(log)
            ours.close()
        self.busy = ForkedKernel(self, host_pid, pidfd, groups, private)
        return self.busy


class ForkedKernel:
    """What a provisioner holds instead of a ``Popen``: one forked kernel, signalled through a
    pidfd, its exit status from the server (128 + N when signal N killed it)."""

    stdin = stdout = stderr = None

    def __init__(self, server: ForkServer, pid: int, pidfd: int, groups: list, private: Path):
        self.server, self.pid, self.pidfd = server, pid, pidfd
        self.groups, self.private = groups, private
        self.returncode: int | None = None
        self.cpu_seconds: float | None = None

    def poll(self, timeout: float = 0) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            msg = self.server._recv(timeout)
        except (TimeoutError, BlockingIOError):
            return None
        except (OSError, ValueError, ForkServerError):
            msg = {"exited": 128 + signal.SIGKILL, "gone": True}
        self._finish(msg)
        return self.returncode

    def _finish(self, msg: dict) -> None:
        code, cpu = msg.get("exited"), msg.get("cpu")
        self.returncode = int(code) if isinstance(code, int) else 1
        # the kernel's own CPU seconds (not its children's), as the server's wait4 saw them
        self.cpu_seconds = float(cpu) if isinstance(cpu, (int, float)) else None
        sandbox._write_json(
            self.private / "exit.json",
            {"code": self.returncode, "oom": _cgroup_oom(self.groups), "cpu": self.cpu_seconds},
        )
        os.close(self.pidfd)
        self.server.busy = None
        if "exited" not in msg or msg.get("gone"):  # no server, or a message out of turn
            _remove_cgroups(self.groups)
            self.server.close()
        else:
            # The server now kills what the kernel left and cleans; settle() waits for that
            # (and removes the cgroups) before the next kernel.
            self.server.cleaning = self

    def abandon(self) -> None:
        """The server is going away before it said this kernel exited (it was too slow to
        clean up, or died): let go of the pidfd and the cgroups; no exit status is known."""
        if self.returncode is None:
            self.returncode = 128 + signal.SIGKILL
            os.close(self.pidfd)
            _remove_cgroups(self.groups)
        self.server.busy = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked kernel", timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self.pidfd, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        # The server says "exited" within milliseconds: waiting for it here spares the
        # 0.1 s polling loop of jupyter_client's shutdown.
        self.poll(timeout=2)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


# ---------------------------------------------------------------------- the worker's server


def prepare(spec: sandbox.Spec, python: str, log: Path) -> None:
    """Make a server ready for a kernel of ``spec`` (reusing this worker's when it fits) and
    name it for the next kernel the worker starts (:func:`current`)."""
    global _SERVER, _NEXT
    if _SERVER is not None and (_SERVER.key != _sandbox_key(spec, python) or not _SERVER.settle()):
        _SERVER.close()
        _SERVER = None
    if _SERVER is None:
        _SERVER = ForkServer(spec, python, log)
    _NEXT = (_SERVER, spec)


def current() -> tuple | None:
    """(server, spec) for the kernel about to start, once; None: the launcher starts it."""
    global _NEXT
    nxt, _NEXT = _NEXT, None
    return nxt


def forget() -> None:
    """The next kernel is not forked (``prepare`` was not called for it)."""
    global _NEXT
    _NEXT = None


def _next_uid() -> int:
    """A uid for the next kernel: this worker's own range of 256 (by its pid, unique among
    running workers; pids are below 2**22), in turn, so that no two kernels in a row share
    one, nor two kernels that run at once, nor a kernel of the per-kernel launcher; never
    one the machine's user database knows (an LDAP or SSSD user)."""
    import pwd

    for _ in range(256):
        uid = sandbox.FORKED_UID_BASE + os.getpid() * 256 + next(_KERNELS) % 256
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise ForkServerError("every uid of this worker's range belongs to a user")


def _start_env(spec: sandbox.Spec) -> dict:
    """The part of a kernel's environment its server's interpreter starts with."""
    return {k: v for k, v in spec.env.items() if k in START_ENV}


def _sandbox_key(spec: sandbox.Spec, python: str) -> str:
    """What a server's sandbox is made of: a kernel whose key differs needs another server."""
    return json.dumps(
        [
            python,
            spec.hide,
            spec.ro_bind,
            _start_env(spec),
            spec.limits.get("disk"),
            spec.limits.get("shm"),
        ],
        sort_keys=True,
    )


def _peer_pid(sock: socket.socket, timeout: float) -> int:
    """The pid (in our namespace) of the process that sent the next message on ``sock``."""
    sock.settimeout(timeout)
    size = struct.calcsize("3i")
    msg, anc, _, _ = sock.recvmsg(16, socket.CMSG_SPACE(size))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= size:
            pid, _, _ = struct.unpack("3i", data[:size])
            if msg == b"pid" and pid > 0:
                return pid
    raise ForkServerError("the kernel's pid was not received")


def _ns_pid(host_pid: int) -> int:
    """The innermost pid of ``host_pid`` (its pid inside the sandbox)."""
    text = read_capped(Path(f"/proc/{host_pid}/status"), 8192).decode()
    for line in text.splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise ForkServerError("no NSpid line")
