"""Run a submission's Jupyter kernel inside a bubblewrap sandbox, with resource limits.

The kernel command of the grading kernelspec is ``python -m autograder.sandbox <spec.json> --
<python> -m ipykernel_launcher -f {connection_file}``. This launcher (outside the sandbox):

1. applies the resource limits to itself with ``setrlimit`` (inherited by the kernel): address
   space (memory), CPU seconds, size of any file written, open files; and, where the machine
   lets it create one, a cgroup with ``pids.max`` (processes) and a memory ceiling;
2. sends the kernel's own stdout/stderr (C-level writes, crash messages) to a log file in its
   private folder, which the file-size limit caps;
3. opens the bundle of the grading library's hidden modules and hands the open file descriptor
   to the kernel (the file itself is not visible in the sandbox; the kernel's start-up script
   reads it into memory and closes it before any student code runs);
4. replaces itself with ``bwrap``: a read-only view of the system and the Python environment,
   a fresh empty ``/tmp``, no network (a new network namespace), new PID/IPC/UTS namespaces,
   no capabilities, and write access only to the submission's working copy and a private
   folder. The course repository, the submissions folder, the results/gradebook, every other
   grading worker's folder and ``$HOME`` are covered by empty tmpfs mounts; only the course's
   learner-facing ``course/`` package (and the dataset cache, read-only) are bound back.

Without bubblewrap the same launcher applies the limits and runs the kernel directly
(``--no-sandbox``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

GiB = 1024**3
MiB = 1024**2


@dataclass
class Limits:
    """Per-kernel limits. ``None`` disables one."""

    memory: int | None = 4 * GiB          # address space of the kernel process (bytes)
    cpu_seconds: int | None = 900         # CPU time of the kernel (SIGXCPU then SIGKILL)
    file_size: int | None = 256 * MiB     # largest file the kernel may write (bytes)
    processes: int | None = 256           # tasks in the kernel's cgroup (where cgroups work)
    open_files: int | None = 1024
    output: int = 2 * MiB                 # text/images a notebook may send back (streamed)
    cell_timeout: int = 180               # seconds per cell before an interrupt
    notebook_timeout: int = 600           # seconds for the whole notebook

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Spec:
    """What the launcher needs; written as JSON next to the kernelspec."""

    sandbox: bool
    limits: dict
    private: str                      # the kernel's private folder (HOME, TMPDIR, sockets)
    workdir: str                      # the submission's working copy (cwd of the kernel)
    hide: list[str] = field(default_factory=list)      # folders covered with an empty tmpfs
    ro_bind: list[str] = field(default_factory=list)   # folders bound back read-only
    bundle: str | None = None         # the hidden grading modules (JSON), passed as an fd
    env: dict = field(default_factory=dict)
    cgroup_parent: str | None = None


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
             "--unshare-pid", "--cap-drop", "ALL", "--die-with-parent", "true"],
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


# --------------------------------------------------------------------------- cgroups


def _cgroup_dirs(parent: str) -> list[Path]:
    """Writable cgroup folders for pids and memory (v1 or v2), created under ``parent``."""
    base = Path("/sys/fs/cgroup")
    out = []
    if (base / "cgroup.controllers").is_file():  # v2
        out.append(base / parent)
    else:
        for ctl in ("pids", "memory"):
            if (base / ctl).is_dir():
                out.append(base / ctl / parent)
    return out


def _join_cgroup(parent: str, limits: dict) -> list[Path]:
    """Best effort: put this process in a fresh cgroup with pids/memory limits."""
    made = []
    name = f"kernel-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    for d in _cgroup_dirs(parent):
        try:
            d.mkdir(parents=True, exist_ok=True)
            g = d / name
            g.mkdir()
            if limits.get("processes") and (g / "pids.max").exists():
                (g / "pids.max").write_text(str(limits["processes"]))
            mem = limits.get("memory")
            if mem:
                for fname in ("memory.max", "memory.limit_in_bytes"):
                    if (g / fname).exists():
                        (g / fname).write_text(str(mem + 512 * MiB))
            (g / "cgroup.procs").write_text(str(os.getpid()))
            made.append(g)
        except OSError:
            continue
    return made


def cleanup_cgroups(parent: str) -> None:
    """Remove the empty kernel cgroups left under ``parent`` (their kernels have exited)."""
    for d in _cgroup_dirs(parent):
        if d.is_dir():
            for g in d.glob("kernel-*"):
                try:
                    g.rmdir()
                except OSError:
                    pass


# --------------------------------------------------------------------------- launcher


def _apply_rlimits(limits: dict) -> None:
    import resource

    def setl(which, value):
        if value:
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass

    setl(resource.RLIMIT_AS, limits.get("memory"))
    cpu = limits.get("cpu_seconds")
    if cpu:
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        except (ValueError, OSError):
            pass
    setl(resource.RLIMIT_FSIZE, limits.get("file_size"))
    setl(resource.RLIMIT_NOFILE, limits.get("open_files"))
    setl(resource.RLIMIT_CORE, 0)


# Top-level folders of the system that the kernel sees (read-only); all others are hidden.
SYSTEM_TOP_DIRS = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev",
                   "proc", "sys", "run", "tmp", "var"}


def bwrap_argv(spec: Spec, bwrap: str) -> list[str]:
    """The bubblewrap command line (without the kernel command)."""
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/dev/shm"]
    hidden = []
    # Every top-level folder that is not part of the system (/work, /root, /home, /opt, /srv...)
    # is hidden too: another checkout of the course, with its hidden tests, may live anywhere
    # there. What the kernel needs from them (the Python environment, course/, the datasets)
    # is bound back read-only below.
    tops = [f"/{e}" for e in sorted(os.listdir("/"))
            if e not in SYSTEM_TOP_DIRS and os.path.isdir(f"/{e}") and not os.path.islink(f"/{e}")]
    for h in [*tops, *spec.hide]:
        p = os.path.realpath(h)
        if os.path.isdir(p) and p not in ("/", "/tmp") and p not in hidden:
            hidden.append(p)
    # Parents first, so a folder hidden inside another hidden folder does not fail. A folder
    # under /tmp is hidden as well: the kernel's /tmp is empty, but an empty read-only mount
    # keeps the course's own path unwritable there too.
    covered = []
    for p in sorted(hidden, key=len):
        if any(p.startswith(q + os.sep) for q in hidden if q != p):
            continue  # already covered by a hidden parent
        argv += ["--perms", "0555", "--tmpfs", p]  # empty (read-only: see --remount-ro)
        covered.append(p)
    for rb in spec.ro_bind:
        p = os.path.realpath(rb)
        if os.path.exists(p):
            argv += ["--ro-bind", p, p]
    for rw in (spec.private, spec.workdir):
        p = os.path.realpath(rw)
        argv += ["--bind", p, p]
    # Binding a folder inside a hidden one makes bwrap create its parents in the tmpfs, and
    # those are writable (a course whose .venv lives inside it). Remount every hidden tmpfs
    # read-only once all binds are in place; the binds themselves keep their own flags.
    for p in covered:
        argv += ["--remount-ro", p]
    argv += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--cap-drop", "ALL", "--die-with-parent",
             "--hostname", "sandbox",
             # ipykernel shuts itself down when its parent pid changes; in a PID namespace
             # it cannot see the real parent, and --die-with-parent does that job instead.
             "--unsetenv", "JPY_PARENT_PID",
             "--chdir", os.path.realpath(spec.workdir)]
    return argv


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    spec_path, sep, *cmd = argv
    assert sep == "--" and cmd, "usage: python -m autograder.sandbox SPEC.json -- COMMAND..."
    spec = Spec(**json.loads(Path(spec_path).read_text()))
    env = dict(os.environ)
    env.update(spec.env)
    env.pop("JPY_PARENT_PID", None) if spec.sandbox else None
    # The kernel's own stdout/stderr (not the notebook's outputs) go to a capped log.
    log = os.open(os.path.join(spec.private, "kernel.log"),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if spec.cgroup_parent:
        _join_cgroup(spec.cgroup_parent, spec.limits)
    if spec.bundle:
        fd = os.open(spec.bundle, os.O_RDONLY)
        os.set_inheritable(fd, True)
        env["TFS_HIDDEN_FD"] = str(fd)
    _apply_rlimits(spec.limits)
    if spec.sandbox:
        bw = bwrap_path()
        if bw is None:
            os.write(2, b"bubblewrap vanished; refusing to run the kernel unsandboxed\n")
            os._exit(70)
        full = bwrap_argv(spec, bw) + ["--"] + cmd
        os.execve(bw, full, env)
    os.chdir(spec.workdir)
    os.execve(cmd[0], cmd, env)


# --------------------------------------------------------------------------- kernel side

# Written into the kernel's IPython startup folder: runs before any notebook cell.
STARTUP = r'''
# autograder start-up: load the hidden grading modules from memory, snapshot what tests rely on.
def __tfs_setup():
    import builtins, importlib.abc, importlib.util, json, os, sys
    fd = os.environ.pop("TFS_HIDDEN_FD", None)
    if fd is not None:
        with os.fdopen(int(fd), "r", encoding="utf-8") as f:
            sources = json.load(f)

        class _HiddenFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path=None, target=None):
                if name in sources:
                    is_pkg = sources[name][0]
                    spec = importlib.util.spec_from_loader(name, self, is_package=is_pkg)
                    return spec
                if name == "autograder" or name.startswith("autograder."):
                    return None
                return None

            def create_module(self, spec):
                return None

            def exec_module(self, module):
                is_pkg, code = sources[module.__name__]
                if is_pkg:
                    module.__path__ = []
                module.__file__ = "<hidden>/" + module.__name__.replace(".", "/") + ".py"
                exec(compile(code, module.__file__, "exec"), module.__dict__)

        sys.meta_path.insert(0, _HiddenFinder())
    cap = int(os.environ.get("TFS_MAX_OUTPUT") or 0)
    if cap:
        # cap what the kernel prints at the source, while it streams
        state = {"left": cap, "told": False}

        def _tell(stream):
            if not state["told"]:
                state["told"] = True
                stream.write(f"\n[output truncated: more than {cap // 1024} KiB of output]\n")

        class _Capped:
            def __init__(self, inner):
                self._inner = inner

            def write(self, text):
                if state["left"] <= 0:
                    _tell(self._inner)
                    return len(text)
                state["left"] -= len(text)
                return self._inner.write(text[:max(0, state["left"] + len(text))])

            def __getattr__(self, name):
                return getattr(self._inner, name)

        _stdout = sys.stdout
        sys.stdout = _Capped(sys.stdout)
        sys.stderr = _Capped(sys.stderr)

        def _cap_rich(msg):
            # display() and a cell's result share the budget; a bundle that does not fit
            # is dropped whole (an image cannot be cut)
            data = (msg.get("content") or {}).get("data") or {}
            size = sum(len(v) if isinstance(v, str) else len(repr(v)) for v in data.values())
            if size > state["left"]:
                state["left"] = 0
                _tell(_stdout)
                return None
            state["left"] -= size
            return msg

        for _owner in (get_ipython().display_pub, get_ipython().displayhook):
            if hasattr(_owner, "register_hook"):
                _owner.register_hook(_cap_rich)
    day = os.environ.get("TFS_DAY", "")
    import torch, torch.testing
    import torch.nn.functional as F
    mods = {}
    for name in ("course.checking", "autograder.checks", f"autograder.checks.{day}",
                 f"course.checks.{day}"):
        try:
            mods[name] = importlib.import_module(name)
        except Exception:
            pass
    ip = get_ipython()
    snap = {}
    for owner, attrs in ((torch, ("allclose", "equal", "isclose", "all", "testing")),
                         (torch.testing, ("assert_close",)),
                         (torch.Tensor, ("__eq__", "__ne__", "allclose", "equal", "isclose",
                                         "__bool__", "all", "item", "tolist")),
                         (F, ("scaled_dot_product_attention", "softmax", "layer_norm"))):
        for a in attrs:
            if hasattr(owner, a):
                snap[(owner, a)] = getattr(owner, a)
    for name, mod in mods.items():
        for a, v in list(vars(mod).items()):
            if callable(v) and not a.startswith("__"):
                snap[(mod, a)] = v
    cls = type(ip)
    for a in ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell",
              "run_cell_async", "run_code", "run_ast_nodes"):
        if hasattr(cls, a):
            snap[(cls, a)] = cls.__dict__.get(a, getattr(cls, a))
    _MISSING = object()
    inst = {a: ip.__dict__.get(a, _MISSING) for a in
            ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell", "run_cell_async",
             "run_code", "run_ast_nodes", "custom_exceptions", "CustomTB", "InteractiveTB",
             "SyntaxTB")}
    lists = {name: list(getattr(ip, name)) for name in
             ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")}
    _TRUSTED = ("matplotlib", "matplotlib_inline", "IPython", "ipykernel", "ipywidgets",
                "tqdm", "torch", "course")
    events = {e: list(ip.events.callbacks.get(e, [])) for e in
              ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell")}
    modrefs = {name: mod for name, mod in mods.items()}
    real_import = builtins.__import__

    def guard():
        """Undo known cheats before a test cell; return what had been changed."""
        found = []
        for (owner, a), v in snap.items():
            if getattr(owner, a, None) is not v:
                found.append(f"{getattr(owner, '__name__', owner)}.{a} was replaced")
                try:
                    setattr(owner, a, v)
                except Exception:
                    pass
        for a, v in inst.items():
            if ip.__dict__.get(a, _MISSING) is not v:
                found.append(f"IPython's {a} was patched")
                if v is _MISSING:
                    ip.__dict__.pop(a, None)
                else:
                    ip.__dict__[a] = v
        if ip.custom_exceptions:
            found.append("a custom exception handler hides errors")
            ip.set_custom_exc((), None)
        for name, want in lists.items():
            if list(getattr(ip, name)) != want:
                found.append(f"IPython's {name} were changed")
                getattr(ip, name)[:] = want
        for e, want in events.items():
            extra = [cb for cb in ip.events.callbacks.get(e, []) if cb not in want
                     and not getattr(cb, "__module__", "").startswith(_TRUSTED)]
            if extra:
                found.append(f"an IPython {e} callback was registered")
                ip.events.callbacks[e][:] = [cb for cb in ip.events.callbacks[e]
                                             if cb not in extra]
        for name, mod in modrefs.items():
            if sys.modules.get(name) is not mod:
                found.append(f"sys.modules[{name!r}] was replaced")
                sys.modules[name] = mod
        if builtins.__import__ is not real_import:
            found.append("builtins.__import__ was replaced")
            builtins.__import__ = real_import
        return found

    builtins.__tfs_guard__ = guard


__tfs_setup()
del __tfs_setup
'''

GUARD_EXPR = "__import__('builtins').__tfs_guard__()"


def hidden_bundle(course_root: Path, target: Path) -> Path:
    """Write the grading library (autograder/__init__.py, autograder/checks/) as JSON."""
    sources: dict[str, tuple[bool, str]] = {}
    pkg = course_root / "autograder"
    sources["autograder"] = (True, (pkg / "__init__.py").read_text(encoding="utf-8")
                             if (pkg / "__init__.py").is_file() else "")
    checks = pkg / "checks"
    for py in sorted(checks.rglob("*.py")):
        rel = py.relative_to(pkg).with_suffix("")
        parts = ["autograder", *rel.parts]
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        sources[".".join(parts)] = (is_pkg, py.read_text(encoding="utf-8"))
    target.write_text(json.dumps(sources), encoding="utf-8")
    os.chmod(target, 0o600)
    return target


def write_kernelspec(kernels_dir: Path, name: str, spec_path: Path, python: str) -> None:
    """A kernelspec ``name`` whose command starts this launcher."""
    d = kernels_dir / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "autograder.sandbox", str(spec_path), "--",
                 python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (graded, sandboxed)",
        "language": "python",
        "interrupt_mode": "message",  # SIGINT to the group would kill bwrap itself
    }))


def prepare_private(private: Path) -> dict:
    """Fresh private folder for one kernel; returns the kernel's environment additions."""
    if private.exists():
        shutil.rmtree(private, ignore_errors=True)
    for sub in ("home", "tmp", "runtime", "ipython/profile_default/startup"):
        (private / sub).mkdir(parents=True, exist_ok=True)
    (private / "ipython/profile_default/startup/00-autograder.py").write_text(STARTUP)
    return {
        "HOME": str(private / "home"),
        "TMPDIR": str(private / "tmp"),
        "MPLCONFIGDIR": str(private / "tmp"),
        "IPYTHONDIR": str(private / "ipython"),
        "JUPYTER_RUNTIME_DIR": str(private / "runtime"),
        "MPLBACKEND": "Agg",
        "PYTHONDONTWRITEBYTECODE": "1",
        # glibc reserves 64 MiB of address space per thread arena; under RLIMIT_AS that
        # reservation (not real use) would eat the kernel's memory limit thread by thread.
        "MALLOC_ARENA_MAX": "2",
    }


if __name__ == "__main__":
    main()
