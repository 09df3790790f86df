"""The instructor's loop on the classroom's hub: release, collect, grade, return.

nbgrader's own verbs move the files (``release_assignment``, ``collect``,
``release_feedback``), run as the ``instructor`` account in its course folder; the grading is
the course's sandboxed, parallel ``python -m autograder grade`` on the collected folder, run as
root (each kernel then drops to a uid of its own), followed by ``feedback``:

- ``release DAY``: ``nbgrader release_assignment DAY`` (students then fetch it in their lab);
- ``collect DAY``: every inbound submission of DAY is first checked and frozen (see
  :func:`vet_inbound`; what fails goes to ``quarantine/`` and is listed), then
  ``nbgrader collect DAY`` copies them into ``course/submitted/<student>/DAY/``;
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


def _freeze(path: Path, owners: set[int]) -> str | None:
    """Make a submission root-owned and read-only (top-down: a folder is frozen before it is
    listed, so nothing can be added behind the check); returns why it is refused, or None."""
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        return f"{path.name}: not a folder"
    if st.st_uid not in owners:
        return f"{path.name}: owned by another account"
    os.lchown(path, 0, 0)
    os.chmod(path, 0o755)
    for entry in sorted(path.iterdir()):
        st = entry.lstat()
        if stat.S_ISDIR(st.st_mode):
            why = _freeze(entry, owners)
            if why:
                return why
            continue
        if not stat.S_ISREG(st.st_mode):
            return f"{entry.name}: a link or special file"
        if st.st_uid not in owners or st.st_nlink != 1:
            return f"{entry.name}: a file of another account, or a hard link"
        os.lchown(entry, 0, 0)
        os.chmod(entry, 0o644)
    return None


def vet_inbound(folder: Path, day: str) -> list[str]:
    """Check every inbound submission of ``day``; move the refused ones to ``quarantine/``.

    A submission is nbgrader's ``<student>+<day>+<timestamp>+<random>`` folder. It is kept
    only when it belongs to the classroom account it names and holds nothing but plain
    files and folders of that account (no link that would make ``collect`` copy someone
    else's file); kept ones become root's and read-only before ``collect`` reads them.
    Returns one line per refused submission.
    """
    inbound = folder / "exchange" / COURSE_ID / "inbound"
    quarantine = folder / "quarantine"
    problems = []
    for entry in sorted(inbound.iterdir()):
        parts = entry.name.split("+")
        if len(parts) < 3 or parts[1] != day:
            continue
        st = entry.lstat()
        owner = _owner(st.st_uid)
        claimed = _uid(parts[0])
        if claimed is None or st.st_uid not in (claimed, 0):  # 0: frozen by an earlier run
            why = f"{entry.name}: submitted in the name of {parts[0]!r} by {owner or st.st_uid}"
        else:
            why = _freeze(entry, {claimed, 0})
        if why:
            quarantine.mkdir(mode=0o700, exist_ok=True)
            shutil.move(str(entry), quarantine / entry.name)
            problems.append(why)
    return problems


def place_feedback(folder: Path, grading: Path, day: str) -> list[Path]:
    """Copy each feedback page of ``day`` where ``nbgrader release_feedback`` reads it."""
    course = course_dir(folder)
    inst = pwd.getpwnam(INSTRUCTOR)
    placed = []
    for page in sorted((grading / "feedback").glob(f"*/{day}.html")):
        student = page.parent.name
        submitted = course / "submitted" / student / day
        notebook = find_submitted_notebook(submitted, day) if submitted.is_dir() else None
        if notebook is None or not (submitted / "submission_secret.txt").is_file():
            continue  # graded from elsewhere: nbgrader cannot route it to the student
        dest = course / "feedback" / student / day
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, dest / f"{notebook.stem}.html")
        for name in ("timestamp.txt", "submission_secret.txt"):
            shutil.copyfile(submitted / name, dest / name)
        for p in (course / "feedback", course / "feedback" / student, dest, *dest.iterdir()):
            os.chown(p, inst.pw_uid, inst.pw_gid)
        placed.append(dest / f"{notebook.stem}.html")
    return placed


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
        as_instructor(folder, "collect", day, "--ExchangeCollect.check_owner=False")
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
