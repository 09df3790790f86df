"""Turn a zip of LMS downloads into nbgrader's ``<student_id>/<assignment_id>/`` layout.

Accepted inside the zip:
- the layout itself, optionally under one top folder (``submitted/alice/day03_.../x.ipynb``);
- flat files named the way nbgrader's ``zip_collect`` expects by default
  (``FileNameCollector.named_regexp``): ``<assignment>_<student_id>_attempt_<timestamp>_<file>``,
  e.g. ``day03_alice_attempt_2026-01-05-10-00-00_day03_self_attention.ipynb``.

The ``<file>`` part is the name the student gave their upload, so it is never read for the
student: a name is filed under a student only when it parses one way. It must hold exactly
one ``_attempt_<timestamp>_``; before it, either a day of the course (``day03`` or its full
name) then ``_<student_id>``, or ``<assignment>_<student_id>`` with one underscore. Anything
else is ambiguous: reported and left ungraded. The day is read from the assignment part,
else from the notebook's graded cells. Of several attempts of one student and day, the latest
timestamp is kept (the others are reported); two with the same timestamp are both left out.
The kept attempt's own timestamp goes to ``timestamp.txt`` beside it (read as UTC), as
nbgrader's ``zip_collect`` does, and to the ``times`` the caller passes: the LMS wrote that time,
the student did not, so grading takes it from ``times`` (a record no file in the zip can
supply), never from a ``timestamp.txt`` in the extracted folders. A ``timestamp.txt`` inside the
zip (its layout form, ``submitted/alice/day03/timestamp.txt``) is never copied; a file without an
attempt time keeps the zip entry's time as its modification time (a file's time).
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import zipfile
from pathlib import Path

import nbformat

from autograder.core.course import PipelineError, notebook_name

ATTEMPT = re.compile(r"_attempt_(?P<timestamp>[0-9][0-9\-]*)_")
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def parse_lms_name(name: str, days: list[str]) -> tuple[str, str | None, str, str] | str:
    """``(student, day or None, timestamp, file)`` of an LMS file name, or why it is ambiguous.

    See the module docstring for the rule; ``day`` is None when the assignment part names no
    day of the course.
    """
    hits = list(ATTEMPT.finditer(name))
    if len(hits) != 1:
        return (f"{name}: {len(hits)} '_attempt_<timestamp>_' parts (one expected); "
                "cannot tell whose file it is")
    m = hits[0]
    head, stamp, fname = name[:m.start()], m.group("timestamp"), name[m.end():]
    day, student = None, None
    for d in sorted(days, key=len, reverse=True):
        for prefix in (d, d[:5]):
            if head.startswith(prefix + "_"):
                day, student = d, head[len(prefix) + 1:]
                break
        if student is not None:
            break
    if student is None:
        if head.count("_") != 1:
            return (f"{name}: '{head}' does not split into <assignment>_<student_id> one way "
                    "only")
        student = head.split("_")[1]
    if not STUDENT_ID.fullmatch(student) or not fname:
        return f"{name}: '{student}' is not a valid student id"
    return student, day, stamp, fname


def _day_of(path: Path, name: str, days: list[str]) -> str | None:
    for d in days:
        if d in name or name.startswith(d[:5]):
            return d
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception:  # noqa: BLE001 - unreadable: let the grader give it its status
        return None
    ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") for c in nb.cells}
    for d in days:
        if any(i.startswith(d[:5] + "_") for i in ids):
            return d
    return None


def unzip_submissions(zip_path: Path, out: Path, days: list[str],
                      problems: list[str] | None = None,
                      times: dict | None = None) -> Path:
    """Extract ``zip_path`` into ``out`` in the submissions layout; returns the folder.

    Files that cannot be filed unambiguously are appended to ``problems`` (and not graded).
    ``times`` gets ``{(student, day): aware UTC datetime}``: each kept LMS file's own attempt
    time (none for a file in the layout form, or whose attempt time does not parse).
    """
    from autograder.core.deadlines import parse_timestamp

    problems = problems if problems is not None else []
    raw = out / "raw"
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            name = Path(info.filename)
            if info.is_dir() or name.is_absolute() or ".." in name.parts:
                continue  # no path traversal out of the extraction folder
            target = raw / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            try:  # the entry's own time (the LMS's, read as UTC) is the file's time
                stamp = datetime.datetime(*info.date_time, tzinfo=datetime.UTC).timestamp()
                os.utime(target, (stamp, stamp))
            except (ValueError, OverflowError, OSError):
                pass
    subs = out / "submitted"
    subs.mkdir(parents=True, exist_ok=True)
    chosen: dict[tuple[str, str], tuple[str, Path, str]] = {}
    tied: set[tuple[str, str]] = set()
    for nb in sorted(raw.rglob("*.ipynb")):
        rel = nb.relative_to(raw).parts
        if ".ipynb_checkpoints" in rel or "__MACOSX" in rel:
            continue
        if len(rel) >= 3 and rel[-2] in days:
            student, day, fname, stamp = rel[-3], rel[-2], rel[-1], ""
            if not STUDENT_ID.fullmatch(student):
                problems.append(f"{'/'.join(rel)}: '{student}' is not a valid student id")
                continue
        else:
            parsed = parse_lms_name(nb.name, days)
            if isinstance(parsed, str):
                problems.append(parsed)
                continue
            student, day, stamp, fname = parsed
            day = day or _day_of(nb, fname, days)
            if day is None:
                problems.append(f"{nb.name}: no day of the course in its name or its cells")
                continue
        key = (student, day)
        if key in chosen:
            old_stamp, old_nb, _ = chosen[key]
            if stamp == old_stamp:
                tied.add(key)
                problems.append(f"{nb.name} and {old_nb.name}: two files for {student}/{day} "
                                "with the same time; neither was graded")
                continue
            older = nb if stamp < old_stamp else old_nb
            problems.append(f"{older.name}: an earlier attempt of {student}/{day}; the latest "
                            "was graded")
            if stamp < old_stamp:
                continue
        chosen[key] = (stamp, nb, fname)
    for (student, day), (stamp, nb, fname) in sorted(chosen.items()):
        if (student, day) in tied:
            continue
        dest = subs / student / day / Path(fname).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, dest)
        if stamp:  # as nbgrader's zip_collect does: this file's attempt time is its time
            (dest.parent / "timestamp.txt").write_text(stamp + "\n", encoding="utf-8")
            when = parse_timestamp(stamp)
            if times is not None and when is not None:
                times[(student, day)] = when
    return subs


def find_submitted_notebook(folder: Path, day: str) -> Path | None:
    """The notebook of ``day`` in a submission folder, tolerating a renamed single notebook
    (``day03_self_attention (1).ipynb``) and ignoring checkpoints."""
    exact = folder / notebook_name(day)
    if exact.is_file():
        return exact
    candidates = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if len(candidates) == 1:
        return candidates[0]
    close = [p for p in candidates if p.name.startswith(day)]
    if close:
        return max(close, key=lambda p: p.stat().st_mtime)
    return None


def discover(submissions: Path, days: list[str], students: list[str] | None = None
             ) -> list[tuple[str, str, Path | None]]:
    """(student, day, notebook or None) for every student folder and day.

    The layout is nbgrader's ``<submissions>/<student_id>/<assignment_id>/<notebook>.ipynb``.

    Raises:
        PipelineError: if ``submissions`` is not a folder or holds no student folder.
    """
    if not submissions.is_dir():
        raise PipelineError(f"{submissions} is not a folder of submissions "
                            "(<student_id>/<dayNN_slug>/<dayNN_slug>.ipynb)")
    student_dirs = sorted(p for p in submissions.iterdir()
                          if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    if students:
        student_dirs = [p for p in student_dirs if p.name in students]
    if not student_dirs:
        raise PipelineError(f"no student folders in {submissions}")
    jobs = []
    for sdir in student_dirs:
        for day in days:
            ddir = sdir / day
            jobs.append((sdir.name, day, find_submitted_notebook(ddir, day)
                         if ddir.is_dir() and not ddir.is_symlink() else None))
    return jobs


def unplaced(submissions: Path, days: list[str], students: list[str] | None = None,
             most: int = 200) -> list[str]:
    """One line for each notebook in a student's folder that ``grade`` cannot place: not in
    ``<student_id>/<dayNN_slug>/`` (``erin/day2/x.ipynb``, ``erin/x.ipynb``), with the day it
    looks like (:func:`_day_of`: its name, else its graded cells) and where to move it.
    Links are not followed; at most ``most`` lines."""
    out: list[str] = []
    if not submissions.is_dir():
        return out
    for sdir in sorted(p for p in submissions.iterdir()
                       if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")):
        if students and sdir.name not in students:
            continue
        for nb in sorted(sdir.rglob("*.ipynb")):
            rel = nb.relative_to(submissions)
            if len(rel.parts) > 5 or ".ipynb_checkpoints" in rel.parts or nb.is_symlink():
                continue
            if len(rel.parts) == 3 and rel.parts[1] in days:
                continue                                  # placed (graded or reported there)
            day = _day_of(nb, "/".join(rel.parts[1:]), days)
            out.append(f"{rel}: not in a day folder ({sdir.name}/<dayNN_slug>/), so not graded"
                       + (f"; it looks like {day}: move it to {sdir.name}/{day}/" if day else
                          "; its day could not be told from its name or cells"))
            if len(out) >= most:
                return out
    return out
