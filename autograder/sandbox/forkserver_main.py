"""The fork server's own program: runs inside a grading sandbox and forks one kernel at a time.

Started by :mod:`autograder.sandbox.forkserver` as ``python -c <this file's text> <control fd>``
inside
the same bubblewrap sandbox a kernel gets, as root with only CAP_SETUID, CAP_SETGID, CAP_KILL,
CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE and CAP_SETPCAP, under the sandbox's seccomp filter
(:mod:`autograder.sandbox.seccomp`). It imports what every graded notebook imports
(PyTorch, NumPy, IPython's kernel, matplotlib's drawing code) once, then for each request on
the control socket:

1. forks; the child tells the host its pid (the host reads it from the socket's credentials),
   waits until the host has put it in the kernel's cgroup, makes the kernel's fresh folders
   in ``/tmp`` (owned by the kernel's uid), applies the rlimits, drops to that fresh uid with
   no capabilities at all (bounding, ambient and inheritable sets too) and no new
   privileges, takes the kernel's whole environment and runs
   ipykernel in-process (what ``python -m ipykernel_launcher`` would run, without the import);
2. waits until that kernel has exited (reaping every orphan: it is the child subreaper);
3. cleans the sandbox for the next kernel: kills every process but itself and the sandbox's
   init, waits until none is left, removes everything the kernel could write (``/tmp`` but the
   read-only binds, ``/var/tmp``, ``/dev/shm``) and checks that no System V IPC object, and
   nothing in the shared network namespace (sockets, TIME_WAIT entries, flow labels) is left;
   it says ``exited`` with the status as soon as the kernel is gone (the host scores the
   notebook meanwhile), then ``clean`` once the sandbox is, before it reads the next request.
   If it is not clean (or the kernel left more than ``MAX_FILES`` files), it exits and the host
   starts a new sandbox.

Kernels forked from one server share its memory layout and hash seed (fork semantics): the
server must never hash or parse anything a kernel chose. It reads nothing a kernel wrote.

Nothing here is imported by the host: the sandbox shows no file of the grading library. It
imports only the standard library before the preimports, and sends only bounded JSON.
"""

import ctypes
import gc
import importlib
import json
import os
import shutil
import signal
import socket
import sys
import time

PREIMPORT = (
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "numpy",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "IPython.core.interactiveshell",
    "matplotlib",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
    "matplotlib.pyplot",
    "ipywidgets",
    "tqdm.auto",
    # pulled in by the first model run on the meta device (course.device): ~0.5 CPU s
    "torch._dynamo",
    # the course's helpers that every day's first cells import
    "course.checking",
    "course.widgets",
    "course.plots",
    "course.training",
    "course.textgen",
)
WRITABLE = ("/tmp", "/var/tmp", "/dev/shm")
MAX_MSG = 1 << 16
MAX_FILES = 50_000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 4, 38, 36
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
LIBC = ctypes.CDLL(None, use_errno=True)


def send(sock, data):
    sock.send(json.dumps(data).encode()[:MAX_MSG])


def read_only_binds():
    """The entries of /tmp that hold a mount (the read-only binds): kept between kernels."""
    keep = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point.startswith("/tmp/"):
                keep.add(point[len("/tmp/") :].split("/")[0])
    return keep


def kill_everything(deadline):
    """Kill every process of the sandbox but this one and init; True once none is left."""
    me = os.getpid()
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:  # reap our children and the orphans we inherited as subreaper
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        left = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


def network_used():
    """Whether any socket, TIME_WAIT entry or flow label is left in the sandbox's network
    namespace, which every kernel of this server shares (a kernel's ports, or a kernel that
    holds every port for a minute, would reach the next one)."""
    for name in (
        "tcp",
        "tcp6",
        "udp",
        "udp6",
        "raw",
        "raw6",
        "udplite",
        "udplite6",
        "ip6_flowlabel",
    ):
        try:
            with open(f"/proc/net/{name}") as f:
                if len(f.read(1 << 16).splitlines()) > 1:
                    return True
        except OSError:
            pass
    return False


def too_many_files():
    """Over MAX_FILES files (links count) in a writable folder: a new sandbox is cheaper than
    removing them, and removing them would cost the server's own time and memory."""
    for top in ("/tmp", "/dev/shm"):
        st = os.statvfs(top)
        if st.f_files - st.f_ffree > MAX_FILES:
            return True
    return False


def wipe(keep):
    """Remove all a kernel could have written; True when nothing of it is left."""
    if too_many_files() or network_used():
        return False
    for top in WRITABLE:
        for name in os.listdir(top):
            if top == "/tmp" and name in keep:
                continue
            path = os.path.join(top, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            except OSError:
                return False
    if set(os.listdir("/tmp")) - keep or os.listdir("/var/tmp") or os.listdir("/dev/shm"):
        return False
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                if len(f.read().splitlines()) > 1:
                    return False
        except OSError:
            pass
    return True


def clean(keep):
    try:
        return kill_everything(time.monotonic() + 10) and wipe(keep)
    except Exception:  # noqa: BLE001 - e.g. a tree too deep for rmtree: a new sandbox then
        return False


def make_folders(req):
    """The kernel's own folders, fresh, owned by its uid; the start-up script and the
    connection file written in them."""
    uid = req["uid"]
    for d in req["folders"]:
        os.makedirs(d, exist_ok=True)
        os.chown(d, uid, uid)
        os.chmod(d, 0o755)
    for path, text in req["files"].items():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chown(path, uid, uid)


def apply_limits(rlimits):
    import resource

    for which, soft, hard in rlimits:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            pass
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # POSIX queues cannot be listed


def drop_capabilities():
    """Empty the bounding, ambient and inheritable sets (``setpriv --bounding-set=-all
    --inh-caps=-all``); setresuid then empties the rest."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, self
    data = (ctypes.c_uint32 * 6)()  # 2 x (effective, permitted, inheritable)
    if LIBC.capget(header, data) == 0:
        data[2] = data[5] = 0
        LIBC.capset(header, data)


def no_capabilities():
    with open("/proc/self/status") as f:
        sets = [ln.split()[1] for ln in f if ln.startswith("Cap")]
    return len(sets) == 5 and all(int(v, 16) == 0 for v in sets)


def child(req, log_fd, sync_fd):
    """The kernel's process; never returns."""
    code = 70
    try:
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        sync = socket.socket(fileno=sync_fd)
        sync.send(b"pid")  # the host reads our pid from the credentials
        if sync.recv(16) != b"go":  # moved into the kernel's cgroup
            os._exit(72)
        sync.close()
        make_folders(req)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.closerange(3, 1 << 16)
        apply_limits(req["rlimits"])
        uid = req["uid"]
        drop_capabilities()
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # the permitted and effective sets go with root
        if (
            LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            or os.getuid() != uid
            or not no_capabilities()
        ):
            os._exit(73)
        LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as after the exec of a kernel's own
        os.umask(0o022)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.argv = list(req["argv"])
        # What the fork copied must not be shared between kernels: random states.
        import random

        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        del req
        from ipykernel.kernelapp import launch_new_instance

        launch_new_instance()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - said in the kernel's log
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main():
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if sys.path and sys.path[0] == "":
        del sys.path[0]
    sys.modules["debugpy"] = None  # a grading kernel runs without the debugger
    keep = read_only_binds()
    failed = []
    for name in PREIMPORT:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the kernel imports it itself, or fails
            failed.append(f"{name}: {type(exc).__name__}")
    gc.collect()
    gc.freeze()  # what the fork copies is not scanned again by each kernel's collector
    if not clean(keep):
        send(ctrl, {"error": "the sandbox could not be made clean"})
        return
    if failed:  # the kernels import these themselves (or fail as they would unforked)
        print("fork server: not preimported:", ", ".join(failed), file=sys.stderr, flush=True)
    send(ctrl, {"ready": os.getpid()})
    while True:
        msg, fds, _, _ = socket.recv_fds(ctrl, MAX_MSG, 2)
        if not msg:
            return
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            send(ctrl, {"error": "a spawn request carries two descriptors"})
            continue
        req = json.loads(msg)["spawn"]
        pid = os.fork()
        if pid == 0:
            ctrl.close()
            child(req, *fds)
        for fd in fds:
            os.close(fd)
        del req
        send(ctrl, {"spawned": pid})
        status, cpu = None, 0.0
        while status is None:
            try:
                got, st, usage = os.wait4(-1, 0)
            except ChildProcessError:
                status = 1 << 8
                break
            if got == pid:
                status, cpu = st, usage.ru_utime + usage.ru_stime
        code = os.waitstatus_to_exitcode(status)
        # The host learns the exit at once and scores the notebook while the sandbox is
        # cleaned; this loop reads no next request before the clean is done.
        send(ctrl, {"exited": 128 - code if code < 0 else code, "cpu": round(cpu, 3)})
        ok = clean(keep)
        send(ctrl, {"clean": ok})
        if not ok:
            return


if __name__ == "__main__":
    main()
