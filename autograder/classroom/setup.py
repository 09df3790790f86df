"""Setting up the classroom's machine: accounts, folders, the exchange, the users' Python.

Used by :mod:`autograder.classroom` (``classroom start``); see its docstring for the layout.
Everything here runs as root.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
import sys
from pathlib import Path

from autograder.classroom.checkout import (  # noqa: F401 - re-exported, used from here
    CHECKOUT_MODES,
    STUDENT_VISIBLE,
    git_dirs,
    restore_checkout,
    restrict_checkout,
)
from autograder.core.course import PipelineError, list_days

MARK = "transformers-from-scratch classroom"
COURSE_ID = "transformers-from-scratch"
INSTRUCTOR = "instructor"

# nbgrader's lab and server extensions off in the class: those for instructors only, and
# Validate, which runs the notebook's visible cells only (the hidden tests are judged outside
# the kernel) and so said "Success! Your notebook passes all the tests" of wrong notebooks.
# The notebook's Self-check button is the class's check (autograder.classroom.hubcheck).
CLASS_OFF_LAB = ["formgrader", "course-list", "create-assignment", "validate-assignment"]
CLASS_OFF_SERVER = ["formgrader", "course_list", "validate_assignment"]


def students(n: int) -> list[str]:
    """The student account names ``student1``..``studentN``."""
    return [f"student{i}" for i in range(1, n + 1)]


# --------------------------------------------------------------------------- accounts


def run_as(entry: pwd.struct_passwd, fn, *args) -> object:
    """``fn(*args)`` in a forked child that is the account ``entry`` (its uid, its group, no
    other group, umask 022): what root must do inside a folder that account can write, where
    a link it planted would otherwise make root write or chown anything. Returns what ``fn``
    returned (JSON). ``fn`` must not import: the interpreter's own files may be out of the
    account's reach (pyenv under /root).

    Raises:
        PipelineError: ``fn`` failed (its error is on stderr).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the account, do the work, never return
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(entry.pw_gid, entry.pw_gid, entry.pw_gid)
            os.setresuid(entry.pw_uid, entry.pw_uid, entry.pw_uid)
            os.umask(0o022)
            os.write(w, json.dumps(fn(*args)).encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported by the exit status
            print(f"as {entry.pw_name}: {type(exc).__name__}: {exc}", file=sys.stderr,
                  flush=True)
        finally:
            os._exit(code)
    os.close(w)
    raw = b""
    while chunk := os.read(r, 65536):
        raw += chunk
    os.close(r)
    if os.waitpid(pid, 0)[1] != 0:
        raise PipelineError(f"a step run as {entry.pw_name} failed")
    return json.loads(raw or b"null")


def as_user(entry: pwd.struct_passwd, fn, *args) -> bool:
    """:func:`run_as`, for work that returns nothing: True when ``fn`` returned."""
    try:
        run_as(entry, lambda: fn(*args) and None)
    except PipelineError:
        return False
    return True


def _own_dir(parent_fd: int, name: str, uid: int, gid: int, mode: int, shown: Path) -> int:
    """Make ``name`` in the folder open as ``parent_fd`` a folder of ``uid:gid`` with
    ``mode``, never through a link (a link or a file there is refused); returns it, open."""
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as exc:
        raise PipelineError(f"{shown} is not a plain folder ({exc.strerror}): remove it and "
                            "start again") from None
    os.fchown(fd, uid, gid)
    os.fchmod(fd, mode)
    return fd


def _lab_settings(home: Path) -> None:
    """(As the account.) No "Jupyter news" pop-up and no update check: a class runs
    offline-friendly."""
    settings = home / ".jupyter/lab/user-settings/@jupyterlab/apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}', encoding="utf-8")


def ensure_account(name: str, home: Path) -> pwd.struct_passwd:
    """Create the system account ``name`` (home ``home``, ``0700``), or reuse one made here.

    ``home``'s parent must be root's. Inside the home, which the account can write, root
    writes nothing: the lab settings are written by the account itself (:func:`as_user`).

    Raises:
        PipelineError: an account of that name exists and was not made by the classroom,
            or ``home`` is a link.
    """
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        entry = None
    if entry is not None and MARK not in entry.pw_gecos:
        raise PipelineError(f"a system account {name!r} already exists and is not a classroom "
                            "account; remove it or run the classroom on another machine")
    if entry is None:  # no subordinate uids: no process of a uid the sweep cannot tell
        subprocess.run(["useradd", "-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0",
                        "--no-create-home", "--home-dir", str(home), "--shell",
                        "/bin/bash", "--comment", MARK, "--user-group", name], check=True)
    elif entry.pw_dir != str(home):
        subprocess.run(["usermod", "--home", str(home), name], check=True)
    entry = pwd.getpwnam(name)
    drop_subids(entry)
    home.parent.mkdir(parents=True, exist_ok=True)
    parent = os.open(home.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.close(_own_dir(parent, home.name, entry.pw_uid, entry.pw_gid, 0o700, home))
    finally:
        os.close(parent)
    if not as_user(entry, _lab_settings, home):
        print(f"note: the lab settings of {name} were not written (see above)", file=sys.stderr)
    return entry


def subid_ranges(entry: pwd.struct_passwd, kind: str = "uid") -> list[tuple[int, int]]:
    """The account's subordinate uid (``kind="gid"``: gid) ranges, ``(first, count)``, from
    ``/etc/subuid`` (``/etc/subgid``), where a line names it or its uid."""
    try:
        lines = Path(f"/etc/sub{kind}").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        owner, _, rest = line.strip().partition(":")
        first, _, count = rest.partition(":")
        if owner in (entry.pw_name, str(entry.pw_uid)) and first.isdigit() and count.isdigit():
            out.append((int(first), int(count)))
    return out


def drop_subids(entry: pwd.struct_passwd) -> None:
    """Remove the account's subordinate uid and gid ranges (``usermod --del-subuids``): with
    them (and ``newuidmap``) it could leave processes of uids that are not its own."""
    args = [f"--del-sub{kind}s={first}-{first + count - 1}"
            for kind in ("uid", "gid") for first, count in subid_ranges(entry, kind) if count]
    if args:
        subprocess.run(["usermod", *args, entry.pw_name], check=True)
    if subid_ranges(entry) or subid_ranges(entry, "gid"):
        print(f"note: {entry.pw_name} still has subordinate ids in /etc/subuid or /etc/subgid;"
              " the sweep ends their processes too", file=sys.stderr)


def load_accounts(folder: Path, names: list[str]) -> dict[str, str]:
    """``{name: password}``: those in ``accounts.json`` kept, new ones generated and saved."""
    path = folder / "accounts.json"
    accounts: dict[str, str] = {}
    if path.is_file():
        accounts = json.loads(path.read_text(encoding="utf-8"))
    accounts = {n: accounts.get(n) or secrets.token_urlsafe(9) for n in names}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(accounts, indent=1), encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return accounts


def account_uids(folder: Path) -> dict[int, str]:
    """uid -> name of the classroom accounts listed in ``folder/accounts.json``."""
    try:
        names = json.loads((folder / "accounts.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if MARK in entry.pw_gecos:
            out[entry.pw_uid] = name
    return out


# --------------------------------------------------------------------------- folders


def write_nbgrader_config(path: Path, exchange: Path, course_root: Path | None = None) -> None:
    """An nbgrader config naming the course and the exchange (and the course folder)."""
    lines = ["c = get_config()  # noqa: F821",
             f"c.CourseDirectory.course_id = {COURSE_ID!r}",
             f"c.Exchange.root = {str(exchange)!r}"]
    if course_root is not None:
        lines.append(f"c.CourseDirectory.root = {str(course_root)!r}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.chmod(path, 0o644)


def make_exchange(folder: Path, inst: pwd.struct_passwd) -> Path:
    """nbgrader's exchange ``folder/exchange``: sticky (no one renames or deletes another's
    folder), the course's folders made now, with nbgrader's modes, so no student can create
    them first. They are the instructor's, so each is opened without following a link."""
    exchange = folder / "exchange"
    uid, gid = inst.pw_uid, inst.pw_gid
    top = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    fds = [top]
    try:
        fds.append(x := _own_dir(top, "exchange", uid, gid, 0o1777, exchange))
        fds.append(c := _own_dir(x, COURSE_ID, uid, gid, 0o755, exchange / COURSE_ID))
        for name, mode in (("outbound", 0o755), ("inbound", 0o2733), ("feedback", 0o711)):
            fds.append(_own_dir(c, name, uid, gid, mode, exchange / COURSE_ID / name))
    finally:
        for fd in fds:
            os.close(fd)
    return exchange


def _release_files(root: Path) -> dict[str, dict[str, bytes]]:
    """(As root.) Every day's ``release/`` files, ``{day: {relative path: bytes}}``: the
    release folder is closed to other accounts, so root reads and the instructor writes."""
    out: dict[str, dict[str, bytes]] = {}
    for day in list_days(root):
        src = root / "release" / day
        out[day] = {p.relative_to(src).as_posix(): p.read_bytes() for p in sorted(src.rglob("*"))
                    if p.is_file() and not p.is_symlink()
                    and ".ipynb_checkpoints" not in p.relative_to(src).parts}
    return out


def _write_course(course: Path, files: dict[str, dict[str, bytes]], exchange: Path) -> None:
    """(As the instructor.) ``course/release/<day>/`` for each day not there yet, and
    ``course/nbgrader_config.py``."""
    (course / "release").mkdir(parents=True, exist_ok=True)
    for day, day_files in files.items():
        dest = course / "release" / day
        if dest.exists() or dest.is_symlink():
            continue
        for rel, data in day_files.items():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(data)
    write_nbgrader_config(course / "nbgrader_config.py", exchange, course)


def instructor_course(course: Path, root: Path, inst: pwd.struct_passwd,
                      exchange: Path) -> None:
    """The instructor's course folder: every day's release/, ready to release; written by
    the instructor account itself, since it can plant links in its own home.

    Raises:
        PipelineError: the instructor account could not write it.
    """
    if not as_user(inst, _write_course, course, _release_files(root), exchange):
        raise PipelineError(f"could not write the instructor's course folder {course} as "
                            f"{inst.pw_name} (see above)")


def prepare(folder: Path, root: Path, n_students: int) -> dict[str, str]:
    """Accounts, homes, exchange, the instructor's course and the users' Jupyter config."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o711)
    names = [*students(n_students), INSTRUCTOR]
    accounts = load_accounts(folder, names)
    entries = {n: ensure_account(n, folder / "home" / n) for n in names}
    os.chmod(folder / "home", 0o711)
    inst = entries[INSTRUCTOR]

    exchange = make_exchange(folder, inst)
    instructor_course(folder / "home" / INSTRUCTOR / "course", root, inst, exchange)

    # Every user's Jupyter config (JUPYTER_CONFIG_PATH): nbgrader's exchange, and no
    # instructor-only nbgrader extension in the servers.
    config = folder / "config"
    (config / "labconfig").mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.d").mkdir(exist_ok=True)
    write_nbgrader_config(config / "nbgrader_config.py", exchange)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {f"@jupyter/nbgrader:{x}": True for x in CLASS_OFF_LAB}}),
        encoding="utf-8")
    (config / "jupyter_server_config.d" / "tfs-classroom.json").write_text(json.dumps({
        "ServerApp": {"jpserver_extensions": {f"nbgrader.server_extensions.{x}": False
                                              for x in CLASS_OFF_SERVER}},
        "LabApp": {"news_url": None}}), encoding="utf-8")
    for p in [config, *config.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return accounts


def _runs_as(python: Path, name: str) -> subprocess.CompletedProcess:
    entry = pwd.getpwnam(name)
    try:
        return subprocess.run([str(python), "-c", "import course, jupyterhub, nbgrader"],
                              user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd="/",
                              capture_output=True, text=True, env={"HOME": entry.pw_dir},
                              timeout=120)
    except OSError as exc:  # the interpreter itself is out of the account's reach
        return subprocess.CompletedProcess([str(python)], 126, "", str(exc))


def _copy_scripts(src: Path, dest: Path) -> None:
    """The course venv's console scripts (nbgrader, jupyter, alembic...) for the overlay venv:
    the same files with the overlay's interpreter in their ``#!`` line."""
    shebang = f"#!{dest / 'python'}\n"
    for script in sorted(src.iterdir()):
        target = dest / script.name
        if target.exists() or script.name.startswith(("python", "activate", "pip")):
            continue
        try:
            first, rest = script.read_text(encoding="utf-8").split("\n", 1)
        except (UnicodeDecodeError, ValueError, OSError):
            continue
        if first.startswith("#!") and "python" in first:
            target.write_text(shebang + rest, encoding="utf-8")
            os.chmod(target, 0o755)


def student_python(folder: Path, name: str) -> tuple[Path, dict[str, str]]:
    """The Python the users' servers run, and the environment it needs.

    The course's own ``.venv`` when the account ``name`` can run it. Otherwise (its base
    interpreter lives where other accounts cannot go, e.g. pyenv under ``/root``) a small
    venv ``folder/python`` made from the system's ``python3.X`` of the same version, which
    reads the course's site-packages and Jupyter data (compiled wheels of one CPython
    minor version share their ABI).

    Raises:
        PipelineError: neither can be run by the account.
    """
    venv = Path(sys.prefix)
    if _runs_as(Path(sys.executable), name).returncode == 0:
        return Path(sys.executable), {}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    overlay = folder / "python"
    base = next((p for p in (Path("/usr/bin") / version, Path("/usr/local/bin") / version)
                 if p.is_file()), None)
    if base is not None:
        if not (overlay / "bin" / "python").exists():
            subprocess.run([str(base), "-m", "venv", "--without-pip", str(overlay)], check=True)
        _copy_scripts(venv / "bin", overlay / "bin")
        inner = overlay / "lib" / version / "site-packages"
        (inner / "tfs-course.pth").write_text(
            f"import site; site.addsitedir({str(site)!r})\n", encoding="utf-8")
        env = {"JUPYTER_PATH": str(venv / "share" / "jupyter"),
               "JUPYTERLAB_DIR": str(venv / "share" / "jupyter" / "lab"),
               "JUPYTER_CONFIG_PATH_EXTRA": str(venv / "etc" / "jupyter")}
        probe = _runs_as(overlay / "bin" / "python", name)
        if probe.returncode == 0:
            return overlay / "bin" / "python", env
    else:
        probe = _runs_as(Path(sys.executable), name)
    raise PipelineError(
        f"the account {name} cannot run the course's Python ({sys.executable}: every folder "
        f"above it needs o+x and the environment o+rx; an interpreter under /root is closed "
        f"to other users), and no system {version} could stand in for it:\n"
        f"{probe.stderr.strip()[-800:]}")


# --------------------------------------------------------------------------- the hub


def users_python(folder: Path) -> tuple[Path, dict[str, str]]:
    """The Python (and its environment) that ``start`` chose for the accounts' processes."""
    data = json.loads((folder / "config" / "python.json").read_text(encoding="utf-8"))
    env = dict(data["env"])
    extra = env.pop("JUPYTER_CONFIG_PATH_EXTRA", "")
    if extra:
        env["JUPYTER_CONFIG_PATH"] = extra
    return Path(data["python"]), env


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise PipelineError(
            f"classroom {what} must run as root: the hub starts each user's server as that "
            "user's own system account (created with useradd), and grading drops each kernel "
            "to a uid of its own. Run it with sudo (e.g. `sudo make classroom`).")
