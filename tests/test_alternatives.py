"""Correct code written another way (tests/alternatives/) and the mistake catalog cover every
exercise: each answer cell of each day is filled by at least one alternative (which verify
grades and requires at 100%: tests/test_course_pipeline.py::test_verify_every_day) and has
catalogued mistakes (which verify requires caught, with their words)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from autograder.authoring.alternatives import AlternativeError, answer_cells, load, parse
from autograder.authoring.mutants import load_catalog
from autograder.grading.pipeline import list_days

FOLDER = Path(__file__).with_name("alternatives")


def _answers(root: Path) -> dict[str, list[str]]:
    return {day: answer_cells(nbformat.read(str(root / "solutions" / day / f"{day}.ipynb"),
                                            as_version=4))
            for day in list_days(root)}


def test_every_answer_cell_has_an_alternative(root):
    """Is every exercise of every day written another way at least once?"""
    filled = {(a.day, gid) for a in load(FOLDER, list_days(root)) for gid in a.cells}
    missing = [f"{day}:{gid}" for day, gids in _answers(root).items() for gid in gids
               if (day, gid) not in filled]
    assert not missing, f"answer cells no alternative fills: {missing}"


def test_alternatives_fill_answer_cells_only(root):
    """Does every alternative apply: each marker names an answer cell of its day, and the
    notebook it makes differs from the release notebook in those cells alone?"""
    for alt in load(FOLDER, list_days(root)):
        release = nbformat.read(str(root / "release" / alt.day / f"{alt.day}.ipynb"), 4)
        solution = nbformat.read(str(root / "solutions" / alt.day / f"{alt.day}.ipynb"), 4)
        made = alt.apply(release, solution)
        answers = set(answer_cells(solution))
        for before, after in zip(release.cells, made.cells, strict=True):
            gid = before.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid not in answers:
                assert after.source == before.source, (alt.path.name, gid)
            elif gid in alt.cells:
                assert after.source == alt.cells[gid], (alt.path.name, gid)
            assert "raise NotImplementedError()" not in after.source, (alt.path.name, gid)


def test_every_answer_cell_has_catalogued_mistakes(root):
    """For every exercise of every day, the mistakes learners make are in the catalog."""
    counts: dict[tuple[str, str], int] = {}
    for m in load_catalog():
        counts[m.day, m.cell] = counts.get((m.day, m.cell), 0) + 1
    missing = [f"{day}:{gid}" for day, gids in _answers(root).items() for gid in gids
               if counts.get((day, gid), 0) < 1]
    assert not missing, f"answer cells without a catalogued mistake: {missing}"


def test_a_malformed_alternative_is_named(tmp_path, root):
    """A marker naming a cell that is not an answer cell, a cell filled twice, or a file
    without markers is an error naming the file."""
    days = list_days(root)
    (tmp_path / "day05.py").write_text("# %% day05_learned\nx = 1\n# %% day05_learned\n")
    with pytest.raises(AlternativeError, match="day05.py: cell day05_learned is filled twice"):
        parse(tmp_path / "day05.py", days)
    (tmp_path / "day05.py").write_text("x = 1\n")
    with pytest.raises(AlternativeError, match="no '# %% <grade_id>' cell marker"):
        parse(tmp_path / "day05.py", days)
    (tmp_path / "day99.py").write_text("# %% day99_x\n")
    with pytest.raises(AlternativeError, match="dayNN of a course day"):
        parse(tmp_path / "day99.py", days)
    (tmp_path / "day05.py").write_text("# %% day05_pe_values\nx = 1\n")
    alt = parse(tmp_path / "day05.py", days)
    nb = nbformat.read(str(root / "solutions" / alt.day / f"{alt.day}.ipynb"), 4)
    with pytest.raises(AlternativeError, match="not answer cells"):
        alt.apply(nb, nb)
