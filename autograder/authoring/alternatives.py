"""Correct code written another way: the course's proof that its hidden tests accept it.

Each ``tests/alternatives/dayNN*.py`` file is one learner's notebook of day NN, written from
the release notebook only: a script in the percent format whose cells are marked with the
grade_id of the answer cell they fill::

    \"\"\"Day 5 written another way: the table built with torch.outer, ...\"\"\"
    # %% day05_sinusoidal
    class SinusoidalPositionalEncoding(nn.Module):
        ...
    # %% day05_learned
    ...

The notebook graded is the release notebook with each marked cell's source replaced by the
text under its marker (the whole cell, as the learner leaves it). An answer cell a file does
not fill keeps the reference solution, so a file may cover part of a day; the course's tests
require every answer cell of every day to be filled by at least one file. ``verify`` grades
every file and requires 100% on every test, as for the reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

_MARKER = re.compile(r"^# %% (\S+)[ \t]*$", re.MULTILINE)


class AlternativeError(ValueError):
    """A malformed alternatives file; the message names the file and the cell."""


@dataclass(frozen=True)
class Alternative:
    """One learner's notebook of ``day``: ``cells`` maps answer-cell grade_ids to sources."""

    id: str                 # the file's stem, e.g. "day05" or "day05_b"
    day: str                # the assignment, e.g. "day05_positional_encoding"
    path: Path
    cells: dict[str, str]

    def apply(self, release: nbformat.NotebookNode,
              solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
        """The release notebook with every answer cell filled: from ``cells`` where given,
        else from the reference ``solution``. Raises AlternativeError naming a grade_id that is
        not an answer cell of the day."""
        answers = {_grade_id(c): c.source for c in solution.cells if _is_answer(c)}
        unknown = sorted(set(self.cells) - set(answers))
        if unknown:
            raise AlternativeError(f"{self.path.name}: {unknown} are not answer cells of "
                                   f"{self.day} (answer cells: {sorted(answers)})")
        nb = nbformat.from_dict(release)   # deep copy
        for cell in nb.cells:
            gid = _grade_id(cell)
            if _is_answer(cell) and gid in answers:
                cell.source = self.cells.get(gid, answers[gid])
        return nb


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_answer(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def answer_cells(solution: nbformat.NotebookNode) -> list[str]:
    """The grade_ids of a day's answer cells (code and written answers), in order."""
    return [_grade_id(c) for c in solution.cells if _is_answer(c)]


def parse(path: Path, days: list[str]) -> Alternative:
    """Read one alternatives file; its name's ``dayNN`` prefix picks the assignment."""
    prefix = path.stem[:5]
    day = next((d for d in days if d.startswith(prefix)), None)
    if day is None or not re.fullmatch(r"day\d\d", prefix):
        raise AlternativeError(f"{path.name}: the name must start with dayNN of a course day")
    text = path.read_text(encoding="utf-8")
    marks = list(_MARKER.finditer(text))
    if not marks:
        raise AlternativeError(f"{path.name}: no '# %% <grade_id>' cell marker")
    cells: dict[str, str] = {}
    for mark, nxt in zip(marks, marks[1:] + [None], strict=True):
        gid = mark.group(1)
        if gid in cells:
            raise AlternativeError(f"{path.name}: cell {gid} is filled twice")
        body = text[mark.end():nxt.start() if nxt else len(text)]
        cells[gid] = body.strip("\n") + "\n"
    return Alternative(path.stem, day, path, cells)


def load(folder: Path, days: list[str]) -> list[Alternative]:
    """Every alternatives file under ``folder`` whose day is a course day, in name order."""
    if not folder.is_dir():
        return []
    return [parse(p, days) for p in sorted(folder.glob("day[0-9][0-9]*.py"))]
