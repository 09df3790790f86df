"""How long a day takes a learner: the estimate each notebook's stated time is held to.

A day's opening cell states its time (``**Time:** about 90 minutes.``; a day with an
extension states both: ``**Time:** about 2 hours for the core; the extension adds about 60
minutes.``). A learner plans an evening on that sentence, so ``tests/test_timing.py`` holds it
to an estimate made from the notebook itself and the course's record:

- reading: the words of every markdown cell (self-test answer cells left out: revealing them
  is counted with the questions) at :data:`READING_WPM` words a minute, a careful pace for
  technical prose with formulas;
- exercises: the budgets the exercise headings state, ``## Exercise 2 — SwiGLU (10 min)``;
- running: :data:`MINUTES_PER_CELL` for each code cell a learner reads and runs (hidden-test
  cells are not shown to them), plus the ``cpu`` profile's ``notebook_seconds`` in
  ``course/record.json`` (the measured "Restart & Run All" of the answer key on 2 cores);
- self-test: :data:`MINUTES_PER_QUESTION` for each question (answer it, then read the answer).

A markdown cell whose first line is a heading starting ``# Extension`` begins a day's
extension: what follows it is counted separately, and the running time is counted with the
core (an upper bound for the core). The stated time must be at least the estimate less
:data:`SLACK_MINUTES` (times are stated rounded) and at most :data:`MAX_OVER` times it (a day
that states far more than it holds misleads as much as one that states too little).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

READING_WPM = 120
MINUTES_PER_CELL = 0.5
MINUTES_PER_QUESTION = 2.0
SLACK_MINUTES = 5.0
MAX_OVER = 1.3

_WORD = re.compile(r"[A-Za-z]+")
_BUDGET = re.compile(r"^#+ .*\((\d+) min\)\s*$", re.M)
_QUESTION = re.compile(r"^\s*\d+\.\s", re.M)
_DURATION = r"(\d+(?:\.\d+)?) (minutes|hours?)"
_STATED = re.compile(rf"\*\*Time:\*\*\s*about {_DURATION}")
_EXTENSION_STATED = re.compile(rf"extension adds about {_DURATION}")
_EXTENSION = re.compile(r"#\s*Extension\b")


@dataclass
class Part:
    """The estimate of one part of a day (its core, or its extension), in minutes."""

    words: int = 0
    exercises: float = 0.0
    cells: int = 0
    questions: int = 0
    run_seconds: float = 0.0

    @property
    def minutes(self) -> float:
        return (self.words / READING_WPM + self.exercises + MINUTES_PER_CELL * self.cells
                + self.run_seconds / 60 + MINUTES_PER_QUESTION * self.questions)


@dataclass
class DayTime:
    """A day's stated times (minutes; ``extension_stated`` is None without an extension) and
    the estimates of its core and extension (``extension`` is None without one)."""

    day: str
    stated: float | None
    extension_stated: float | None
    core: Part
    extension: Part | None


def _minutes(value: str, unit: str) -> float:
    return float(value) * (60 if unit.startswith("hour") else 1)


def estimate(notebook: Path, record: dict | None = None) -> DayTime:
    """Estimate the day of ``notebook`` (a source notebook, ``source/<day>/<day>.ipynb``).

    ``record`` is ``course/record.json`` as a dict (read from the course next to the notebook
    when None); a day the ``cpu`` profile has not measured counts no running time."""
    day = notebook.parent.name
    if record is None:
        record = json.loads((notebook.parents[2] / "course" / "record.json").read_text())
    days = record.get("profiles", {}).get("cpu", {}).get("days", {})
    nb = nbformat.read(notebook, as_version=4)
    core, extension = Part(run_seconds=days.get(day, {}).get("notebook_seconds", 0.0)), None
    part = core
    stated = extension_stated = None
    for cell in nb.cells:
        text = cell.source
        if cell.cell_type == "markdown":
            if _EXTENSION.match(text.lstrip()):
                part = extension = Part()
            if cell.get("id", "").endswith("selftest-answers"):
                continue
            part.words += len(_WORD.findall(text))
            part.exercises += sum(int(m) for m in _BUDGET.findall(text))
            if "Self-test" in text:
                part.questions += len(_QUESTION.findall(text))
            if stated is None and (m := _STATED.search(text)):
                stated = _minutes(*m.groups())
                if m2 := _EXTENSION_STATED.search(text):
                    extension_stated = _minutes(*m2.groups())
        else:
            grading = cell.metadata.get("nbgrader", {})
            if grading.get("grade") and not grading.get("solution"):
                continue  # a hidden-test cell: the learner sees an empty cell
            part.cells += 1
    return DayTime(day, stated, extension_stated, core, extension)


def problems(time: DayTime) -> list[str]:
    """What is wrong with a day's stated times against their estimates (empty when honest)."""
    out = []
    checks = [("time", time.stated, time.core)]
    if time.extension is not None or time.extension_stated is not None:
        checks.append(("extension's time", time.extension_stated, time.extension))
    for what, stated, part in checks:
        if stated is None:
            out.append(f"{time.day}: no stated {what} ('**Time:** about N minutes' in the "
                       "opening cell, 'the extension adds about N minutes' for an extension)")
            continue
        if part is None:
            out.append(f"{time.day}: states an extension's time but has no '# Extension' cell")
            continue
        est = part.minutes
        if stated < est - SLACK_MINUTES:
            out.append(f"{time.day}: {what} stated {stated:.0f} min, estimated {est:.0f} min")
        elif stated > MAX_OVER * est:
            out.append(f"{time.day}: {what} stated {stated:.0f} min, more than "
                       f"{MAX_OVER}x the estimate of {est:.0f} min")
    return out
