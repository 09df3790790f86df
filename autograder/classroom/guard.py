"""Before the hub starts: can a student account read the hidden checks or the answers?

``classroom start`` closes its own checkout (:func:`autograder.classroom.setup.restrict_checkout`),
but the same files may be readable elsewhere: another checkout or worktree of the repository
next to it, the repository's git folder, or a copy of ``autograder`` the users' Python imports.
:func:`exposed` asks a student account itself (a probe run as that account, with the users'
Python) rather than reasoning about modes, and :func:`refuse_if_exposed` stops the start with
the paths and the command that closes them.

What is probed: every checkout of the course found among the course root, its git worktrees,
its parent folders and their children (a folder holding ``autograder/judge/checks``), and in
each its ``solutions/``, ``source/``, ``autograder/judge/checks/`` and git folders; plus
``import autograder.judge.checks``. A copy somewhere else on the machine is not searched for.
Only a folder no student can have made counts as a checkout: owned (with its
``autograder/judge/checks``)
by root or the course checkout's owner, not a link, and neither being nor lying directly in a
sticky world-writable folder like ``/tmp`` (the course root itself aside); so a student's
``mkdir -p /tmp/autograder/judge/checks`` cannot block ``classroom start``, and git is never run
as root with ``safe.directory`` in a folder a student controls.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from pathlib import Path

from autograder.classroom.setup import MARK, git_dirs
from autograder.core.course import PipelineError

SECRET_FOLDERS = ("solutions", "source", "autograder/judge/checks")

# Run as the student account: argv[1] is JSON [[folder, a name inside it or ""], ...].
# A folder counts as open when the account can list it or reach the name inside it (with
# search permission alone, a known file name can be opened).
_PROBE = r"""
import json, os, sys
found = []
for folder, inside in json.loads(sys.argv[1]):
    try:
        os.listdir(folder)
        found.append([folder, "can list it"])
        continue
    except OSError:
        pass
    if inside:
        try:
            os.stat(os.path.join(folder, inside))
            found.append([folder, "can reach the files in it"])
        except OSError:
            pass
try:
    import autograder.judge.checks as m
    where = getattr(m, "__file__", None) or list(getattr(m, "__path__", []))
    found.append([str(where), "imports autograder.judge.checks from it"])
except BaseException:
    pass
print(json.dumps(found))
"""


def checkouts(root: Path) -> list[Path]:
    """The course root, its git worktrees, and any checkout of the course (a folder holding
    ``autograder/judge/checks``) among its parent folders and their children that no student can
    have made (:func:`_trusted`)."""
    root = root.resolve()
    found = [root]
    try:
        out = subprocess.run(["git", "-c", f"safe.directory={root}", "-C", str(root),
                              "worktree", "list", "--porcelain"],
                             capture_output=True, text=True, timeout=30)
        found += [Path(line.split(" ", 1)[1]) for line in out.stdout.splitlines()
                  if line.startswith("worktree ")]
    except (OSError, subprocess.TimeoutExpired):
        pass
    owners = _owners(root)
    for parent in root.parents:
        for d in [parent, *_children(parent)]:
            if d != root and _trusted(d, owners, ("autograder", "autograder/judge/checks")):
                found.append(d)
    return list(dict.fromkeys(p for p in found if p.is_dir()))


def _owners(root: Path) -> set[int]:
    """root and the checkout's owner, unless that is a classroom account."""
    uid = root.stat().st_uid
    try:
        if MARK in pwd.getpwuid(uid).pw_gecos:
            return {0}
    except KeyError:
        pass
    return {0, uid}


def _sticky_open(path: Path) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return bool(mode & stat.S_ISVTX and mode & stat.S_IWOTH)


def _trusted(folder: Path, owners: set[int], inside: tuple[str, ...] = ()) -> bool:
    """Whether no student can have made ``folder`` (and ``folder/<each of inside>``): each is
    a real folder, not a link, owned by ``owners`` (root, the checkout's owner), and
    ``folder`` neither is nor lies in a sticky world-writable folder such as ``/tmp``."""
    if _sticky_open(folder) or (folder.parent != folder and _sticky_open(folder.parent)):
        return False
    for p in [folder, *(folder / x for x in inside)]:
        try:
            st = os.lstat(p)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in owners:
            return False
    return True


def _children(folder: Path) -> list[Path]:
    if str(folder) in ("/proc", "/sys", "/dev"):
        return []
    try:
        return [d for d in folder.iterdir() if d.is_dir() and not d.is_symlink()]
    except OSError:
        return []


def secret_folders(root: Path) -> list[Path]:
    """Every folder no student may read: the secret folders and git folders of each
    checkout of :func:`checkouts`."""
    out = []
    owners = _owners(root.resolve())
    for checkout in checkouts(root):
        out += [checkout / s for s in SECRET_FOLDERS if (checkout / s).is_dir()]
        trusted = checkout == root.resolve() or _trusted(checkout, owners)
        out += [d for d in git_dirs(checkout, trusted) if d.is_dir()]
    return list(dict.fromkeys(out))


def _first_entry(folder: Path) -> str:
    try:
        return next((e.name for e in os.scandir(folder)), "")
    except OSError:
        return ""


def exposed(python: Path, name: str, root: Path,
            env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(path, what the account ``name`` can do with it) for each secret folder it can
    read, and for a copy of ``autograder.judge.checks`` its Python (``python``) imports.

    Raises:
        PipelineError: the probe itself could not run as the account.
    """
    entry = pwd.getpwnam(name)
    folders = [[str(d), _first_entry(d)] for d in secret_folders(root)]
    full_env = {"HOME": entry.pw_dir, "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin",
                **(env or {})}
    full_env.pop("JUPYTER_CONFIG_PATH_EXTRA", None)
    proc = subprocess.run([str(python), "-c", _PROBE, json.dumps(folders)],
                          user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd="/",
                          capture_output=True, text=True, env=full_env, timeout=120)
    if proc.returncode != 0:
        raise PipelineError(f"could not check what the account {name} can read:\n"
                            f"{proc.stderr.strip()[-800:]}")
    return [(str(path), how) for path, how in json.loads(proc.stdout.strip().splitlines()[-1])]


def refuse_if_exposed(python: Path, name: str, root: Path,
                      env: dict[str, str] | None = None) -> None:
    """Raise when a student account can read the hidden checks or the answers.

    Raises:
        PipelineError: naming each path and the command that closes it.
    """
    found = exposed(python, name, root, env)
    if not found:
        return
    lines = [f"  {path}: {name} {how}" for path, how in found]
    fixes = sorted({f"chmod o-rwx {path}" for path, how in found if "imports" not in how})
    if any("imports" in how for _, how in found):
        fixes.append("uninstall that copy from the course's Python, or close its folder to "
                     "other accounts (chmod o-rwx)")
    raise PipelineError(
        "the classroom was not started: a student account can read the hidden checks or the "
        "answers:\n" + "\n".join(lines) + "\nClose them, then start again:\n  "
        + "\n  ".join(fixes))
