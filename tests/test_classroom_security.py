"""The classroom's set-up against a dishonest student or instructor (run as root, like CI).

- root never follows a link planted in an account's own folders (``ensure_account``, the
  exchange, the instructor's course folder): the link's target is left untouched;
- ``restrict_checkout`` closes the repository's common git folder of a worktree checkout;
- ``refuse_if_exposed`` (run as the account) finds a readable second checkout, a searchable
  ``solutions/`` and an importable ``autograder.judge.checks``, and nothing once they are closed;
- ``LimitedSpawner``'s servers start under its resource limits;
- ``sweep`` ends an account's process that blanked its command line, one that keeps
  forking and one that keeps killing every other process of its account, in bounded time;
- accounts keep no subordinate uids; ``restore_checkout`` changes only the inodes that
  ``restrict_checkout`` closed, never through a link;
- ``checkouts`` ignores an ``autograder/judge/checks`` a student made (``/tmp``, their own
  folder, a sticky world-writable one).

They use one throw-away account of their own (``tfs-sectest``), removed at the end.
"""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from autograder.classroom.guard import exposed
from autograder.classroom.setup import (
    COURSE_ID,
    ensure_account,
    instructor_course,
    make_exchange,
    restrict_checkout,
)
from autograder.core.course import PipelineError

ROOT = Path(__file__).resolve().parents[1]
NAME = "tfs-sectest"
SYSTEM_PYTHON = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
                      if Path(p).is_file()), None)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="creates a system account: run as root, as CI does")


@pytest.fixture(scope="module")
def folder():
    """A classroom-like folder under /tmp (root's, 0711), removed with the account."""
    path = Path(tempfile.mkdtemp(prefix="tfs-sectest-", dir="/tmp"))
    os.chmod(path, 0o711)
    existed = _exists(NAME)
    yield path
    if not existed and _exists(NAME):
        subprocess.run(["userdel", NAME], check=False)
    shutil.rmtree(path, ignore_errors=True)


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@pytest.fixture()
def victim(folder):
    """A root-owned folder with a root-owned file: what a planted link points at."""
    d = folder / "victim"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(mode=0o755)
    (d / "secret").write_text("root's\n")
    os.chmod(d / "secret", 0o644)
    return d


def _untouched(victim: Path) -> None:
    for p in (victim, victim / "secret"):
        st = p.lstat()
        assert (st.st_uid, st.st_gid) == (0, 0), f"{p} was chowned to {st.st_uid}"
    assert (victim / "secret").read_text() == "root's\n"
    assert sorted(os.listdir(victim)) == ["secret"]
    assert victim.stat().st_mode & 0o7777 == 0o755


def _plant(link: Path, target: Path, uid: int) -> None:
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    link.symlink_to(target)
    os.lchown(link, uid, uid)


def test_ensure_account_follows_no_link(folder, victim):
    home = folder / "home" / NAME
    entry = ensure_account(NAME, home)
    settings = (home / ".jupyter/lab/user-settings/@jupyterlab/apputils-extension"
                / "notification.jupyterlab-settings")
    assert settings.is_file() and settings.stat().st_uid == entry.pw_uid
    assert home.stat().st_uid == entry.pw_uid and home.stat().st_mode & 0o777 == 0o700

    # The settings file, then a link to a root folder anywhere under ~/.jupyter, then
    # ~/.jupyter itself: root neither writes through them nor chowns their targets.
    _plant(settings, victim / "secret", entry.pw_uid)
    _plant(home / ".jupyter" / "elsewhere", victim, entry.pw_uid)
    ensure_account(NAME, home)
    _untouched(victim)
    _plant(home / ".jupyter", victim, entry.pw_uid)
    ensure_account(NAME, home)
    _untouched(victim)


def test_exchange_and_course_follow_no_link(folder, victim):
    inst = ensure_account(NAME, folder / "home" / NAME)
    exchange = make_exchange(folder, inst)
    assert (exchange / COURSE_ID / "inbound").stat().st_mode & 0o7777 == 0o2733
    _plant(exchange / COURSE_ID / "outbound", victim, inst.pw_uid)
    with pytest.raises(PipelineError, match="not a plain folder"):
        make_exchange(folder, inst)
    _untouched(victim)
    _plant(exchange / COURSE_ID, victim, inst.pw_uid)
    with pytest.raises(PipelineError, match="not a plain folder"):
        make_exchange(folder, inst)
    _untouched(victim)
    (exchange / COURSE_ID).unlink()
    make_exchange(folder, inst)

    course = folder / "home" / NAME / "course"
    instructor_course(course, ROOT, inst, exchange)
    written = sorted(p for p in course.rglob("*"))
    assert any(p.suffix == ".ipynb" for p in written)
    assert {p.lstat().st_uid for p in written} == {inst.pw_uid}
    # A link in place of the config file, then of the whole course folder.
    _plant(course / "nbgrader_config.py", victim / "secret", inst.pw_uid)
    with pytest.raises(PipelineError, match="course folder"):
        instructor_course(course, ROOT, inst, exchange)
    _untouched(victim)
    _plant(course, victim, inst.pw_uid)
    with pytest.raises(PipelineError, match="course folder"):
        instructor_course(course, ROOT, inst, exchange)
    _untouched(victim)


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                   check=True, capture_output=True)


def test_restrict_checkout_closes_the_common_git_dir(folder):
    repo, worktree = folder / "repo", folder / "wt"
    repo.mkdir()
    (repo / "solutions").mkdir()
    (repo / "solutions" / "a.txt").write_text("answer")
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("commit", "-qm", "x", cwd=repo)
    _git("worktree", "add", "-q", str(worktree), cwd=repo)
    os.chmod(repo / ".git", 0o755)
    changed = restrict_checkout(worktree)
    assert repo / ".git" in changed
    assert (repo / ".git").stat().st_mode & 0o007 == 0


def _checkout(path: Path) -> Path:
    for d in ("autograder/judge/checks", "solutions", "source", "course"):
        (path / d).mkdir(parents=True)
    (path / "autograder" / "__init__.py").write_text("")
    (path / "autograder" / "judge" / "__init__.py").write_text("")
    (path / "autograder" / "judge" / "checks" / "__init__.py").write_text("HIDDEN = 1\n")
    (path / "solutions" / "day02.ipynb").write_text("{}")
    for p in [path, *path.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return path


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="the probe runs the system's python3")
def test_a_readable_second_checkout_is_refused(folder):
    ensure_account(NAME, folder / "home" / NAME)
    parent = folder / "checkouts"
    parent.mkdir(mode=0o755)
    course, other = _checkout(parent / "course"), _checkout(parent / "other")
    restrict_checkout(course)

    def found(env=None) -> dict[str, str]:
        out = exposed(Path(SYSTEM_PYTHON), NAME, course, env)
        return {p: how for p, how in out if p.startswith(str(parent))}

    seen = found()
    assert set(seen) == {str(other / "solutions"), str(other / "source"),
                         str(other / "autograder" / "judge" / "checks")}, seen
    os.chmod(other / "solutions", 0o711)  # searchable, not listable: names can be guessed
    assert found()[str(other / "solutions")] == "can reach the files in it"
    seen = found({"PYTHONPATH": str(other)})
    assert seen[str(other / "autograder" / "judge" / "checks" / "__init__.py")] == \
        "imports autograder.judge.checks from it"
    os.chmod(other, 0o700)
    assert found({"PYTHONPATH": str(other)}) == {}


def test_servers_start_under_the_limits(folder):
    from autograder.classroom.spawner import GiB, LimitedSpawner

    ensure_account(NAME, folder / "home" / NAME)
    spawner = LimitedSpawner()
    script = ("import os, resource as r; print(os.getuid(), *(r.getrlimit(x)[1] for x in "
              "(r.RLIMIT_AS, r.RLIMIT_NPROC, r.RLIMIT_FSIZE, r.RLIMIT_CORE)))")
    out = subprocess.run([SYSTEM_PYTHON or "python3", "-c", script], capture_output=True,
                         text=True, check=True, preexec_fn=spawner.make_preexec_fn(NAME))
    uid, *limits = map(int, out.stdout.split())
    assert uid == pwd.getpwnam(NAME).pw_uid
    assert limits == [6 * GiB, 512, GiB, 0]
    assert resource.getrlimit(resource.RLIMIT_AS)[1] == resource.RLIM_INFINITY  # hub's own


@pytest.mark.skipif(shutil.which("configurable-http-proxy") is None,
                    reason="hub_config names configurable-http-proxy")
def test_hub_config_subdomain_host_and_limits(folder):
    from autograder.classroom import hub_config

    (folder / "hub").mkdir(exist_ok=True)
    plain = hub_config(folder, "127.0.0.1", 8000, ["student1"], Path("/usr/bin/python3"), {})
    text = plain.read_text()
    assert "LimitedSpawner" in text and "subdomain_host" not in text
    text = hub_config(folder, "127.0.0.1", 8000, ["student1"], Path("/usr/bin/python3"), {},
                      "https://hub.example.org", 0).read_text()
    assert "c.JupyterHub.subdomain_host = 'https://hub.example.org'" in text
    assert "c.LimitedSpawner.address_space = 0" in text


# Blanks its own command line (zeros over argv through /proc/self/mem), ignores SIGTERM.
_BLANK = r"""
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
start, end = int(fields[45]), int(fields[46])
with open("/proc/self/mem", "r+b", buffering=0) as mem:
    mem.seek(start)
    mem.write(bytes(end - start))
print("blank", flush=True)
time.sleep(600)
"""
# Keeps forking: each child goes on while its parent exits, so its pid never stays put.
_FORKING = r"""
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("forking", flush=True)
while True:
    time.sleep(0.01)
    if os.fork():
        os._exit(0)
"""


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="runs the system's python3 as the account")
def test_sweep_ends_a_blanked_and_a_forking_process(folder):
    from autograder.classroom import cmdline, leftovers, sweep

    entry = ensure_account(NAME, folder / "home" / NAME)
    (folder / "accounts.json").write_text(json.dumps({NAME: "unused"}))
    procs = [subprocess.Popen([SYSTEM_PYTHON, "-c", script], user=entry.pw_uid,
                              group=entry.pw_gid, extra_groups=[], cwd="/",
                              stdout=subprocess.PIPE, text=True)
             for script in (_BLANK, _FORKING)]
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["blank", "forking"]
        assert cmdline(procs[0].pid) == "" and procs[0].poll() is None
        found = [pid for pid, _ in leftovers(folder)]
        assert procs[0].pid in found and len(found) >= 2, found
        t0 = time.monotonic()
        sweep(folder, grace=1)
        assert leftovers(folder) == []
        assert time.monotonic() - t0 < 20
        time.sleep(0.5)  # a fork that escaped would show by now
        assert leftovers(folder) == []
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        (folder / "accounts.json").unlink()


# Kills every other process of its account, over and over (what killed the sweep's old
# child that took the account's uid), and ignores SIGTERM.
_KILLER = r"""
import os, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("killer", flush=True)
while True:
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass
"""


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="runs the system's python3 as the account")
@pytest.mark.parametrize("script", [_KILLER, _FORKING], ids=["kill-all", "forking"])
def test_sweep_ends_what_would_kill_or_outrun_it(folder, script):
    from autograder.classroom import leftovers, sweep

    entry = ensure_account(NAME, folder / "home" / NAME)
    (folder / "accounts.json").write_text(json.dumps({NAME: "unused"}))
    proc = subprocess.Popen([SYSTEM_PYTHON, "-c", script], user=entry.pw_uid,
                            group=entry.pw_gid, extra_groups=[], cwd="/",
                            stdout=subprocess.PIPE, text=True)
    def seen() -> bool:
        """A process that forks and exits every 10 ms can slip through one scan of /proc:
        scan for half a second."""
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            if leftovers(folder):
                return True
            time.sleep(0.01)
        return False

    try:
        assert proc.stdout.readline().strip() in ("killer", "forking")
        assert seen()
        t0 = time.monotonic()
        sweep(folder, grace=1, timeout=15)
        assert time.monotonic() - t0 < 20
        assert not seen()
    finally:
        from autograder.classroom.procs import _kill_all_as

        _kill_all_as(entry.pw_uid, 10)   # whatever the outcome, nothing of it is left
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        (folder / "accounts.json").unlink()


def test_accounts_get_no_subordinate_uids(folder):
    from autograder.classroom.setup import subid_ranges

    entry = ensure_account(NAME, folder / "home" / NAME)
    if shutil.which("usermod"):
        subprocess.run(["usermod", "--add-subuids", "900000-900009", "--add-subgids",
                        "900000-900009", NAME], check=True)
        assert subid_ranges(entry) == [(900000, 10)]
    entry = ensure_account(NAME, folder / "home" / NAME)
    assert subid_ranges(entry) == [] and subid_ranges(entry, "gid") == []


def test_restore_checkout_changes_only_what_it_closed(folder, victim):
    from autograder.classroom.setup import restore_checkout

    root = folder / "modes"
    (root / "secret").mkdir(parents=True)
    (root / "notes.txt").write_text("x")
    for p in (root, root / "secret", root / "notes.txt"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    record = folder / "modes.json"
    closed = restrict_checkout(root, record)
    assert set(closed) == {root, root / "secret", root / "notes.txt"}
    assert (root / "secret").stat().st_mode & 0o777 == 0o750
    # Another inode in one entry's place, a link to a root folder in another's.
    (root / "notes.txt").unlink()
    (root / "notes.txt").write_text("new")
    os.chmod(root / "notes.txt", 0o600)
    os.rmdir(root / "secret")
    (root / "secret").symlink_to(victim)
    os.chmod(victim, 0o750)
    restore_checkout(record)
    assert root.stat().st_mode & 0o777 == 0o755 and not record.exists()
    assert (root / "notes.txt").stat().st_mode & 0o777 == 0o600
    assert victim.stat().st_mode & 0o777 == 0o750


def _as_student(entry, *cmd: str) -> None:
    subprocess.run(list(cmd), user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                   cwd="/", check=True)


def test_a_checkout_a_student_made_is_ignored(folder):
    from autograder.classroom.guard import checkouts, secret_folders

    entry = ensure_account(NAME, folder / "home" / NAME)
    sticky = folder / "sticky"
    sticky.mkdir(mode=0o755)
    os.chmod(sticky, 0o1777)
    course = _checkout(sticky / "course")  # the course root may lie in one itself
    own = folder / "own"  # a student's own folder next to the course's parent
    own.mkdir()
    os.chown(own, entry.pw_uid, entry.pw_gid)
    made = [sticky / "planted", own]
    tmp_planted = Path("/tmp/autograder")
    if not tmp_planted.exists():  # the reported case: mkdir -p /tmp/autograder/judge/checks
        made.append(Path("/tmp"))
    try:
        for d in made:
            _as_student(entry, "mkdir", "-p", str(d / "autograder" / "judge" / "checks"),
                        str(d / "solutions"))
        root_made = _checkout(sticky / "root-made")  # anyone's name in a sticky folder
        assert checkouts(course) == [course]
        assert not [p for p in secret_folders(course)
                    if any(str(p).startswith(str(d)) for d in (own, root_made, *made[:1]))
                    or str(p).startswith(str(tmp_planted))]
        os.chmod(sticky, 0o755)  # an ordinary root folder: the root-made checkout counts
        assert root_made in checkouts(course)
    finally:
        if Path("/tmp") in made:
            shutil.rmtree(tmp_planted, ignore_errors=True)
