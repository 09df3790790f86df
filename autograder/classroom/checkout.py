"""Closing the checkout to the classroom's accounts while the hub runs, and opening it again.

:func:`restrict_checkout` records each changed entry's mode before and after and its
``(st_dev, st_ino)``; :func:`restore_checkout` gives the modes back only to the same inodes.
Both reach every entry through a descriptor opened without following a link
(``O_NOFOLLOW``; ``O_NONBLOCK`` so a FIFO cannot block) and change it with ``fchmod``: a link
or another inode put in an entry's place is never changed through its path. The checkout's
root is restored last, so it opens only once everything inside is as it was.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

# In the classroom's folder: the checkout's modes from before `classroom start` closed it.
CHECKOUT_MODES = "checkout-modes.json"
# What a student's server needs from the checkout; everything else there is closed to them.
STUDENT_VISIBLE = {".venv", "course"}


def git_dirs(checkout: Path, trusted: bool = True) -> list[Path]:
    """The checkout's git folder and the repository's common one (another checkout's
    ``.git`` when this one is a worktree: it holds every branch, hidden checks included).
    Git is told the checkout is safe only when ``trusted`` (no student can have made it)."""
    safe = ["-c", f"safe.directory={checkout.resolve()}"] if trusted else []
    try:
        out = subprocess.run(["git", *safe, "-C", str(checkout), "rev-parse",
                              "--path-format=absolute", "--git-dir", "--git-common-dir"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return list(dict.fromkeys(Path(line) for line in out.stdout.splitlines() if line.strip()))


def _open_entry(path: str | Path) -> int | None:
    """``path`` opened read-only without following a link, or None: a link, anything but a
    folder or a plain file, or gone."""
    try:
        st = os.lstat(path)
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    fst = os.fstat(fd)
    if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):  # replaced in between
        os.close(fd)
        return None
    return fd


def restrict_checkout(root: Path, record: Path | None = None) -> list[Path]:
    """Close the checkout to other accounts except ``.venv`` and ``course/``, and its git
    folders wherever they are; returns what changed. The checkout itself stays traversable
    (``o+x``) but not listable. ``record`` (root only, ``0600``) gets each changed entry's
    mode before and after and its device and inode, written before anything changes, for
    :func:`restore_checkout`; the root comes first in it."""
    plan: dict[str, list[int]] = {}
    fds: dict[str, int] = {}
    try:
        for p in [root, *sorted(root.iterdir()), *git_dirs(root)]:
            if p != root and p.name in STUDENT_VISIBLE or str(p) in fds:
                continue
            if (fd := _open_entry(p)) is None:
                continue
            st = os.fstat(fd)
            mode = st.st_mode & 0o7777
            want = (mode & ~0o006) | 0o001 if p == root else mode & ~0o007
            if want == mode:
                os.close(fd)
                continue
            fds[str(p)] = fd
            plan[str(p)] = [mode, want, st.st_dev, st.st_ino]
        if record is not None and plan:
            try:  # a record not yet restored keeps its modes from before
                old = json.loads(record.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                old = {}
            modes = {k: [old[k][0], *v[1:]] if k in old and len(old[k]) >= 2 else v
                     for k, v in plan.items()}
            fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(modes, fh, indent=1)
        for path, (_, want, *_rest) in plan.items():
            os.fchmod(fds[path], want)
    finally:
        for fd in fds.values():
            os.close(fd)
    return [Path(p) for p in plan]


def restore_checkout(record: Path) -> list[Path]:
    """Give back the modes :func:`restrict_checkout` recorded in ``record`` to each entry
    that is still the inode it recorded and still has the mode it left; the checkout's root
    last. Then remove the record; returns what changed. An entry whose inode changed (or
    that is now a link) is skipped and reported."""
    try:
        modes = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    changed, skipped = [], []
    for path, entry in reversed(list(modes.items())):  # the root was recorded first
        before, after, *ident = entry
        fd = _open_entry(path)
        if fd is None:
            if os.path.lexists(path):
                skipped.append(path)
            continue
        try:
            st = os.fstat(fd)
            if ident and [st.st_dev, st.st_ino] != ident[:2]:
                skipped.append(path)
            elif st.st_mode & 0o7777 == after:
                os.fchmod(fd, before)
                changed.append(Path(path))
        finally:
            os.close(fd)
    if skipped:
        print("not restored (no longer the entry that was closed): " + ", ".join(skipped),
              file=sys.stderr)
    record.unlink()
    return changed
