"""The classroom's collect, first step: every inbound submission is hostile.

:func:`vet_inbound` moves each submission of a day out of the students' reach, checks it,
and files root's checked copy where ``nbgrader collect`` reads (:func:`vetted_root`), after
recording when it arrived (:func:`record_times`); root keeps a second copy of its own. See
:mod:`autograder.classroom.loop` for the instructor's loop.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from pathlib import Path

from autograder.classroom.setup import COURSE_ID, INSTRUCTOR, MARK


def _owner(uid: int) -> str | None:
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return None
    return entry.pw_name if MARK in entry.pw_gecos else None


def _uid(name: str) -> int | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry.pw_uid if MARK in entry.pw_gecos else None


# nbgrader's own ceiling for a submission (``CourseDirectory.max_dir_size``, 100,000 kB):
# a larger one would make ``nbgrader collect`` stop for the whole class.
MAX_SUBMISSION_BYTES = 1000 * 100_000


def vetted_root(folder: Path) -> Path:
    """The exchange ``nbgrader collect`` reads: vetted submissions only, root's and read-only,
    readable by the instructor's group and by no student (its top folder is writable by that
    group: nbgrader requires an exchange it can write to)."""
    return folder / "vetted"


# Caps on one submission's tree beyond its bytes: deeper or larger trees are refused
# (nbgrader's own walk would otherwise stop the whole collect).
MAX_DEPTH = 16
MAX_ENTRIES = 1000
SPARSE_FROM = 1 << 20     # a file above this size must have at least half its bytes on disk
# A student writing into a file while collect reads it makes collect read it again, this many
# times in all, then refuse it.
MAX_READS = 3
# Entries checked per account and collect: 300 junk entries once took 42 s to check.
MAX_PER_STUDENT = 20


class _Changed(Exception):
    """A file or folder of the submission changed while it was being copied."""


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_ino, a.st_size, a.st_mtime_ns, a.st_ctime_ns) == \
        (b.st_ino, b.st_size, b.st_mtime_ns, b.st_ctime_ns)


def _copy_checked(src: int, dst: int, owner: int, ctimes: list[float] | None = None,
                  private: bool = False) -> str | None:
    """Copy the student's folder open at ``src`` into the empty root-only folder open at
    ``dst``; returns why it is refused, or None.

    Nothing of the student's is kept: every file is read through a descriptor opened
    without following links, at most :data:`MAX_SUBMISSION_BYTES` in all, and written as a
    new file of root's, so a descriptor the student still holds on an original reaches
    nothing that is collected. Iterative (no recursion limit), at most :data:`MAX_DEPTH`
    folders deep and :data:`MAX_ENTRIES` entries. Only plain files and folders of ``owner``
    with one link each are accepted. Closes neither descriptor. ``ctimes`` gets the status
    change time of every folder and file in it (a time no student can set back). Each file
    and folder is ``fstat``-ed again once read: a student who writes through a descriptor
    opened earlier (or adds, renames or removes a name in a folder) while it is read changes
    its size, mtime or ctime, and :class:`_Changed` is raised, so the times recorded are
    those of the content copied (to the file system's clock tick). ``private``: files
    ``0600`` and folders ``0700`` (root's own record) instead of ``0644``/``0755``.
    """
    fmode, dmode = (0o600, 0o700) if private else (0o644, 0o755)
    left, entries = MAX_SUBMISSION_BYTES, 0
    todo = [(os.dup(src), os.dup(dst), 0)]
    try:
        while todo:
            s, d, depth = todo.pop()
            try:
                before = os.fstat(s)
                if before.st_uid != owner:  # (its ctime is read by the caller: moved)
                    return "a folder of another account"
                if ctimes is not None and depth:
                    ctimes.append(before.st_ctime)
                for entry in sorted(os.listdir(s)):
                    entries += 1
                    if entries > MAX_ENTRIES:
                        return f"more than {MAX_ENTRIES} files and folders"
                    try:
                        child = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
                                        dir_fd=s)
                    except OSError:
                        return f"{entry}: a link or special file"
                    st = os.fstat(child)
                    if stat.S_ISDIR(st.st_mode):
                        if depth >= MAX_DEPTH:
                            os.close(child)
                            return f"folders nested more than {MAX_DEPTH} deep"
                        os.mkdir(entry, 0o700, dir_fd=d)
                        sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                      dir_fd=d)
                        os.fchmod(sub, dmode)   # whatever root's umask is
                        todo.append((child, sub, depth + 1))
                        continue
                    try:
                        if not stat.S_ISREG(st.st_mode):
                            return f"{entry}: a link or special file"
                        if st.st_uid != owner or st.st_nlink != 1:
                            return f"{entry}: a file of another account, or a hard link"
                        if st.st_size > SPARSE_FROM and st.st_blocks * 512 < st.st_size // 2:
                            # costs the student nothing, root a real copy of every byte
                            return f"{entry}: a sparse file"
                        out = os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                                      os.O_NOFOLLOW, 0o600, dir_fd=d)
                        os.fchmod(out, fmode)   # whatever root's umask is
                        try:
                            while chunk := os.read(child, min(1 << 20, left + 1)):
                                left -= len(chunk)
                                if left < 0:
                                    return (f"larger than nbgrader's "
                                            f"{MAX_SUBMISSION_BYTES // 10**6} MB")
                                os.write(out, chunk)
                        finally:
                            os.close(out)
                        if not _same(st, os.fstat(child)):
                            raise _Changed(entry)
                        if ctimes is not None:
                            ctimes.append(st.st_ctime)
                    finally:
                        os.close(child)
                if not _same(before, os.fstat(s)):
                    raise _Changed(".")
            finally:
                os.close(s)
                os.close(d)
    finally:
        for s, d, _ in todo:
            os.close(s)
            os.close(d)
    return None


def _vet(staging: int, key: str, name: str, copy: str, day: str,
         ctimes: list[float] | None = None) -> str | None:
    """Why the staged submission ``name`` (nbgrader's ``<student>+<day>+<timestamp>+<random>``
    folder, in the root-only folder open at ``staging``) is refused, or None once its checked
    copy is in ``copy`` there. Names are parsed as ``nbgrader collect`` parses them
    (``rsplit('+', 3)``), so no name is skipped here and collected there."""
    from nbgrader.utils import parse_utc

    parts = name.rsplit("+", 3)
    if len(parts) != 4 or parts[1] != day:
        return f"{name}: not a submission name nbgrader's submit writes"
    uid = _uid(parts[0])
    if uid is None:
        return f"{name}: names no student of this classroom"
    try:
        parse_utc(parts[2])
    except Exception:  # noqa: BLE001 - any unparsable timestamp stops nbgrader's collect
        return f"{name}: its timestamp cannot be read"
    try:
        fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=staging)
    except OSError:
        return f"{name}: not a folder"
    try:
        owner = os.fstat(fd).st_uid
        if owner != uid:
            return (f"{name}: submitted in the name of {parts[0]!r} by "
                    f"{_owner(owner) or owner}")
        ctimes = ctimes if ctimes is not None else []
        for _ in range(MAX_READS):  # a student writing meanwhile: read again, bounded
            del ctimes[1:]          # (the first: the entry's own, read before it moved)
            _tree(staging, copy, 0o755, remove=True)
            out = _tree(staging, copy, 0o755)
            try:
                why = _copy_checked(fd, out, uid, ctimes)
                break
            except _Changed as exc:
                what = "its folder" if str(exc) == "." else str(exc)
                why = (f"{what} kept changing while it was collected ({MAX_READS} reads): "
                       "submit again")
            finally:
                os.close(out)
        return None if why is None else f"{name}: {why}"
    finally:
        os.close(fd)


def _tree(parent: int, name: str, mode: int, remove: bool = False) -> int | None:
    """Make the root-only folder ``name`` in ``parent`` (``mode``) and return it open, or
    (``remove``) remove it and what is in it, never following a link."""
    if remove:
        try:
            shutil.rmtree(name, dir_fd=parent)
        except FileNotFoundError:
            pass
        return None
    os.mkdir(name, 0o700, dir_fd=parent)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    os.fchmod(fd, mode)
    return fd


def _file_one(name: str, day: str, inbound: int, staging: int, vetted_in: int,
              quarantine: int, received: int, folder: Path) -> str | None:
    """Stage, check and file one inbound entry (folders given as open descriptors); returns
    why it was refused, or None. Staged and kept entries get names of a fixed length
    (any name a student can create fits), and ``<that name>.name`` records the original.

    For an accepted one, root's record of when it reached the exchange (:func:`record_times`
    in ``folder``) is written before the checked copy moves to ``vetted/``: the latest
    status change time of the entry (read before it is moved: creating or renaming it into
    ``inbound`` sets it) and of everything in it, as read (:func:`_copy_checked`). Unlike
    ``timestamp.txt`` and the name, which the student writes, no student can set a status
    change time back. ``received/`` then gets a second copy of root's (``0600``/``0700``),
    and the student's original is removed: a descriptor they still hold writes to a file
    that is in nothing root keeps. A refused entry's original goes to ``quarantine/``."""
    import uuid

    key = uuid.uuid4().hex
    try:
        arrived = [os.stat(name, dir_fd=inbound, follow_symlinks=False).st_ctime]
        os.rename(name, key, src_dir_fd=inbound, dst_dir_fd=staging)
    except FileNotFoundError:
        return None  # gone meanwhile
    copy, kept = f"{key}.checked", f"{key}.kept"
    try:
        why = _vet(staging, key, name, copy, day, arrived)
        if why is None:
            src = os.open(copy, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=staging)
            out = _tree(staging, kept, 0o700)
            try:  # root's own copy of root's checked copy: nothing of the student's in it
                why = _copy_checked(src, out, 0, private=True)
            finally:
                os.close(src)
                os.close(out)
    except Exception as exc:  # noqa: BLE001 - this submission is refused, the others go on
        why = f"{name}: could not be checked ({type(exc).__name__})"
    if why is None:
        try:
            os.stat(name, dir_fd=vetted_in, follow_symlinks=False)
            why = f"{name}: collected before under the same name"
        except FileNotFoundError:
            # the record first: no vetted entry without one
            record_times(folder, {(name.rsplit("+", 3)[0], day): max(arrived)})
            os.rename(copy, name, src_dir_fd=staging, dst_dir_fd=vetted_in)
    if why is None:
        os.rename(kept, key, src_dir_fd=staging, dst_dir_fd=received)
        keep = received
        try:  # the student's inode leaves root's folders (an unlinked file holds no name)
            shutil.rmtree(key, dir_fd=staging)
        except OSError:
            pass  # folders still being written to: left in root-only staging/
    else:
        # The refused original is kept, root-only, for the instructor.
        keep = quarantine
        os.rename(key, key, src_dir_fd=staging, dst_dir_fd=keep)
    _note(keep, key, name, why or "accepted")
    for leftover in (copy, kept):  # a refused copy: root's, capped depth
        _tree(staging, leftover, 0, remove=True)
    return why


def _note(keep: int, key: str, name: str, why: str) -> None:
    """``<key>.name`` in the folder open at ``keep``: the entry's original name and fate."""
    fd = os.open(f"{key}.name", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                 dir_fd=keep)
    try:
        os.write(fd, (name + "\n" + why + "\n").encode(errors="replace"))
    finally:
        os.close(fd)


def received_times(folder: Path) -> Path:
    """Root's record of when each accepted submission reached the exchange:
    ``received-times.json`` (``0600``), ``{student: {day: ISO time, UTC}}``, the latest per
    student and day (what ``classroom grade`` passes to ``grade --submission-times``)."""
    return folder / "received-times.json"


def record_times(folder: Path, times: dict[tuple[str, str], float]) -> None:
    """Merge ``times`` (epoch seconds) into :func:`received_times`, keeping the later;
    atomic (a new file, ``fsync``-ed, renamed over the old one, its folder ``fsync``-ed),
    root-only (``0600``). With no times it only makes sure the file exists.

    Raises:
        OSError, ValueError: the record cannot be read or written (nothing is then vetted).
    """
    import datetime as dt
    import json
    import uuid

    path = received_times(folder)
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if not times and path.is_file():
        return
    for (student, day), t in sorted(times.items()):
        iso = dt.datetime.fromtimestamp(t, dt.UTC).isoformat()
        old = data.setdefault(student, {}).get(day)
        if old is None or dt.datetime.fromisoformat(old) < dt.datetime.fromisoformat(iso):
            data[student][day] = iso
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps(data, indent=1, sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _over_limit(inbound: int, names: list[str]) -> tuple[list[str], dict[int, list[str]]]:
    """``names`` split into those to check and, per owner, those past
    :data:`MAX_PER_STUDENT`: an owner's latest arrivals (status change time) are checked.
    Counted by the owner of the entry, which no student can forge (a name can be anyone's)."""
    by_owner: dict[int, list[tuple[float, str]]] = {}
    for name in names:
        try:
            st = os.stat(name, dir_fd=inbound, follow_symlinks=False)
        except FileNotFoundError:
            continue
        by_owner.setdefault(st.st_uid, []).append((st.st_ctime, name))
    check, extra = [], {}
    for uid, entries in by_owner.items():
        entries.sort()
        cut = max(0, len(entries) - MAX_PER_STUDENT)
        check += [n for _, n in entries[cut:]]
        if cut:
            extra[uid] = [n for _, n in entries[:cut]]
    return sorted(check), extra


def vet_inbound(folder: Path, day: str) -> list[str]:
    """Move every inbound submission of ``day`` out of the students' reach, check it, and
    file it under :func:`vetted_root` or ``quarantine/``; returns one line per refused one.

    Each entry whose name matches nbgrader's pattern (``*+DAY+*``) is first renamed into a
    root-only staging folder: from then on no student can rename or replace it, and every
    check below is about what was moved. It is accepted only when its name parses as
    nbgrader's, names a student of this classroom who owns it, and it holds nothing but that
    student's plain files and folders (no link that would make ``collect`` copy someone
    else's file, no FIFO, at most nbgrader's size, :data:`MAX_DEPTH` and
    :data:`MAX_ENTRIES`). What is collected is root's checked copy (:func:`_copy_checked`),
    never the student's files, which a descriptor they still hold could change; root keeps
    its own second copy in ``received/`` (accepted) and the original in ``quarantine/``
    (refused). Of one account's entries, at most :data:`MAX_PER_STUDENT` (its latest) are
    checked per collect; the others go to ``quarantine/`` unchecked, one line per account.
    ``received-times.json`` exists once this returns or has filed anything
    (:func:`record_times`).
    """
    import fnmatch
    import uuid

    from autograder.classroom.setup import _own_dir

    inst = pwd.getpwnam(INSTRUCTOR)
    run = uuid.uuid4().hex
    fds = []

    def own(parent_fd: int, name: str, gid: int, mode: int, shown: Path) -> int:
        fds.append(_own_dir(parent_fd, name, 0, gid, mode, shown))
        return fds[-1]

    try:
        fds.append(top := os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW))
        staging = own(own(top, "staging", 0, 0o700, folder / "staging"), run, 0, 0o700,
                      folder / "staging" / run)
        quarantine = own(top, "quarantine", 0, 0o700, folder / "quarantine")
        received = own(top, "received", 0, 0o700, folder / "received")
        vetted = vetted_root(folder)
        v = own(top, vetted.name, inst.pw_gid, 0o770, vetted)
        v = own(v, COURSE_ID, inst.pw_gid, 0o750, vetted / COURSE_ID)
        vetted_in = own(v, "inbound", inst.pw_gid, 0o750, vetted / COURSE_ID / "inbound")
        inbound = os.open(folder / "exchange" / COURSE_ID / "inbound",
                          os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        fds.append(inbound)
        record_times(folder, {})  # grading then knows collect ran: no record, no trusted time
        problems = []
        names = [n for n in sorted(os.listdir(inbound)) if fnmatch.fnmatchcase(n, f"*+{day}+*")]
        names, extra = _over_limit(inbound, names)
        for uid, skipped in sorted(extra.items()):
            for name in skipped:
                key = uuid.uuid4().hex
                try:
                    os.rename(name, key, src_dir_fd=inbound, dst_dir_fd=quarantine)
                except FileNotFoundError:
                    continue
                _note(quarantine, key, name, "not checked: over the limit per student")
            problems.append(f"{_owner(uid) or uid}: {len(skipped)} more submissions than the "
                            f"{MAX_PER_STUDENT} checked per collect; the earliest were "
                            "quarantined unchecked")
        for name in names:
            try:
                why = _file_one(name, day, inbound, staging, vetted_in, quarantine, received,
                                folder)
            except Exception as exc:  # noqa: BLE001 - one submission never stops the class
                why = f"{name[:120]}: could not be filed ({type(exc).__name__}: {exc})"
            if why is not None:
                problems.append(why)
        try:
            os.rmdir(run, dir_fd=fds[1])
        except OSError:
            pass  # something could not be filed: it stays in root-only staging/
        return problems
    finally:
        for fd in fds:
            os.close(fd)
