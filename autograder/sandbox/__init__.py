"""Run a submission's Jupyter kernel inside a bubblewrap sandbox, with resource limits.

The kernel command of the grading kernelspec is ``python -m autograder.sandbox <spec.json> --
<python> -c <kernel main> -f {connection_file}`` (``kernel_files.kernel_argv``). This launcher
runs outside the sandbox, as the grader's user, and:

1. sends the kernel's own stdout/stderr (C-level writes, crash messages) to ``kernel.log`` in
   the kernel's *private* folder, a host folder that the sandbox never shows;
2. writes the kernel's copy of the connection file, with its IPC sockets inside the sandbox
   (``/tmp/.kernel``), and opens every folder the kernel may read (the Python environment,
   ``course/``, each dataset) as a file descriptor while it still can;
3. forks: the child joins a fresh cgroup where the machine allows (memory, processes), drops
   to an unprivileged uid of its own when the grader is root, applies the rlimits (address
   space, CPU seconds, file size, open files, processes) and replaces itself with ``bwrap``;
   the parent records the sandbox's pid in ``sandbox.json`` (the host reaches the kernel's
   sockets through ``/proc/<pid>/root``), waits, and writes ``exit.json`` (exit status and
   whether the cgroup hit its memory ceiling).

Inside bwrap the kernel sees a read-only system, the read-only binds of step 2 and nothing
else of the host's top-level folders (each is covered by an empty read-only tmpfs). All it can
write is a size-capped tmpfs at ``/tmp`` (its home, working folder and IPython folder) and a
small ``/dev/shm``: no host path is writable, so nothing it writes, links or leaves behind
reaches the host, another submission or the next kernel. No network, new PID/IPC/UTS/user
namespaces, no capabilities.

Without bubblewrap (``--no-sandbox``: a learner's self-check of their own notebook) the same
launcher applies the rlimits and runs the kernel directly in the private folder.

A root grader forks its kernels from one such sandbox per worker instead of starting one per
kernel (:mod:`autograder.sandbox.forkserver`); :func:`bwrap_argv` and :func:`rlimits` serve both.

Package: this module is the launcher; :mod:`~autograder.sandbox.seccomp` and
:mod:`~autograder.sandbox.cgroups` its filters and limits; :mod:`~autograder.sandbox.forkserver`
(and the program it runs, ``forkserver_main``) one sandbox per worker that has imported PyTorch
once; :mod:`~autograder.sandbox.kernel_files`, :mod:`~autograder.sandbox.kernel_startup` and
:mod:`~autograder.sandbox.kernel_manager` the kernel's files, start-up and manager. It may
import :mod:`autograder.core` and :mod:`course` only; grading is above it.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder.sandbox import seccomp
from autograder.sandbox.cgroups import _cgroup_oom, _join_cgroup, _remove_cgroups

GiB = 1024**3
MiB = 1024**2

# The kernel's view: everything it may write lives in one size-capped tmpfs.
INNER_TMP = "/tmp"
INNER_HOME = "/tmp/home"
INNER_WORK = "/tmp/work"             # the kernel's working folder
INNER_IPYTHON = "/tmp/ipython"
INNER_KERNEL = "/tmp/.kernel"        # connection file (read-only bind) and IPC sockets
INNER_IPC = INNER_KERNEL + "/ipc"    # zmq ipc paths are "<ip>-<port>"
INNER_LIB = "/tmp/.lib"              # course/ bound read-only as /tmp/.lib/course
INNER_DATA = "/tmp/.data"            # each dataset folder bound read-only (a data mirror)
INNER_VENV = "/tmp/.venv"            # a venv that lives inside the instructor's checkout
STARTUP_NAME = "00-autograder.py"
# uids given to sandboxed kernels when the grader is root: one per kernel (by the launcher's
# pid, unique among running launchers), so that the process limit counts one kernel's
# processes only. Kernels forked by a fork server take theirs from FORKED_UID_BASE up.
UID_BASE = 200_000
FORKED_UID_BASE = 1_000_000_000


@dataclass
class Limits:
    """Per-kernel limits. ``None`` disables one."""

    memory: int | None = 4 * GiB          # address space per process; cgroup: + 512 MiB
    cpu_seconds: int | None = 900         # CPU time of the kernel (SIGXCPU then SIGKILL)
    file_size: int | None = 256 * MiB     # largest file the kernel may write (bytes)
    processes: int | None = 256           # processes and threads of the kernel's uid
    open_files: int | None = 1024
    disk: int | None = 512 * MiB          # all the kernel may write: its /tmp tmpfs (bytes)
    shm: int = 64 * MiB                   # /dev/shm tmpfs (bytes)
    output: int = 2 * MiB                 # bytes of messages a notebook may send back
    cell_timeout: int = 180               # seconds per cell before an interrupt
    notebook_timeout: int = 600           # seconds for the whole notebook

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Spec:
    """What the launcher needs; written as JSON next to the kernelspec (host-only)."""

    sandbox: bool
    limits: dict
    private: str                      # host-only folder: kernel.log, sandbox.json, exit.json
    startup: str = ""                 # the IPython start-up script, bound read-only
    hide: list[str] = field(default_factory=list)      # folders covered with an empty tmpfs
    ro_bind: list[list[str]] = field(default_factory=list)  # [host path, path in sandbox]
    env: dict = field(default_factory=dict)            # the kernel's whole environment
    cgroup_parent: str | None = None
    # host folder of the stand-in modules this kernel may hold (kernel_files.standins_view):
    # bound at INNER_STANDINS, or written there by a fork server (not part of its sandbox)
    standins: str = ""


# --------------------------------------------------------------------------- availability


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


_AVAILABLE: tuple[bool, str] | None = None


def available() -> tuple[bool, str]:
    """(usable, why not): bubblewrap is installed and can create the namespaces we need."""
    global _AVAILABLE
    if _AVAILABLE is not None:
        return _AVAILABLE
    bw = bwrap_path()
    if bw is None:
        _AVAILABLE = (False, "bubblewrap (bwrap) is not installed; on Debian/Ubuntu: "
                             "apt-get install bubblewrap")
        return _AVAILABLE
    try:
        proc = subprocess.run(
            [bw, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
             "--unshare-pid", "--unshare-user", "--cap-drop", "ALL", "--die-with-parent",
             "--size", str(MiB), "--tmpfs", "/tmp", "true"],
            capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _AVAILABLE = (False, f"bubblewrap could not run: {exc}")
        return _AVAILABLE
    if proc.returncode != 0:
        _AVAILABLE = (False, "bubblewrap is installed but cannot create a sandbox here "
                             f"(user namespaces disabled?): {proc.stderr.strip()[:300]}")
    else:
        _AVAILABLE = (True, "")
    return _AVAILABLE


# --------------------------------------------------------------------------- launcher


def rlimits(limits: dict) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) of every rlimit a kernel gets under ``limits``."""
    out = []
    for which, key in ((resource.RLIMIT_AS, "memory"), (resource.RLIMIT_FSIZE, "file_size"),
                       (resource.RLIMIT_NOFILE, "open_files"),
                       # Counts the processes and threads of the kernel's (own, unprivileged)
                       # uid; root is exempt, which is why a root grader drops to a uid of
                       # its own.
                       (resource.RLIMIT_NPROC, "processes")):
        if limits.get(key):
            out.append((which, limits[key], limits[key]))
    if limits.get("cpu_seconds"):   # SIGXCPU at the soft limit, SIGKILL 5 s later
        out.append((resource.RLIMIT_CPU, limits["cpu_seconds"], limits["cpu_seconds"] + 5))
    out.append((resource.RLIMIT_CORE, 0, 0))
    return out


def _apply_rlimits(limits: dict) -> None:
    for which, soft, hard in rlimits(limits):
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            pass


# Top-level folders of the system that the kernel sees (read-only); all others are hidden.
SYSTEM_TOP_DIRS = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev",
                   "proc", "sys", "run", "tmp", "var"}


def bwrap_argv(spec: Spec, bwrap: str, as_root: bool = False,
               caps: tuple[str, ...] = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"),
               seccomp_fd: int | None = None) -> list[str]:
    """The bubblewrap command line (without the kernel command).

    ``as_root``: bwrap runs as root and keeps only ``caps``: CAP_SETUID/CAP_SETGID/CAP_SETPCAP
    for the ``setpriv`` that drops the kernel to a uid of its own and empties its bounding set
    (:func:`kernel_command`); the fork server keeps a few more
    (:mod:`autograder.sandbox.forkserver`).
    Otherwise bwrap makes a user namespace and the kernel keeps the grader's (unprivileged)
    uid. ``seccomp_fd``: a descriptor holding :func:`autograder.sandbox.seccomp.program` (no
    keyrings, no user namespaces, no io_uring).
    """
    lim = spec.limits
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if lim.get("disk"):
        argv += ["--size", str(lim["disk"])]
    argv += ["--perms", "1777", "--tmpfs", INNER_TMP, "--size", str(MiB), "--tmpfs", "/var/tmp",
             "--size", str(lim.get("shm") or MiB), "--perms", "1777", "--tmpfs", "/dev/shm"]
    hidden = []
    # Every top-level folder that is not part of the system (/work, /root, /home, /opt, /srv...)
    # is hidden: another checkout of the course, with its hidden tests, may live anywhere there.
    # What the kernel needs from them (the Python environment, course/, the datasets) is bound
    # back read-only below.
    tops = [f"/{e}" for e in sorted(os.listdir("/"))
            if e not in SYSTEM_TOP_DIRS and os.path.isdir(f"/{e}") and not os.path.islink(f"/{e}")]
    for h in [*tops, *spec.hide]:
        p = os.path.realpath(h)
        if os.path.isdir(p) and p not in ("/", "/tmp") and not p.startswith("/tmp/") \
                and p not in hidden:
            hidden.append(p)
    covered = []
    for p in sorted(hidden, key=len):
        if any(p.startswith(q + os.sep) for q in hidden if q != p):
            continue  # already covered by a hidden parent
        argv += ["--perms", "0555", "--tmpfs", p]  # empty (read-only: see --remount-ro)
        covered.append(p)
    # The kernel's own folders (writable by its uid), then the folders leading to each bind,
    # made in a tmpfs, readable by the kernel's uid (bwrap would make them 0700 as root).
    for d in (INNER_HOME, INNER_WORK, INNER_KERNEL, INNER_IPYTHON,
              INNER_IPYTHON + "/profile_default", INNER_IPYTHON + "/profile_default/startup"):
        argv += ["--perms", "0777" if as_root else "0755", "--dir", d]
    binds = [(src, dest) for src, dest in spec.ro_bind if os.path.exists(src)]
    parents: set[str] = set()
    for _, dest in binds:
        for parent in Path(dest).parents:
            p = str(parent)
            if any(p.startswith(q + os.sep) for q in [*covered, INNER_TMP]):
                parents.add(p)
    for p in sorted(parents, key=len):
        argv += ["--perms", "0755", "--dir", p]
    for src, dest in binds:
        argv += ["--ro-bind", src, dest]
    if spec.standins and os.path.isdir(spec.standins):
        argv += ["--ro-bind", spec.standins, INNER_KERNEL + "/standins"]
    if spec.startup:
        argv += ["--ro-bind", spec.startup,
                 f"{INNER_IPYTHON}/profile_default/startup/{STARTUP_NAME}"]
    # Binding a folder inside a hidden one makes bwrap create its parents in the tmpfs, and
    # those are writable (a course whose .venv lives inside it). Remount every hidden tmpfs
    # read-only once all binds are in place; the binds themselves keep their own flags.
    for p in covered:
        argv += ["--remount-ro", p]
    argv += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--cap-drop", "ALL"]
    if as_root:
        for cap in caps:
            argv += ["--cap-add", cap]
    else:
        argv += ["--unshare-user", "--disable-userns"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox",
             "--chdir", INNER_WORK, "--clearenv"]
    for k, v in sorted(spec.env.items()):
        argv += ["--setenv", k, str(v)]
    return argv


def kernel_command(cmd: list[str], uid: int | None) -> list[str]:
    """``cmd``, started as ``uid`` with no capabilities at all when a uid is given."""
    if uid is None:
        return cmd
    return [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
            "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
            "--", *cmd]


def _kernel_connection(host_file: str, private: Path) -> Path:
    """The kernel's copy of the connection file: same ports and key, sockets in the sandbox."""
    info = json.loads(Path(host_file).read_text())
    info["transport"] = "ipc"
    info["ip"] = INNER_IPC
    target = private / "kernel-connection.json"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    return target


def read_child_pid(fd: int) -> int | None:
    """The sandbox's first pid, from bwrap's ``--info-fd`` (read to its end, then closed)."""
    raw = b""
    while len(raw) < 65536:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        raw += chunk
    os.close(fd)
    try:
        return int(json.loads(raw.decode())["child-pid"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def _run_sandboxed(spec: Spec, cmd: list[str], private: Path) -> None:
    """Fork bwrap as described in the module docstring; never returns."""
    bw = bwrap_path()
    if bw is None:
        os.write(2, b"bubblewrap vanished; refusing to run the kernel unsandboxed\n")
        os._exit(70)
    i = cmd.index("-f")
    conn = _kernel_connection(cmd[i + 1], private)
    cmd = [*cmd[:i + 1], f"{INNER_KERNEL}/connection.json", *cmd[i + 2:]]
    spec.ro_bind = [*spec.ro_bind, [str(conn), f"{INNER_KERNEL}/connection.json"]]
    as_root = os.geteuid() == 0
    r, w = os.pipe()
    os.set_inheritable(w, True)
    pid = os.fork()
    if pid == 0:  # the child: cgroup, limits, then bwrap
        try:
            os.close(r)
            if spec.cgroup_parent:
                groups = _join_cgroup(spec.cgroup_parent, spec.limits, os.getpid())
                _write_json(private / "cgroups.json", {"groups": [str(g) for g in groups]})
            uid = UID_BASE + os.getpid() if as_root else None
            argv = (bwrap_argv(spec, bw, as_root, seccomp_fd=seccomp.program_fd())
                    + ["--info-fd", str(w), "--"] + kernel_command(cmd, uid))
            _apply_rlimits(spec.limits)
            os.execve(bw, argv, {"PATH": "/usr/bin:/bin"})
        except BaseException as exc:  # noqa: BLE001 - said in kernel.log, then exit 71
            os.write(2, f"sandbox launcher: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(71)
    os.close(w)
    child = read_child_pid(r)
    if child is not None:
        _write_json(private / "sandbox.json", {"child-pid": child})
    # else bwrap failed before the sandbox started; its error is in kernel.log
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    groups = []
    try:
        groups = [Path(g) for g in json.loads((private / "cgroups.json").read_text())["groups"]]
    except (OSError, ValueError, KeyError):
        pass
    _write_json(private / "exit.json", {"code": code, "oom": _cgroup_oom(groups)})
    _remove_cgroups(groups)
    os._exit(code)


def _die_with_parent() -> None:
    """Be killed when the grading process that started us goes away (however it ends), so
    that no kernel outlives its grader; kept across exec, so the unsandboxed kernel has it."""
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:   # it went away before the request took effect
        os._exit(70)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    _die_with_parent()
    spec_path, sep, *cmd = argv
    assert sep == "--" and cmd, "usage: python -m autograder.sandbox SPEC.json -- COMMAND..."
    spec = Spec(**json.loads(Path(spec_path).read_text()))
    private = Path(spec.private)
    # The kernel's own stdout/stderr (not the notebook's outputs) go to a log it cannot reach.
    log = os.open(private / "kernel.log",
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if spec.sandbox:
        _run_sandboxed(spec, cmd, private)
    env = dict(spec.env)
    _apply_rlimits({**spec.limits, "processes": None})  # NPROC would count the learner's own
    os.chdir(env.get("HOME", spec.private))
    os.execve(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
