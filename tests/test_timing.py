"""Tests for autograder/authoring/timing.py: every day's stated time is one a learner can keep."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.authoring import timing

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "source").glob("day*/day*.ipynb"))
RECORD = json.loads((ROOT / "course" / "record.json").read_text())


def _day(tmp_path: Path, cells, seconds: float = 0.0) -> timing.DayTime:
    folder = tmp_path / "day99_test"
    folder.mkdir(parents=True)
    path = folder / "day99_test.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    record = {"profiles": {"cpu": {"days": {"day99_test": {"notebook_seconds": seconds}}}}}
    return timing.estimate(path, record)


def test_every_day_states_a_time_its_estimate_supports():
    """Is each day's stated time (and its extension's) within the estimate's bounds?"""
    assert len(NOTEBOOKS) == 14
    found = [p for nb in NOTEBOOKS for p in timing.problems(timing.estimate(nb, RECORD))]
    assert found == [], "\n".join(found)


def test_the_readme_table_gives_each_day_its_stated_time():
    """Does the README's table of the 14 days say the time each notebook states?"""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| \d+ \| `(day\d\d_\w+)` \| ([^|]+) \|", readme, re.M))
    assert len(rows) == 14
    for nb in NOTEBOOKS:
        t = timing.estimate(nb, RECORD)
        want = f"{t.stated:.0f} min"
        if t.extension_stated is not None:
            want += f" + {t.extension_stated:.0f} min extension"
        assert rows[t.day].strip() == want, (t.day, rows[t.day], want)


def test_the_estimate_adds_reading_exercises_cells_running_and_questions(tmp_path):
    """Are 240 words, a 10-minute exercise, two code cells (a hidden test left out), 60 s of
    running and 2 self-test questions 2 + 10 + 1 + 1 + 4 = 18 minutes?"""
    hidden = new_code_cell("hidden.check()")
    hidden.metadata["nbgrader"] = {"grade": True, "solution": False, "points": 1}
    answers = new_markdown_cell("word " * 500)
    answers["id"] = "day99-selftest-answers"
    t = _day(tmp_path, [
        new_markdown_cell("**Time:** about 20 minutes.\n" + "word " * 229),
        new_markdown_cell("## Exercise 1 — a thing (10 min)"),
        new_code_cell("x = 1"), new_code_cell("y = 2"), hidden,
        new_markdown_cell("**Self-test.**\n1. Why?\n2. How?"), answers], seconds=60)
    assert t.stated == 20 and t.extension is None
    assert (t.core.words, t.core.exercises, t.core.cells, t.core.questions) == (240, 10, 2, 2)
    assert abs(t.core.minutes - 18) < 1e-9
    assert timing.problems(t) == []


def test_a_stated_time_too_short_or_too_long_is_reported(tmp_path):
    """Is a day stating 10 minutes for 40 caught, and one stating 2 hours for 40?"""
    cells = [new_markdown_cell("## Exercise (40 min)")]
    short = _day(tmp_path / "a", [new_markdown_cell("**Time:** about 10 minutes.")] + cells)
    assert "stated 10 min, estimated 40 min" in timing.problems(short)[0]
    long = _day(tmp_path / "b", [new_markdown_cell("**Time:** about 2 hours.")] + cells)
    assert "more than" in timing.problems(long)[0]
    none = _day(tmp_path / "c", cells)
    assert "no stated time" in timing.problems(none)[0]


def test_an_extension_is_counted_and_stated_apart(tmp_path):
    """Does a '# Extension' cell start a part of its own, with its own stated time?"""
    opening = ("**Time:** about 30 minutes for the core; the extension adds about "
               "20 minutes.")
    t = _day(tmp_path / "a", [
        new_markdown_cell(opening), new_markdown_cell("## Exercise 1 (30 min)"),
        new_markdown_cell("# Extension — optional\n\n## Exercise 2 (20 min)")])
    assert (t.stated, t.extension_stated) == (30, 20)
    assert t.core.exercises == 30 and t.extension.exercises == 20
    assert timing.problems(t) == []
    unstated = _day(tmp_path / "b", [
        new_markdown_cell("**Time:** about 30 minutes."), new_markdown_cell("## Ex (30 min)"),
        new_markdown_cell("# Extension\n\n## Ex (20 min)")])
    assert "no stated extension's time" in timing.problems(unstated)[0]
