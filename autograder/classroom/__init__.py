"""``python -m autograder classroom``: the course on a JupyterHub, on one machine.

``classroom start`` (as root) sets up, under one folder (``--dir``, default
``/srv/tfs-classroom``):

- ``accounts.json`` (root, ``0600``): one generated password per account, printed at start;
- system accounts ``student1``..``studentN`` and ``instructor`` (``useradd``, marked in
  their GECOS field so an account of the machine is never taken over), each with a private
  home ``home/<name>`` (``0700``): each hub user's server runs as that
  account (JupyterHub's ``LocalProcessSpawner``), so students cannot read each other's work;
- nbgrader's exchange (``exchange/``, sticky like ``/tmp``; the course's ``inbound`` is
  writable and not listable, nbgrader's own permissions);
- the instructor's course folder ``home/instructor/course`` holding every day's ``release/``
  notebooks, ready for ``nbgrader release_assignment``;
- ``hub/`` (root, ``0700``): the generated ``jupyterhub_config.py``, the hub's database, logs;
- ``check/``: the class's Self-check (:mod:`autograder.classroom.hubcheck`), which grades a
  student's saved notebook with the hidden tests on this side, in the sandbox, within a limit
  per student the instructor sets (``--checks-per-day``).

It also makes the checkout's ``source/``, ``solutions/``, ``autograder/`` (the hidden checks),
``tests/`` and its git folders (the repository's own too, for a worktree) unreadable to other
accounts, students' servers need only ``.venv`` and ``course/``, but only while the hub runs:
the previous modes go to ``checkout-modes.json`` (root, ``0600``) and ``classroom stop``,
Ctrl-C or, after a killed run, the next start's sweep give them back. It refuses to start while a
student account can still read hidden checks or answers anywhere it looks
(:mod:`autograder.classroom.guard`). Servers start under resource limits
(:mod:`autograder.classroom.spawner`). It then runs JupyterHub (with
``configurable-http-proxy``) until Ctrl-C or ``classroom stop``, and on the way out stops
the hub, the proxy and every process of the classroom's accounts (by uid, as each account:
:mod:`autograder.classroom.procs`). The instructor's loop is in
:mod:`autograder.classroom.loop`, the set-up in :mod:`autograder.classroom.setup`.

Package: this module starts and stops the classroom; :mod:`~autograder.classroom.setup`,
``checkout``, ``guard``, ``procs``, ``auth``, ``spawner`` and ``vet`` its parts;
:mod:`~autograder.classroom.loop` the instructor's collect-grade-return loop. It may import
every package below the CLI (grading, authoring, the sandbox, core) and :mod:`course`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from autograder.classroom import hubcheck
from autograder.classroom.guard import refuse_if_exposed
from autograder.classroom.procs import cmdline, leftovers, restore_modes, sweep
from autograder.classroom.setup import (
    CHECKOUT_MODES,
    INSTRUCTOR,
    _require_root,
    prepare,
    restrict_checkout,
    student_python,
    students,
)
from autograder.core.course import PipelineError, find_root, need

DEFAULT_DIR = Path(os.environ.get("TFS_CLASSROOM_DIR") or "/srv/tfs-classroom")


# --------------------------------------------------------------------------- the hub


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hub_config(folder: Path, ip: str, port: int, names: list[str], python: Path,
               extra_env: dict[str, str], subdomain_host: str = "",
               user_memory: float | None = None) -> Path:
    """Write ``hub/jupyterhub_config.py`` and return its path.

    ``subdomain_host`` (e.g. ``https://hub.example.org``, with wildcard DNS and TLS for
    ``*.hub.example.org``) gives each user's server an origin of its own; ``user_memory``
    (GiB, 0: none) replaces :class:`autograder.classroom.spawner.LimitedSpawner`'s address
    space limit."""
    hub = folder / "hub"
    extra_env = dict(extra_env)
    config_path = ":".join(filter(None, [str(folder / "config"),
                                         extra_env.pop("JUPYTER_CONFIG_PATH_EXTRA", "")]))
    proxy = shutil.which("configurable-http-proxy")
    if proxy is None:
        raise PipelineError("configurable-http-proxy is not installed: "
                            "`npm install -g configurable-http-proxy` (Node.js from apt)")
    env = {"JUPYTER_CONFIG_PATH": config_path,
           "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
           "TFS_HUB_CHECK": str(hubcheck.socket_path(folder)), **extra_env}
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
            "autograder.classroom.auth.AccountsAuthenticator",
        "AccountsAuthenticator.accounts_file": str(folder / "accounts.json"),
        "Authenticator.allowed_users": sorted(names),
        "Authenticator.admin_users": [INSTRUCTOR],
        "JupyterHub.spawner_class": "autograder.classroom.spawner.LimitedSpawner",
        "Spawner.cmd": [str(python), "-m", "jupyterhub.singleuser"],
        "Spawner.default_url": "/lab",
        "Spawner.notebook_dir": "~",
        "Spawner.environment": env,
        "Spawner.start_timeout": 120, "Spawner.http_timeout": 120,
        "ConfigurableHTTPProxy.command": [proxy],
        "ConfigurableHTTPProxy.api_url": f"http://127.0.0.1:{_free_port()}",
        "ConfigurableHTTPProxy.pid_file": str(hub / "proxy.pid"),
    }
    if subdomain_host:
        settings["JupyterHub.subdomain_host"] = subdomain_host
    if user_memory is not None:
        settings["LimitedSpawner.address_space"] = int(user_memory * 1024 ** 3)
    lines = ['"""Written by `python -m autograder classroom start`; edits are overwritten."""',
             "c = get_config()  # noqa: F821"]
    for key, value in settings.items():
        cls, attr = key.split(".")
        lines.append(f"c.{cls}.{attr} = {value!r}")
    path = hub / "jupyterhub_config.py"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


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


def start_check(folder: Path, root: Path, per_day: int) -> subprocess.Popen:
    """Start the class's self-check (:mod:`autograder.classroom.hubcheck`) as root, in
    ``hub/`` (so that :func:`sweep` ends it with the hub), and wait for its socket."""
    path = hubcheck.socket_path(folder)
    path.unlink(missing_ok=True)
    with open(folder / "hub" / "check.log", "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "autograder.classroom.hubcheck",
                                 "--dir", str(folder), "--root", str(root),
                                 "--checks-per-day", str(per_day)],
                                cwd=folder / "hub", stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise PipelineError(f"the class's self-check did not start (log "
                                f"{folder / 'hub' / 'check.log'})")
        time.sleep(0.1)
    return proc


def start(folder: Path, root: Path, n_students: int, ip: str, port: int,
          subdomain_host: str = "", user_memory: float | None = None,
          checks_per_day: int = 20) -> int:
    """Set up the classroom, run the hub until Ctrl-C / SIGTERM, then stop everything.

    Raises:
        PipelineError: not root, already running, or a student account could read the
            hidden checks or the answers (:func:`autograder.classroom.guard.refuse_if_exposed`).
    """
    _require_root("start")
    t0 = time.monotonic()
    folder = folder.resolve()
    state = folder / "hub" / "classroom.json"
    if state.is_file() and cmdline(json.loads(state.read_text())["pid"]):
        raise PipelineError(f"a classroom is already running from {folder} "
                            f"(stop it: python -m autograder classroom stop --dir {folder})")
    sweep(folder)  # anything a killed earlier run left behind, the checkout's modes too
    if left := leftovers(folder):
        raise PipelineError("processes of the classroom survived the sweep (the checkout stays "
                            "closed): " + "; ".join(f"{p} {c}" for p, c in left))
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o711)
    closed = restrict_checkout(root, folder / CHECKOUT_MODES)
    try:
        accounts = prepare(folder, root, n_students)
        (folder / "hub").mkdir(exist_ok=True)
        os.chmod(folder / "hub", 0o700)
        python, extra_env = student_python(folder, students(n_students)[0])
        refuse_if_exposed(python, students(n_students)[0], root, extra_env)
        (folder / "config" / "python.json").write_text(
            json.dumps({"python": str(python), "env": extra_env}), encoding="utf-8")
        cfg = hub_config(folder, ip, port, list(accounts), python, extra_env, subdomain_host,
                         user_memory)
    except BaseException:
        restore_modes(folder)  # the checkout is closed only while the hub runs
        raise
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
    check = None
    try:
        check = start_check(folder, root, checks_per_day)
        wait_for_hub(url, proc, log)
        if closed:
            print("closed to other accounts while the hub runs: "
                  + ", ".join(p.name for p in closed))
        shown = url if ip not in ("", "0.0.0.0") else f"http://{socket.getfqdn()}:{port}"
        print(f"\nThe classroom's hub is up at {shown} (in {time.monotonic() - t0:.1f} s)")
        print(f"  {'account':<12} password")
        for name, password in accounts.items():
            print(f"  {name:<12} {password}" + ("   (admin)" if name == INSTRUCTOR else ""))
        if not subdomain_host:
            print("\nStudents' servers share the hub's origin: do not open links into "
                  "/user/<student>/ (see docs/instructors.md, 'Running a class'; "
                  "--subdomain-host).")
        print(f"\nInstructor, as root: python -m autograder classroom release|collect|grade|"
              f"return DAY --dir {folder}\nStop: Ctrl-C, or python -m autograder classroom "
              f"stop --dir {folder}", flush=True)
        while not stop_now and proc.poll() is None:
            time.sleep(0.3)
    finally:
        if check is not None and check.poll() is None:
            check.terminate()
            check.wait(timeout=10)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the hub stops the servers and the proxy
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        swept = sweep(folder)
        state.unlink(missing_ok=True)
        survived = bool(leftovers(folder))  # sweep reported them; the checkout stays closed
        if not survived:
            print(f"classroom stopped; {len(swept)} leftover process(es) ended" if swept
                  else "classroom stopped; nothing left running", flush=True)
    return 0 if stop_now and not survived else 1


def stop(folder: Path, timeout: float = 60) -> int:
    """Stop the classroom running from ``folder`` and anything it left behind."""
    _require_root("stop")
    folder = folder.resolve()
    state = folder / "hub" / "classroom.json"
    if state.is_file():
        pid = json.loads(state.read_text())["pid"]
        if "autograder" in cmdline(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while cmdline(pid) and time.monotonic() < deadline:
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
    need("jupyterhub", "classroom", "classroom")
    root = find_root(args.root)
    if args.action == "start":
        return start(args.dir, root, args.students, args.ip, args.port, args.subdomain_host,
                     args.user_memory, args.checks_per_day)
    if args.action == "stop":
        return stop(args.dir)
    from autograder.classroom import loop as classroom_loop

    return classroom_loop.run(args.action, args.dir.resolve(), root, args)


def add_classroom_command(sub, add_common) -> None:
    """Register ``classroom start|stop|release|collect|grade|return``."""
    p = sub.add_parser("classroom", help="run the course on a JupyterHub (root; see "
                                         "docs/instructors.md, 'Running a class')")
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
    p.add_argument("--subdomain-host", default="",
                   help="start: give each user's server its own origin, e.g. "
                        "https://hub.example.org (needs wildcard DNS and TLS for *.hub...)")
    p.add_argument("--user-memory", type=float, default=None, metavar="GIB",
                   help="start: address space limit per process of a user's server, GiB "
                        "(default 6; 0: none, e.g. for CUDA)")
    p.add_argument("--checks-per-day", type=int, default=20, metavar="N",
                   help="start: the class's Self-check button, judged on this machine: at most "
                        "N checks per student, assignment and calendar day (default 20; 0: no "
                        "limit)")
    p.add_argument("--jobs", type=int, default=None, help="grade: parallel workers")
    p.set_defaults(func=_cmd_classroom)
