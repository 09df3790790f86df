"""Grading one learner notebook for its learner: what ``python -m autograder selfcheck`` runs.

``selfcheck`` grades one learner notebook with the day's hidden tests exactly as the instructor's
``grade`` does (nbgrader autograde in a temporary course folder), offline, on a copy: nothing is
written into the learner's notebook. It prints, per exercise, the points, pass or fail and the
diagnosis of every test, and stores the points in the learner's progress file
(:mod:`course.progress`), which ``progress`` shows for all days.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.core.course import TestInfo, test_map  # noqa: F401 - re-exported
from autograder.core.records import Status
from autograder.grading import pipeline
from autograder.grading.feedback import explain  # noqa: F401 - re-exported
from autograder.grading.pipeline import PipelineError

STUDENT = "learner"
# Problems of the grading machinery, not of the notebook: nothing to record.
NOT_RECORDED = (Status.ENVIRONMENT_ERROR, "error")


def _grade_options(sandbox: bool = False) -> dict:
    """Keyword options of pipeline.grade for a learner grading their own notebook: no
    sandbox (it is their own code, on their own machine; the class's check on the hub,
    :mod:`autograder.classroom.hubcheck`, asks for it), no cached results, and a fresh
    secret per run: the hidden checks' inputs differ every time, so no run tells the next."""
    import inspect

    params = inspect.signature(pipeline.grade).parameters
    wanted = {"sandbox": sandbox, "resume": False, "secret": os.urandom(32)}
    return {k: v for k, v in wanted.items() if k in params}


@dataclass
class Report:
    """One self-check: the grading result, the text printed, where progress was saved."""

    notebook: Path
    day: str
    result: pipeline.Result
    text: str
    progress_file: Path | None
    seconds: float
    exercises: dict[str, list[pipeline.TestResult]] = field(default_factory=dict)

    @property
    def full_marks(self) -> bool:
        return self.result.status == Status.GRADED and self.result.score >= self.result.max_score


def day_of(notebook: Path, root: Path) -> str:
    """The assignment (``dayNN_slug``) a notebook belongs to, from its folder or file name.

    Raises:
        PipelineError: when neither names a day of the course.
    """
    days = pipeline.list_days(root)
    for name in (notebook.parent.name, notebook.stem):
        if name in days:
            return name
    for name in (notebook.stem, notebook.parent.name):
        m = re.match(r"day(\d{2})", name)
        if m:
            hits = [d for d in days if d.startswith(f"day{m.group(1)}_")]
            if len(hits) == 1:
                return hits[0]
    raise PipelineError(
        f"cannot tell which day {notebook} is: its folder or file name should be a day of the "
        f"course ({', '.join(days)})")


def format_report(result: pipeline.Result, tests: dict[str, TestInfo], notebook: Path,
                  seconds: float, progress_file: Path | None,
                  shown: str | None = None) -> tuple[str, dict]:
    """The text a learner reads, and the results grouped by exercise. ``shown``: the name
    the notebook goes by instead of its path (the class's check grades a copy)."""
    saved = dt.datetime.fromtimestamp(notebook.stat().st_mtime).strftime("%Y-%m-%d %H:%M:%S")
    lines = [f"Self-check of {result.day} — {shown or notebook} "
             f"({'received' if shown else 'saved'} {saved})",
             "Hidden tests, run offline on a copy: your notebook is not changed.", ""]
    groups: dict[str, list[pipeline.TestResult]] = {}
    for t in result.tests:
        info = tests.get(t.grade_id)
        groups.setdefault(info.exercise if info else "Other tests", []).append(t)
    if result.status != Status.GRADED:
        lines.append(f"Status: {result.status}. {result.detail}".rstrip())
        lines.append("")
    for exercise, items in groups.items():
        got = sum(t.points for t in items)
        mx = sum(t.max_points for t in items)
        lines.append(f"{exercise}  —  {got:g}/{mx:g} points")
        for t in items:
            ok = t.points >= t.max_points
            mark = "✔ pass" if ok else ("◐ part" if t.points > 0 else "✘ FAIL")
            lines.append(f"  {mark}  {t.points:g}/{t.max_points:g}  {t.grade_id}")
            if not ok:
                info = tests.get(t.grade_id)
                if info and info.checks:
                    lines.extend(textwrap.wrap(f"checks: {info.checks}", 92,
                                               initial_indent=" " * 9,
                                               subsequent_indent=" " * 11))
                why = explain(t.message) or "no message (the test cell gave no points)"
                lines.extend(textwrap.wrap(f"diagnosis: {why}", 92, initial_indent=" " * 9,
                                           subsequent_indent=" " * 11))
        lines.append("")
    pct = 100.0 * result.score / result.max_score if result.max_score else 0.0
    failed = sum(1 for t in result.tests if t.points < t.max_points)
    if result.status in NOT_RECORDED:
        verdict = "not graded (a problem of the grading set-up, not of your notebook)"
    elif failed == 0 and result.status == Status.GRADED:
        verdict = "all tests pass"
    else:
        verdict = f"{failed} test{'s' if failed != 1 else ''} to fix"
    lines.append(f"Total: {result.score:g}/{result.max_score:g} points ({pct:.0f}%), {verdict}; "
                 f"graded in {seconds:.0f} s.")
    if progress_file is not None:
        lines.append(f"Saved to {progress_file}; `python -m autograder progress` shows all days.")
    return "\n".join(lines), groups


def selfcheck(notebook: Path, root: Path | None = None, save: bool = True,
              echo: bool = True, runner=None, sandbox: bool = False,
              shown: str | None = None) -> Report:
    """Grade ``notebook`` with its day's hidden tests; print and return the report.

    ``runner``: grades the job instead of a worker process (see ``pipeline.grade``); the
    standby (:mod:`autograder.selfcheck.standby`) passes its kernel started ahead of time.
    ``sandbox``: grade in the sandbox, as ``grade`` does (the class's check); ``shown``: the
    notebook's name in the report instead of its path.

    Raises:
        PipelineError: for a missing notebook or one that belongs to no day of the course.
    """
    from course import progress

    notebook = Path(notebook).expanduser().resolve()
    if not notebook.is_file():
        raise PipelineError(f"{notebook} does not exist")
    root = pipeline.find_root(root or notebook.parent)
    day = day_of(notebook, root)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tfs-selfcheck-") as tmp:
        # Grade a snapshot: the learner may keep editing (and saving) while the tests run.
        copy = Path(tmp) / "submitted" / STUDENT / day / pipeline.notebook_name(day)
        copy.parent.mkdir(parents=True)
        shutil.copy2(notebook, copy)
        results = pipeline.grade(root, Path(tmp) / "submitted", days=[day], jobs=1,
                                 work=[(STUDENT, day, copy)], runner=runner,
                                 **_grade_options(sandbox))
    result = results[0]
    seconds = time.monotonic() - t0
    path = None
    if save and result.status not in NOT_RECORDED:
        path = progress.progress_path(notebook)
        progress.record(path, day, result.score, result.max_score,
                        {t.grade_id: (t.points, t.max_points) for t in result.tests},
                        notebook, status=result.status)
    text, groups = format_report(result, test_map(root, day), notebook, seconds, path, shown)
    if echo:
        print(text)
    return Report(notebook, day, result, text, path, seconds, groups)


def show_progress(start: Path | None = None) -> str:
    """Print (and return) the progress table for the learner folder at or above ``start``."""
    from course import progress

    text = progress.progress_text(start)
    print(text)
    return text


# --------------------------------------------------------------------------- CLI


def exit_status(report: Report) -> int:
    """0: full marks, 1: some points lost, 2: not graded."""
    if report.result.status != Status.GRADED:
        return 2
    return 0 if report.full_marks else 1
