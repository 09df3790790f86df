"""The classroom's collect, first step: every inbound submission is hostile.

:func:`vet_inbound` moves each submission of a day out of the students' reach, checks it,
and files root's checked copy where ``nbgrader collect`` reads (:func:`vetted_root`); the
originals are kept root-only. See :mod:`autograder.classroom.loop` for the instructor's loop.
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


def _copy_checked(src: int, dst: int, owner: int, ctimes: list[float] | None = None
                  ) -> str | None:
    """Copy the student's folder open at ``src`` into the empty root-only folder open at
    ``dst``; returns why it is refused, or None.

    Nothing of the student's is kept: every file is read once through a descriptor opened
    without following links, at most :data:`MAX_SUBMISSION_BYTES` in all, and written as a
    new file of root's, so a descriptor the student still holds on an original reaches
    nothing that is collected. Iterative (no recursion limit), at most :data:`MAX_DEPTH`
    folders deep and :data:`MAX_ENTRIES` entries. Only plain files and folders of ``owner``
    with one link each are accepted. Closes neither descriptor. ``ctimes`` gets the status
    change time of every folder and file in it (a time no student can set back), read before
    anything of theirs is touched.
    """
    left, entries = MAX_SUBMISSION_BYTES, 0
    todo = [(os.dup(src), os.dup(dst), 0)]
    try:
        while todo:
            s, d, depth = todo.pop()
            try:
                if os.fstat(s).st_uid != owner:  # (its ctime is read by the caller: moved)
                    return "a folder of another account"
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
                    if ctimes is not None:
                        ctimes.append(st.st_ctime)
                    if stat.S_ISDIR(st.st_mode):
                        if depth >= MAX_DEPTH:
                            os.close(child)
                            return f"folders nested more than {MAX_DEPTH} deep"
                        os.mkdir(entry, 0o700, dir_fd=d)
                        sub = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                      dir_fd=d)
                        os.fchmod(sub, 0o755)   # whatever root's umask is
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
                        os.fchmod(out, 0o644)   # whatever root's umask is
                        try:
                            while chunk := os.read(child, min(1 << 20, left + 1)):
                                left -= len(chunk)
                                if left < 0:
                                    return (f"larger than nbgrader's "
                                            f"{MAX_SUBMISSION_BYTES // 10**6} MB")
                                os.write(out, chunk)
                        finally:
                            os.close(out)
                    finally:
                        os.close(child)
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
        os.mkdir(copy, 0o700, dir_fd=staging)
        out = os.open(copy, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=staging)
        os.fchmod(out, 0o755)
        try:
            why = _copy_checked(fd, out, uid, ctimes)
        finally:
            os.close(out)
        return None if why is None else f"{name}: {why}"
    finally:
        os.close(fd)


def _file_one(name: str, day: str, inbound: int, staging: int, vetted_in: int,
              quarantine: int, received: int, times: dict | None = None) -> str | None:
    """Stage, check and file one inbound entry (folders given as open descriptors); returns
    why it was refused, or None. Staged and kept originals get names of a fixed length
    (any name a student can create fits), and ``<that name>.name`` records the original.
    ``times[(student, day)]`` gets, for an accepted one, when it reached the exchange: the
    latest status change time of the entry (read before it is moved: creating or renaming it
    into ``inbound`` sets it) and of everything in it. Unlike ``timestamp.txt`` and the name,
    which the student writes, no student can set a status change time back."""
    import uuid

    key = uuid.uuid4().hex
    try:
        arrived = [os.stat(name, dir_fd=inbound, follow_symlinks=False).st_ctime]
        os.rename(name, key, src_dir_fd=inbound, dst_dir_fd=staging)
    except FileNotFoundError:
        return None  # gone meanwhile
    copy = f"{key}.checked"
    try:
        why = _vet(staging, key, name, copy, day, arrived)
    except Exception as exc:  # noqa: BLE001 - this submission is refused, the others go on
        why = f"{name}: could not be checked ({type(exc).__name__})"
    if why is None:
        try:
            os.stat(name, dir_fd=vetted_in, follow_symlinks=False)
            why = f"{name}: collected before under the same name"
        except FileNotFoundError:
            os.rename(copy, name, src_dir_fd=staging, dst_dir_fd=vetted_in)
            if times is not None:
                student = name.rsplit("+", 3)[0]
                times[(student, day)] = max(times.get((student, day), 0.0), max(arrived))
    # The student's original is never collected; it is kept, root-only, for the
    # instructor: refused ones in quarantine/, the others in received/.
    keep = quarantine if why is not None else received
    os.rename(key, key, src_dir_fd=staging, dst_dir_fd=keep)
    fd = os.open(f"{key}.name", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                 dir_fd=keep)
    try:
        os.write(fd, (name + "\n" + (why or "accepted") + "\n").encode(errors="replace"))
    finally:
        os.close(fd)
    try:
        shutil.rmtree(copy, dir_fd=staging)   # a refused copy: root's, capped depth
    except FileNotFoundError:
        pass
    return why


def received_times(folder: Path) -> Path:
    """Root's record of when each accepted submission reached the exchange:
    ``received-times.json`` (``0600``), ``{student: {day: ISO time, UTC}}``, the latest per
    student and day (what ``classroom grade`` passes to ``grade --submission-times``)."""
    return folder / "received-times.json"


def record_times(folder: Path, times: dict[tuple[str, str], float]) -> None:
    """Merge ``times`` (epoch seconds) into :func:`received_times`, keeping the later."""
    import datetime as dt
    import json

    path = received_times(folder)
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    for (student, day), t in sorted(times.items()):
        iso = dt.datetime.fromtimestamp(t, dt.UTC).isoformat()
        old = data.setdefault(student, {}).get(day)
        if old is None or dt.datetime.fromisoformat(old) < dt.datetime.fromisoformat(iso):
            data[student][day] = iso
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


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
    never the student's files, which a descriptor they still hold could change; the
    originals are kept, root-only, in ``received/`` (accepted) or ``quarantine/`` (refused).
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
        problems = []
        times: dict[tuple[str, str], float] = {}
        for name in sorted(os.listdir(inbound)):
            if not fnmatch.fnmatchcase(name, f"*+{day}+*"):
                continue
            try:
                why = _file_one(name, day, inbound, staging, vetted_in, quarantine, received,
                                times)
            except Exception as exc:  # noqa: BLE001 - one submission never stops the class
                why = f"{name[:120]}: could not be filed ({type(exc).__name__}: {exc})"
            if why is not None:
                problems.append(why)
        try:
            os.rmdir(run, dir_fd=fds[1])
        except OSError:
            pass  # something could not be filed: it stays in root-only staging/
        record_times(folder, times)
        return problems
    finally:
        for fd in fds:
            os.close(fd)
