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
- ``grade DAY``: ``python -m autograder grade course/submitted --day DAY --output grading``
  (with ``--submission-times received-times.json``: when collect saw each submission arrive,
  not the student's own ``timestamp.txt``; the late policy is ``grading/deadlines.toml``),
  then ``python -m autograder feedback``: ``grading/grades.csv``, ``grading/results/`` and
  ``grading/feedback/<student>/DAY.html`` (``report --output grading`` works on it);
- ``return DAY``: each feedback page goes to ``course/feedback/<student>/DAY/<notebook>.html``
  with the submission's ``timestamp.txt`` and ``submission_secret.txt``, where
  ``nbgrader release_feedback`` finds it; students then use "Fetch Feedback".
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

from autograder.classroom.setup import COURSE_ID, INSTRUCTOR, _require_root, run_as, users_python
from autograder.classroom.vet import received_times, vet_inbound, vetted_root  # noqa: F401,E501
from autograder.core.course import PipelineError, resolve_days
from autograder.grading.collect import find_submitted_notebook


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


def place_feedback(folder: Path, grading: Path, day: str) -> list[Path]:
    """Copy each feedback page of ``day`` where ``nbgrader release_feedback`` reads it.

    Root reads the pages from ``grading/`` (root's own); everything in the instructor's
    course folder is read and written as the instructor account."""
    # Every import the child needs is made here, as root: the interpreter's own files may
    # be out of the instructor account's reach (pyenv under /root).
    import re  # noqa: F401

    from nbgrader.utils import parse_utc  # noqa: F401

    course = course_dir(folder)
    pages = {page.parent.name: page.read_text(encoding="utf-8")
             for page in sorted((grading / "feedback").glob(f"*/{day}.html"))
             if not page.is_symlink()}

    def place() -> list[list[str]]:
        placed = []
        for student, html in pages.items():
            try:
                why = _place_one(course, student, day, html)
            except Exception as exc:  # noqa: BLE001 - one student's files never stop the rest
                why = f"{type(exc).__name__}: {exc}"
            placed.append([student, why])
        return placed

    result = run_as(pwd.getpwnam(INSTRUCTOR), place)
    for student, why in result:
        if not why.startswith("/"):
            print(f"feedback not returned to {student}: {why}", file=sys.stderr)
    return [Path(why) for _, why in result if why.startswith("/")]


def _place_one(course: Path, student: str, day: str, html: str) -> str:
    """(As the instructor.) Place one page; returns its path, or why it was not placed. The
    submission's ``timestamp.txt`` and ``submission_secret.txt`` are the student's words:
    nbgrader's ``release_feedback`` stops for the whole class on a bad one, so they must be
    what nbgrader's submit writes (a timestamp it parses, a secret of 128 hex digits)."""
    import re

    from nbgrader.utils import parse_utc  # imported by place_feedback, before the fork

    submitted = course / "submitted" / student / day
    notebook = find_submitted_notebook(submitted, day) if submitted.is_dir() else None
    if notebook is None:
        return "no submitted notebook"
    texts = {}
    for name in ("timestamp.txt", "submission_secret.txt"):
        path = submitted / name
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 4096:
            return f"{name} is missing or not a small plain file"
        texts[name] = path.read_text(encoding="utf-8").strip()
    parse_utc(texts["timestamp.txt"])
    if not re.fullmatch(r"[0-9a-f]{128}", texts["submission_secret.txt"]):
        return "submission_secret.txt is not nbgrader's"
    dest = course / "feedback" / student / day
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{notebook.stem}.html").write_text(html, encoding="utf-8")
    for name, text in texts.items():
        (dest / name).write_text(text, encoding="utf-8")
    return str(dest / f"{notebook.stem}.html")




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
        if received_times(folder).is_file():  # when each submission reached the exchange
            extra += ["--submission-times", str(received_times(folder))]
        _autograder("grade", str(course_dir(folder) / "submitted"), "--day", day,
                    "--output", str(grading), "--root", str(root), *extra)
        _autograder("feedback", "--output", str(grading), "--day", day)
        print(f"grades: {grading / 'grades.csv'}; class report: python -m autograder report "
              f"--output {grading}")
    elif action == "return":
        placed = place_feedback(folder, grading, day)
        try:
            as_instructor(folder, "release_feedback", day)
        except PipelineError:    # then student by student: one never stops the others
            for page in placed:
                student = page.parent.parent.name
                try:
                    as_instructor(folder, "release_feedback", day, f"--student={student}")
                except PipelineError:
                    print(f"nbgrader could not return {student}'s feedback", file=sys.stderr)
        print(f"returned {len(placed)} feedback page(s) for {day}: students use "
              "'Fetch Feedback' in Nbgrader > Assignments")
    return 0
