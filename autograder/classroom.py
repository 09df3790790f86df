"""``python -m autograder classroom``: the course on a JupyterHub, on one machine.

``classroom start`` (as root) sets up, under one folder (``--dir``, default
``/srv/tfs-classroom``):

- ``accounts.json`` (root, ``0600``): one generated password per account, printed at start;
- system accounts ``student1``..``studentN`` and ``instructor`` (``useradd``, marked with
  :data:`MARK` in their GECOS field so an account of the machine is never taken over), each
  with a private home ``home/<name>`` (``0700``): each hub user's server runs as that
  account (JupyterHub's ``LocalProcessSpawner``), so students cannot read each other's work;
- nbgrader's exchange (``exchange/``, sticky like ``/tmp``; the course's ``inbound`` is
  writable and not listable, nbgrader's own permissions);
- the instructor's course folder ``home/instructor/course`` holding every day's ``release/``
  notebooks, ready for ``nbgrader release_assignment``;
- ``hub/`` (root, ``0700``): the generated ``jupyterhub_config.py``, the hub's database, logs.

It also makes the checkout's ``source/``, ``solutions/``, ``autograder/`` (the hidden checks),
``tests/`` and ``.git`` unreadable to other accounts: students' servers need only ``.venv``
and ``course/``. It then runs JupyterHub (with ``configurable-http-proxy``) until Ctrl-C or
``classroom stop``, and on the way out stops the hub, the proxy and every process of the
classroom's accounts. The instructor's loop is in :mod:`autograder.classroom_loop`.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from autograder.build import PipelineError, find_root, list_days

MARK = "transformers-from-scratch classroom"
COURSE_ID = "transformers-from-scratch"
INSTRUCTOR = "instructor"
DEFAULT_DIR = Path(os.environ.get("TFS_CLASSROOM_DIR") or "/srv/tfs-classroom")
# What a student's server needs from the checkout; everything else there is closed to them.
STUDENT_VISIBLE = {".venv", "course"}
# nbgrader's lab and server extensions that are for instructors only.
INSTRUCTOR_ONLY_LAB = ["formgrader", "course-list", "create-assignment"]
INSTRUCTOR_ONLY_SERVER = ["formgrader", "course_list"]


def students(n: int) -> list[str]:
    """The student account names ``student1``..``studentN``."""
    return [f"student{i}" for i in range(1, n + 1)]


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise PipelineError(
            f"classroom {what} must run as root: the hub starts each user's server as that "
            "user's own system account (created with useradd), and grading drops each kernel "
            "to a uid of its own. Run it with sudo (e.g. `sudo make classroom`).")


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hub_config(folder: Path, ip: str, port: int, names: list[str], python: Path,
               extra_env: dict[str, str]) -> Path:
    """Write ``hub/jupyterhub_config.py`` and return its path."""
    hub = folder / "hub"
    extra_env = dict(extra_env)
    config_path = ":".join(filter(None, [str(folder / "config"),
                                         extra_env.pop("JUPYTER_CONFIG_PATH_EXTRA", "")]))
    proxy = shutil.which("configurable-http-proxy")
    if proxy is None:
        raise PipelineError("configurable-http-proxy is not installed: "
                            "`npm install -g configurable-http-proxy` (Node.js from apt)")
    env = {"JUPYTER_CONFIG_PATH": config_path,
           "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin", **extra_env}
    for key in ("COURSE_DATA_DIR", "COURSE_CACHE_DIR"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    settings = {
        "JupyterHub.ip": ip, "JupyterHub.port": port,
        "JupyterHub.hub_ip": "127.0.0.1", "JupyterHub.hub_port": _free_port(),
        "JupyterHub.db_url": f"sqlite:///{hub / 'jupyterhub.sqlite'}",
        "JupyterHub.cookie_secret_file": str(hub / "jupyterhub_cookie_secret"),
        "JupyterHub.pid_file": str(hub / "jupyterhub.pid"),
        "JupyterHub.cleanup_servers": True, "JupyterHub.cleanup_proxy": True,
        "JupyterHub.authenticator_class":
            "autograder.classroom_auth.AccountsAuthenticator",
        "AccountsAuthenticator.accounts_file": str(folder / "accounts.json"),
        "Authenticator.allowed_users": sorted(names),
        "Authenticator.admin_users": [INSTRUCTOR],
        "JupyterHub.spawner_class": "jupyterhub.spawner.LocalProcessSpawner",
        "Spawner.cmd": [str(python), "-m", "jupyterhub.singleuser"],
        "Spawner.default_url": "/lab",
        "Spawner.notebook_dir": "~",
        "Spawner.environment": env,
        "Spawner.start_timeout": 120, "Spawner.http_timeout": 120,
        "ConfigurableHTTPProxy.command": [proxy],
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{_free_port()}",
        "ConfigurableHTTPProxy.pid_file": str(hub / "proxy.pid"),
    }
    lines = ['"""Written by `python -m autograder classroom start`; edits are overwritten."""',
             "c = get_config()  # noqa: F821"]
    for key, value in settings.items():
        cls, attr = key.split(".")
        lines.append(f"c.{cls}.{attr} = {value!r}")
    path = hub / "jupyterhub_config.py"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _proc_uid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return ""


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def leftovers(folder: Path) -> list[tuple[int, str]]:
    """(pid, command) of every process of this classroom still running: any process of its
    accounts, and any started in its ``hub/`` folder (the hub, the proxy)."""
    uids = account_uids(folder)
    hub = str((folder / "hub").resolve())
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        pid = int(d.name)
        if _proc_uid(pid) in uids or _cwd(pid) == hub:
            cmd = _cmdline(pid)
            if cmd:  # zombies and kernel threads have none
                out.append((pid, cmd))
    return out


def sweep(folder: Path, grace: float = 10.0) -> list[tuple[int, str]]:
    """Stop every leftover process of this classroom (SIGTERM, then SIGKILL); returns those
    that were found."""
    found = leftovers(folder)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in leftovers(folder):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while leftovers(folder) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not leftovers(folder):
            break
    return found


def wait_for_hub(url: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    """Return once the hub answers at ``url``; raise with the log's tail if it does not."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/hub/api", timeout=2):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
                raise PipelineError(f"the hub did not start (log {log}):\n{tail}") from None
            time.sleep(0.3)


def start(folder: Path, root: Path, n_students: int, ip: str, port: int) -> int:
    """Set up the classroom, run the hub until Ctrl-C / SIGTERM, then stop everything."""
    _require_root("start")
    t0 = time.monotonic()
    folder = folder.resolve()
    state = folder / "hub" / "classroom.json"
    if state.is_file() and _cmdline(json.loads(state.read_text())["pid"]):
        raise PipelineError(f"a classroom is already running from {folder} "
                            f"(stop it: python -m autograder classroom stop --dir {folder})")
    sweep(folder)  # anything a killed earlier run left behind
    closed = restrict_checkout(root)
    accounts = prepare(folder, root, n_students)
    (folder / "hub").mkdir(exist_ok=True)
    os.chmod(folder / "hub", 0o700)
    python, extra_env = student_python(folder, students(n_students)[0])
    (folder / "config" / "python.json").write_text(
        json.dumps({"python": str(python), "env": extra_env}), encoding="utf-8")
    cfg = hub_config(folder, ip, port, list(accounts), python, extra_env)
    log = folder / "hub" / "hub.log"
    url = f"http://{'127.0.0.1' if ip in ('', '0.0.0.0') else ip}:{port}"
    stop_now = []

    def on_signal(signum, frame):
        stop_now.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(cfg)],
                                cwd=folder / "hub", stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    state.write_text(json.dumps({"pid": os.getpid(), "hub_pid": proc.pid, "url": url}))
    try:
        wait_for_hub(url, proc, log)
        if closed:
            print("closed to other accounts: " + ", ".join(p.name for p in closed))
        shown = url if ip not in ("", "0.0.0.0") else f"http://{socket.getfqdn()}:{port}"
        print(f"\nThe classroom's hub is up at {shown} (in {time.monotonic() - t0:.1f} s)")
        print(f"  {'account':<12} password")
        for name, password in accounts.items():
            print(f"  {name:<12} {password}" + ("   (admin)" if name == INSTRUCTOR else ""))
        print(f"\nInstructor, as root: python -m autograder classroom release|collect|grade|"
              f"return DAY --dir {folder}\nStop: Ctrl-C, or python -m autograder classroom "
              f"stop --dir {folder}", flush=True)
        while not stop_now and proc.poll() is None:
            time.sleep(0.3)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the hub stops the servers and the proxy
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        swept = sweep(folder)
        state.unlink(missing_ok=True)
        print(f"classroom stopped; {len(swept)} leftover process(es) ended" if swept
              else "classroom stopped; nothing left running", flush=True)
    return 0 if stop_now else 1


def stop(folder: Path, timeout: float = 60) -> int:
    """Stop the classroom running from ``folder`` and anything it left behind."""
    _require_root("stop")
    folder = folder.resolve()
    state = folder / "hub" / "classroom.json"
    if state.is_file():
        pid = json.loads(state.read_text())["pid"]
        if "autograder" in _cmdline(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while _cmdline(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
    swept = sweep(folder)
    state.unlink(missing_ok=True)
    left = leftovers(folder)
    if left:
        print("still running: " + "; ".join(f"{p} {c}" for p, c in left), file=sys.stderr)
        return 1
    print(f"classroom in {folder} stopped" + (f" ({len(swept)} process(es) ended)"
                                              if swept else ""))
    return 0


# --------------------------------------------------------------------------- CLI


def _cmd_classroom(args: argparse.Namespace) -> int:
    root = find_root(args.root)
    if args.action == "start":
        return start(args.dir, root, args.students, args.ip, args.port)
    if args.action == "stop":
        return stop(args.dir)
    from autograder import classroom_loop

    return classroom_loop.run(args.action, args.dir.resolve(), root, args)


def add_classroom_command(sub, add_common) -> None:
    """Register ``classroom start|stop|release|collect|grade|return``."""
    p = sub.add_parser("classroom", help="run the course on a JupyterHub (root; see README "
                                         "'Running a class')")
    add_common(p)
    p.add_argument("action", choices=["start", "stop", "release", "collect", "grade", "return"],
                   help="start/stop the hub; the instructor's loop: release DAY, collect DAY, "
                        "grade DAY, return DAY")
    p.add_argument("day", nargs="?", help="day to release/collect/grade/return (2, day02...)")
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                   help=f"the classroom's folder (default {DEFAULT_DIR}, or $TFS_CLASSROOM_DIR)")
    p.add_argument("--students", type=int, default=4, help="student accounts (default 4)")
    p.add_argument("--ip", default="0.0.0.0", help="address the hub listens on")
    p.add_argument("--port", type=int, default=8000, help="the hub's port (default 8000)")
    p.add_argument("--jobs", type=int, default=None, help="grade: parallel workers")
    p.set_defaults(func=_cmd_classroom)
