"""What the host prepares for one kernel, and how it reads what a kernel run left behind.

The kernelspec that starts the sandbox launcher, the kernel's whole environment (nothing of
the grader's is inherited), its fresh host-only private folder, the read-only binds of each
dataset folder, and :func:`read_capped`, the only way the host reads a file after a kernel
ran (never through a link, never more than a given size).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from autograder.sandbox import (
    INNER_DATA,
    INNER_HOME,
    INNER_IPYTHON,
    INNER_KERNEL,
    INNER_LIB,
    INNER_TMP,
    STARTUP_NAME,
)


def read_capped(path: Path, limit: int = 64 * 1024, tail: bool = False) -> bytes:
    """At most ``limit`` bytes of a regular file (its end with ``tail``), never through a link.

    Returns b"" for a missing file, a link, or anything that is not a regular file.
    """
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b""
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        out = b""
        while len(out) < limit:
            chunk = os.read(fd, min(1 << 20, limit - len(out)))
            if not chunk:
                break
            out += chunk
        return out
    finally:
        os.close(fd)


# What ``python -m ipykernel_launcher`` does, less what a grading kernel never uses: the
# debugger (importing debugpy is about 0.1 CPU s of every kernel's start; ipykernel runs
# without it when it cannot be imported) and the input history's SQLite file.
KERNEL_MAIN = ("import sys\n"
               "if sys.path and sys.path[0] == '':\n"
               "    del sys.path[0]\n"
               "sys.modules['debugpy'] = None\n"
               "from ipykernel.kernelapp import launch_new_instance\n"
               "launch_new_instance()\n")


KERNEL_ARGS = ["--HistoryManager.enabled=False"]


def kernel_argv(python: str) -> list[str]:
    """The grading kernel's command (``{connection_file}`` filled in by jupyter_client)."""
    return [python, "-c", KERNEL_MAIN, "-f", "{connection_file}", *KERNEL_ARGS]


def write_kernelspec(kernels_dir: Path, name: str, spec_path: Path, python: str) -> None:
    """A kernelspec ``name`` whose command starts this launcher."""
    d = kernels_dir / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "autograder.sandbox", str(spec_path), "--",
                 *kernel_argv(python)],
        "display_name": "Python 3 (graded, sandboxed)",
        "language": "python",
        "interrupt_mode": "message",  # SIGINT to the group would kill bwrap itself
    }))


def kernel_environment(private: Path, sandboxed: bool, python: str) -> dict:
    """The kernel's whole environment (nothing of the grader's is inherited)."""
    bindir = str(Path(python).parent)
    if sandboxed:
        home, tmp, ipy = INNER_HOME, INNER_TMP, INNER_IPYTHON
        runtime = INNER_KERNEL
    else:
        home, tmp, ipy = (str(private / "home"), str(private / "tmp"),
                          str(private / "ipython"))
        runtime = str(private / "runtime")
    env = {
        "PATH": os.pathsep.join([bindir, "/usr/local/bin", "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "HOME": home,
        "TMPDIR": tmp,
        "MPLCONFIGDIR": f"{tmp}/.matplotlib",
        "IPYTHONDIR": ipy,
        "JUPYTER_RUNTIME_DIR": runtime,
        "MPLBACKEND": "Agg",
        "PYTHONDONTWRITEBYTECODE": "1",
        # glibc reserves 64 MiB of address space per thread arena; under RLIMIT_AS that
        # reservation (not real use) would eat the kernel's memory limit thread by thread.
        "MALLOC_ARENA_MAX": "2",
    }
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TZ"):
        if os.environ.get(var):
            env[var] = os.environ[var]
    if sandboxed:
        env["PYTHONPATH"] = INNER_LIB
    return env


def prepare_private(private: Path, startup: str) -> None:
    """A new private folder for one kernel (host-only; the sandbox never shows it)."""
    private.mkdir(parents=True)
    os.chmod(private, 0o700)
    for sub in ("home", "tmp", "runtime", "work", "ipython/profile_default/startup"):
        (private / sub).mkdir(parents=True, exist_ok=True)
    script = private / "ipython/profile_default/startup" / STARTUP_NAME
    script.write_text(startup)
    os.chmod(script, 0o644)


def dataset_binds() -> tuple[list[list[str]], dict]:
    """Read-only binds of each dataset folder, and the kernel's data environment.

    Inside the sandbox every dataset is a folder of ``/tmp/.data`` (``COURSE_DATA_DIR``, a
    mirror), taken from the host's mirror, else from the host's verified cache; never a
    parent folder (the host cache may hold other things). The kernel's own cache is in its
    tmpfs.
    """
    try:
        from course.data import MIRROR_ENV, REGISTRY, cache_dir
    except Exception:  # noqa: BLE001 - no data layer: nothing to bind
        return [], {}
    names = sorted({e.dataset for e in REGISTRY.values()})
    roots = []
    if os.environ.get(MIRROR_ENV, "").strip():
        roots.append(Path(os.environ[MIRROR_ENV]).expanduser())
    try:
        roots.append(cache_dir())
    except Exception:  # noqa: BLE001 - no data cache folder: nothing to bind
        pass
    binds = []
    for name in names:
        for r in roots:
            d = r / name
            if d.is_dir() and not d.is_symlink():
                binds.append([str(d.resolve()), f"{INNER_DATA}/{name}"])
                break
    env = {"COURSE_DATA_DIR": INNER_DATA, "COURSE_CACHE_DIR": f"{INNER_TMP}/.cache-data"}
    return binds, env


def unsandboxed_data_environment() -> dict:
    """Where an unsandboxed kernel (a learner's self-check) finds the datasets: the mirror and
    cache the grader uses. Its HOME is a fresh folder, so the user's cache is named outright.
    """
    env = {var: os.environ[var] for var in ("COURSE_DATA_DIR", "COURSE_CACHE_DIR")
           if os.environ.get(var)}
    if "COURSE_CACHE_DIR" not in env:
        try:
            from course.data import cache_dir

            env["COURSE_CACHE_DIR"] = str(cache_dir())
        except Exception:  # noqa: BLE001 - no data layer: the kernel looks for itself
            pass
    return env


# Where a graded kernel finds the stand-ins it may use (course.standins reads it).
INNER_STANDINS = INNER_KERNEL + "/standins"


def standins_view(root: Path, course_root: Path, day: str) -> tuple[Path, Path]:
    """The stand-ins a kernel grading ``day`` is shown: ``(package, allowed)``, host folders.

    ``package`` holds ``course/standins/__init__.py`` alone and is bound over the course's
    ``standins`` folder (the same for every day, so one fork server serves every day);
    ``allowed`` holds the modules of the days before ``day``
    (:func:`course.standins.modules_before`), which reach the kernel's own folder
    ``INNER_STANDINS`` (bound read-only, or written there by the fork server). No module of
    ``day`` or a later day is in the kernel, however it looks: what the sandbox does not
    hold cannot be imported, read or submitted.
    """
    source = Path(course_root) / "course" / "standins"
    # course.standins.modules_before, read off the files (the sandbox layer imports no course)
    before = sorted(p.stem for p in source.glob("day[0-9][0-9].py") if p.stem < day[:5])
    package = Path(root) / "standins" / "package"
    allowed = Path(root) / "standins" / day[:5]
    for folder, names in ((package, ["__init__"]), (allowed, before)):
        if folder.is_dir():
            continue
        tmp = Path(tempfile.mkdtemp(prefix=".standins-", dir=Path(root)))
        for name in names:
            shutil.copyfile(source / f"{name}.py", tmp / f"{name}.py")
        tmp.chmod(0o755)
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, folder)
    return package, allowed


def standins_files(allowed: str) -> dict[str, str]:
    """``{path in the kernel: source}`` of the modules in ``allowed`` (for the fork server)."""
    out = {}
    for path in sorted(Path(allowed).glob("day*.py")):
        out[f"{INNER_STANDINS}/{path.name}"] = read_capped(path, 1 << 16).decode()
    return out
