"""The instructor's loop on the classroom's hub: release, collect, grade, return.

nbgrader's own verbs move the files (``release_assignment``, ``collect``,
``release_feedback``), run as the ``instructor`` account in its course folder; the grading is
the course's sandboxed, parallel ``python -m autograder grade`` on the collected folder, run as
root (each kernel then drops to a uid of its own), followed by ``feedback``:

- ``release DAY``: ``nbgrader release_assignment DAY`` (students then fetch it in their lab);
- ``collect DAY``: every inbound submission of DAY is first moved out of the students'
  reach, checked and frozen (see :func:`vet_inbound`; what fails goes to ``quarantine/`` and
  is listed), then ``nbgrader collect DAY`` copies the vetted ones, and only those, into
  ``course/submitted/<student>/DAY/``;
- ``grade DAY``: ``python -m autograder grade course/submitted --day DAY --output grading``,
  then ``python -m autograder feedback``: ``grading/grades.csv``, ``grading/results/`` and
  ``grading/feedback/<student>/DAY.html`` (``report --output grading`` works on it);
- ``return DAY``: each feedback page goes to ``course/feedback/<student>/DAY/<notebook>.html``
  with the submission's ``timestamp.txt`` and ``submission_secret.txt``, where
  ``nbgrader release_feedback`` finds it; students then use "Fetch Feedback".
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from autograder.build import PipelineError, resolve_days
from autograder.classroom import _require_root
from autograder.classroom_setup import COURSE_ID, INSTRUCTOR, MARK, users_python
from autograder.collect import find_submitted_notebook


def course_dir(folder: Path) -> Path:
    """The instructor's nbgrader course folder in the classroom ``folder``."""
    return folder / "home" / INSTRUCTOR / "course"


def as_instructor(folder: Path, *args: str) -> None:
    """Run ``nbgrader ARGS`` as the instructor account, in its course folder.

    Raises:
        PipelineError: nbgrader failed (its output is shown above).
    """
    entry = pwd.getpwnam(INSTRUCTOR)
    python, extra = users_python(folder)
    env = {"HOME": entry.pw_dir, "USER": INSTRUCTOR, "LANG": "C.UTF-8",
           "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin", **extra}
    proc = subprocess.run([str(python), "-m", "nbgrader", *args], cwd=course_dir(folder),
                          env=env, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[])
    if proc.returncode != 0:
        raise PipelineError(f"nbgrader {' '.join(args)} failed (exit {proc.returncode})")


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


def _copy_checked(src: int, dst: int, owner: int) -> str | None:
    """Copy the student's folder open at ``src`` into the empty root-only folder open at
    ``dst``; returns why it is refused, or None.

    Nothing of the student's is kept: every file is read once through a descriptor opened
    without following links, at most :data:`MAX_SUBMISSION_BYTES` in all, and written as a
    new file of root's, so a descriptor the student still holds on an original reaches
    nothing that is collected. Iterative (no recursion limit), at most :data:`MAX_DEPTH`
    folders deep and :data:`MAX_ENTRIES` entries. Only plain files and folders of ``owner``
    with one link each are accepted. Closes neither descriptor.
    """
    left, entries = MAX_SUBMISSION_BYTES, 0
    todo = [(os.dup(src), os.dup(dst), 0)]
    try:
        while todo:
            s, d, depth = todo.pop()
            try:
                if os.fstat(s).st_uid != owner:
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
                    if stat.S_ISDIR(st.st_mode):
                        if depth >= MAX_DEPTH:
                            os.close(child)
                            return f"folders nested more than {MAX_DEPTH} deep"
                        os.mkdir(entry, 0o755, dir_fd=d)
                        todo.append((child, os.open(entry, os.O_RDONLY | os.O_DIRECTORY |
                                                    os.O_NOFOLLOW, dir_fd=d), depth + 1))
                        continue
                    try:
                        if not stat.S_ISREG(st.st_mode):
                            return f"{entry}: a link or special file"
                        if st.st_uid != owner or st.st_nlink != 1:
                            return f"{entry}: a file of another account, or a hard link"
                        out = os.open(entry, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                                      os.O_NOFOLLOW, 0o644, dir_fd=d)
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


def _vet(staging: int, name: str, copy: str, day: str) -> str | None:
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
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=staging)
    except OSError:
        return f"{name}: not a folder"
    try:
        owner = os.fstat(fd).st_uid
        if owner != uid:
            return (f"{name}: submitted in the name of {parts[0]!r} by "
                    f"{_owner(owner) or owner}")
        os.mkdir(copy, 0o755, dir_fd=staging)
        out = os.open(copy, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=staging)
        try:
            why = _copy_checked(fd, out, uid)
        finally:
            os.close(out)
        return None if why is None else f"{name}: {why}"
    finally:
        os.close(fd)


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

    from autograder.classroom_setup import _own_dir

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
        for name in sorted(os.listdir(inbound)):
            if not fnmatch.fnmatchcase(name, f"*+{day}+*"):
                continue
            try:
                os.rename(name, name, src_dir_fd=inbound, dst_dir_fd=staging)
            except OSError:
                continue  # gone meanwhile
            copy = f".checked-{uuid.uuid4().hex}"
            try:
                why = _vet(staging, name, copy, day)
            except Exception as exc:  # noqa: BLE001 - one submission never stops the class
                why = f"{name}: could not be checked ({type(exc).__name__})"
            if why is None:
                try:
                    os.stat(name, dir_fd=vetted_in, follow_symlinks=False)
                    why = f"{name}: collected before under the same name"
                except FileNotFoundError:
                    os.rename(copy, name, src_dir_fd=staging, dst_dir_fd=vetted_in)
            # The student's original is never collected; it is kept, root-only, for the
            # instructor: refused ones in quarantine/, the others in received/.
            os.rename(name, f"{name}.{run[:8]}", src_dir_fd=staging,
                      dst_dir_fd=quarantine if why is not None else received)
            if why is not None:
                problems.append(why)
            try:
                shutil.rmtree(copy, dir_fd=staging)   # a refused copy: root's, capped depth
            except FileNotFoundError:
                pass
        os.rmdir(run, dir_fd=fds[1])
        return problems
    finally:
        for fd in fds:
            os.close(fd)


def _collected_names(folder: Path, day: str) -> list[str]:
    inbound = vetted_root(folder) / COURSE_ID / "inbound"
    return sorted({n.rsplit("+", 3)[0] for n in os.listdir(inbound)
                   if n.rsplit("+", 3)[1:2] == [day]})


def collect(folder: Path, day: str) -> list[str]:
    """``nbgrader collect`` of the vetted submissions of ``day`` (a newer one replaces an
    older); when it fails for the whole class, once per student, so that one student's
    submission never stops the others'. Returns the students it failed for."""
    args = ["collect", day, "--update", "--ExchangeCollect.check_owner=False",
            f"--Exchange.root={vetted_root(folder)}"]
    try:
        as_instructor(folder, *args)
        return []
    except PipelineError:
        failed = []
        for student in _collected_names(folder, day):
            try:
                as_instructor(folder, *args, f"--student={student}")
            except PipelineError:
                failed.append(student)
        return failed


def _as_account(name: str, work) -> object:
    """``work()`` in a child process that runs as the account ``name`` (no supplementary
    groups), so that no link in that account's folders can redirect a write of root's;
    returns what ``work`` returned (JSON).

    Raises:
        PipelineError: ``work`` failed.
    """
    import json

    entry = pwd.getpwnam(name)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(entry.pw_gid, entry.pw_gid, entry.pw_gid)
            os.setresuid(entry.pw_uid, entry.pw_uid, entry.pw_uid)
            os.write(w, json.dumps(work()).encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - said below, then exit 1
            os.write(2, f"as {name}: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(code)
    os.close(w)
    raw = b""
    while chunk := os.read(r, 65536):
        raw += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise PipelineError(f"a step run as {name} failed")
    return json.loads(raw or b"null")


def place_feedback(folder: Path, grading: Path, day: str) -> list[Path]:
    """Copy each feedback page of ``day`` where ``nbgrader release_feedback`` reads it.

    Root reads the pages from ``grading/`` (root's own); everything in the instructor's
    course folder is read and written as the instructor account."""
    course = course_dir(folder)
    pages = {page.parent.name: page.read_text(encoding="utf-8")
             for page in sorted((grading / "feedback").glob(f"*/{day}.html"))
             if not page.is_symlink()}

    def place() -> list[str]:
        placed = []
        for student, html in pages.items():
            submitted = course / "submitted" / student / day
            notebook = find_submitted_notebook(submitted, day) if submitted.is_dir() else None
            if notebook is None or not (submitted / "submission_secret.txt").is_file():
                continue  # graded from elsewhere: nbgrader cannot route it to the student
            dest = course / "feedback" / student / day
            dest.mkdir(parents=True, exist_ok=True)
            (dest / f"{notebook.stem}.html").write_text(html, encoding="utf-8")
            for name in ("timestamp.txt", "submission_secret.txt"):
                shutil.copyfile(submitted / name, dest / name)
            placed.append(str(dest / f"{notebook.stem}.html"))
        return placed

    return [Path(p) for p in _as_account(INSTRUCTOR, place)]


def _autograder(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "autograder", *args])
    if proc.returncode != 0:
        raise PipelineError(f"python -m autograder {' '.join(args)} failed "
                            f"(exit {proc.returncode})")


def run(action: str, folder: Path, root: Path, args) -> int:
    """One step of the instructor's loop (see the module docstring)."""
    _require_root(action)
    if not args.day:
        raise PipelineError(f"classroom {action} needs a day: classroom {action} 2")
    if not course_dir(folder).is_dir():
        raise PipelineError(f"no classroom in {folder}: run `python -m autograder classroom "
                            f"start --dir {folder}` first")
    day = resolve_days(root, [args.day])[0]
    grading = folder / "grading"
    if action == "release":
        as_instructor(folder, "release_assignment", day)
        print(f"released {day}: students fetch it from Nbgrader > Assignments in their lab")
    elif action == "collect":
        for why in vet_inbound(folder, day):
            print(f"quarantined, not collected: {why}", file=sys.stderr)
        for student in collect(folder, day):
            print(f"nbgrader could not collect {student}'s {day}", file=sys.stderr)
        n = len(list((course_dir(folder) / "submitted").glob(f"*/{day}")))
        print(f"collected {day}: {n} submission(s) in {course_dir(folder) / 'submitted'}")
    elif action == "grade":
        grading.mkdir(mode=0o700, exist_ok=True)
        extra = ["--jobs", str(args.jobs)] if args.jobs else []
        _autograder("grade", str(course_dir(folder) / "submitted"), "--day", day,
                    "--output", str(grading), "--root", str(root), *extra)
        _autograder("feedback", "--output", str(grading), "--day", day)
        print(f"grades: {grading / 'grades.csv'}; class report: python -m autograder report "
              f"--output {grading}")
    elif action == "return":
        placed = place_feedback(folder, grading, day)
        as_instructor(folder, "release_feedback", day)
        print(f"returned {len(placed)} feedback page(s) for {day}: students use "
              "'Fetch Feedback' in Nbgrader > Assignments")
    return 0
