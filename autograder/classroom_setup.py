"""Setting up the classroom's machine: accounts, folders, the exchange, the users' Python.

Used by :mod:`autograder.classroom` (``classroom start``); see its docstring for the layout.
Everything here runs as root.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

from autograder.build import PipelineError, list_days

MARK = "transformers-from-scratch classroom"
COURSE_ID = "transformers-from-scratch"
INSTRUCTOR = "instructor"

# What a student's server needs from the checkout; everything else there is closed to them.
STUDENT_VISIBLE = {".venv", "course"}
# nbgrader's lab and server extensions that are for instructors only.
INSTRUCTOR_ONLY_LAB = ["formgrader", "course-list", "create-assignment"]
INSTRUCTOR_ONLY_SERVER = ["formgrader", "course_list"]


def students(n: int) -> list[str]:
    """The student account names ``student1``..``studentN``."""
    return [f"student{i}" for i in range(1, n + 1)]


# --------------------------------------------------------------------------- accounts


def ensure_account(name: str, home: Path) -> pwd.struct_passwd:
    """Create the system account ``name`` (home ``home``, ``0700``), or reuse one made here.

    Raises:
        PipelineError: an account of that name exists and was not made by the classroom.
    """
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        entry = None
    if entry is not None and MARK not in entry.pw_gecos:
        raise PipelineError(f"a system account {name!r} already exists and is not a classroom "
                            "account; remove it or run the classroom on another machine")
    if entry is None:
        subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell",
                        "/bin/bash", "--comment", MARK, "--user-group", name], check=True)
    elif entry.pw_dir != str(home):
        subprocess.run(["usermod", "--home", str(home), name], check=True)
    entry = pwd.getpwnam(name)
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    os.chmod(home, 0o700)
    # No "Jupyter news" pop-up and no update check: a class runs offline-friendly.
    settings = home / ".jupyter/lab/user-settings/@jupyterlab/apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}', encoding="utf-8")
    for p in [home / ".jupyter", *(home / ".jupyter").rglob("*")]:
        os.chown(p, entry.pw_uid, entry.pw_gid)
    return entry


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


def restrict_checkout(root: Path) -> list[Path]:
    """Close the checkout to other accounts except ``.venv`` and ``course/``; returns what
    changed. The checkout itself stays traversable (``o+x``) but not listable."""
    changed = []
    for p in [root, *sorted(root.iterdir())]:
        if p.is_symlink() or (p != root and p.name in STUDENT_VISIBLE):
            continue
        mode = p.stat().st_mode & 0o7777
        want = (mode & ~0o006) | 0o001 if p == root else mode & ~0o007
        if want != mode:
            os.chmod(p, want)
            changed.append(p)
    return changed


def write_nbgrader_config(path: Path, exchange: Path, course_root: Path | None = None) -> None:
    """An nbgrader config naming the course and the exchange (and the course folder)."""
    lines = ["c = get_config()  # noqa: F821",
             f"c.CourseDirectory.course_id = {COURSE_ID!r}",
             f"c.Exchange.root = {str(exchange)!r}"]
    if course_root is not None:
        lines.append(f"c.CourseDirectory.root = {str(course_root)!r}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.chmod(path, 0o644)


def prepare(folder: Path, root: Path, n_students: int) -> dict[str, str]:
    """Accounts, homes, exchange, the instructor's course and the users' Jupyter config."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o711)
    names = [*students(n_students), INSTRUCTOR]
    accounts = load_accounts(folder, names)
    entries = {n: ensure_account(n, folder / "home" / n) for n in names}
    os.chmod(folder / "home", 0o711)
    inst = entries[INSTRUCTOR]

    # The exchange: sticky (no one renames or deletes another's folder), the course's
    # folders made now, with nbgrader's modes, so no student can create them first.
    exchange = folder / "exchange"
    course_x = exchange / COURSE_ID
    for d, mode in ((exchange, 0o1777), (course_x, 0o755), (course_x / "outbound", 0o755),
                    (course_x / "inbound", 0o2733), (course_x / "feedback", 0o711)):
        d.mkdir(exist_ok=True)
        os.chown(d, inst.pw_uid, inst.pw_gid)
        os.chmod(d, mode)

    # The instructor's course folder: every day's release/, ready to release.
    course = folder / "home" / INSTRUCTOR / "course"
    (course / "release").mkdir(parents=True, exist_ok=True)
    for day in list_days(root):
        dest = course / "release" / day
        if not dest.exists():
            shutil.copytree(root / "release" / day, dest,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    write_nbgrader_config(course / "nbgrader_config.py", exchange, course)
    for p in [course, *course.rglob("*")]:
        os.chown(p, inst.pw_uid, inst.pw_gid)

    # Every user's Jupyter config (JUPYTER_CONFIG_PATH): nbgrader's exchange, and no
    # instructor-only nbgrader extension in the servers.
    config = folder / "config"
    (config / "labconfig").mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.d").mkdir(exist_ok=True)
    write_nbgrader_config(config / "nbgrader_config.py", exchange)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {f"@jupyter/nbgrader:{x}": True for x in INSTRUCTOR_ONLY_LAB}}),
        encoding="utf-8")
    (config / "jupyter_server_config.d" / "tfs-classroom.json").write_text(json.dumps({
        "ServerApp": {"jpserver_extensions": {f"nbgrader.server_extensions.{x}": False
                                              for x in INSTRUCTOR_ONLY_SERVER}},
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
