"""Tests for course/progress.py: where progress is kept, how it is written and shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course import progress as P

DAYS = ["day01_why_rnns_struggle", "day02_queries_keys_values", "day03_self_attention"]


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("COURSE_PROGRESS_FILE", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)


def _notebook(folder: Path, day: str) -> Path:
    nb = folder / day / f"{day}.ipynb"
    nb.parent.mkdir(parents=True, exist_ok=True)
    nb.write_text("{}", encoding="utf-8")
    return nb


def test_progress_file_sits_in_the_learner_folder(tmp_path):
    """Is the file next to the day folders of a learner's own copy of the course?"""
    nb = _notebook(tmp_path / "my-course", DAYS[1])
    assert P.progress_path(nb) == tmp_path / "my-course" / P.FILENAME


def test_progress_file_never_lands_in_generated_release(tmp_path):
    """In a course repository, does release/ stay pristine (file at the repository root)?"""
    (tmp_path / "source").mkdir()
    (tmp_path / "autograder").mkdir()
    nb = _notebook(tmp_path / "release", DAYS[0])
    assert P.progress_path(nb) == tmp_path / P.FILENAME
    assert P.find_progress_file(nb.parent) == tmp_path / P.FILENAME


@pytest.mark.parametrize("layout", ["repository", "learner copy"])
def test_progress_reads_the_file_selfcheck_wrote_from_anywhere_inside(tmp_path, layout):
    """Wherever the learner runs ``progress`` inside the course (its root, release/, a day
    folder, the notebook itself), is it the file the self-check wrote, and is it named?"""
    course = tmp_path / "course"
    if layout == "repository":
        (course / "source").mkdir(parents=True)
        (course / "autograder").mkdir()
        days_dir = course / "release"
    else:
        days_dir = course
    nb = _notebook(days_dir, DAYS[2])
    written = P.progress_path(nb)
    P.record(written, DAYS[2], 7, 7, {"day03_mask": (2, 2)}, nb)
    for start in {course, days_dir, nb.parent, nb}:
        assert P.find_progress_file(start) == written, start
    text = P.progress_text(nb.parent)
    assert str(written) in text and "7/7" in text.replace(" ", ""), text


def test_progress_from_the_course_root_finds_the_learners_own_folder(tmp_path):
    """A learner who copied the days into their own folder inside the course repository and
    self-checked there: does ``progress`` from the repository root show those points?"""
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "autograder").mkdir()
    nb = _notebook(course / "mywork", DAYS[1])
    written = P.progress_path(nb)
    assert written == course / "mywork" / P.FILENAME
    P.record(written, DAYS[1], 8, 8, {"day02_softmax_values": (2, 2)}, nb)
    assert P.find_progress_file(course) == written


def test_environment_override(tmp_path, monkeypatch):
    """Does COURSE_PROGRESS_FILE win over every rule?"""
    target = tmp_path / "elsewhere.json"
    monkeypatch.setenv("COURSE_PROGRESS_FILE", str(target))
    assert P.progress_path(_notebook(tmp_path, DAYS[0])) == target
    assert P.find_progress_file(tmp_path) == target


def test_record_keeps_other_days_and_is_valid_json(tmp_path):
    """Does recording day 2 keep day 1, and leave no temporary file behind?"""
    path = tmp_path / P.FILENAME
    P.record(path, DAYS[0], 6, 6, {"t1": (6, 6)}, "a.ipynb")
    P.record(path, DAYS[1], 5, 8, {"t2": (3, 3), "t3": (2, 5)}, "b.ipynb")
    P.record(path, DAYS[1], 8, 8, {"t2": (3, 3), "t3": (5, 5)}, "b.ipynb")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data["days"]) == {DAYS[0], DAYS[1]}
    assert data["days"][DAYS[1]]["score"] == 8.0
    assert data["days"][DAYS[1]]["tests"]["t3"] == [5.0, 5.0]
    assert [p.name for p in tmp_path.iterdir()] == [P.FILENAME]
    assert path.stat().st_size < 2000


def test_corrupt_file_is_reported_and_replaced(tmp_path, capsys):
    """Does a damaged progress file give a message, not a crash, and get rewritten?"""
    path = tmp_path / P.FILENAME
    path.write_text("{not json", encoding="utf-8")
    assert P.load(path)["days"] == {}
    assert "ignoring" in capsys.readouterr().out
    P.record(path, DAYS[0], 1, 6, {}, "a.ipynb")
    assert P.load(path)["days"][DAYS[0]]["score"] == 1.0


def test_table_lists_every_day_with_points(tmp_path):
    """Does the table show checked days with points and bars, the others as not checked?"""
    path = tmp_path / P.FILENAME
    P.record(path, DAYS[1], 6, 8, {}, "b.ipynb")
    text = P.format_progress(P.load(path), DAYS, {d: 8.0 for d in DAYS})
    rows = text.splitlines()
    assert any("day02_queries_keys_values" in r and "6/8" in r and "75%" in r for r in rows)
    assert sum("not checked yet" in r for r in rows) == 2
    assert "1 of 3 days self-checked; 6 of 24 points (25%)" in text


def test_show_progress_uses_the_course_days(root, tmp_path, capsys):
    """Does show_progress list the course's own days (from source/) for a learner folder?"""
    P.record(tmp_path / P.FILENAME, DAYS[1], 6, 8, {}, "b.ipynb")
    assert P.show_progress(tmp_path) is None   # printed once, no repr after it (issue 48)
    out = capsys.readouterr().out
    assert "day01_why_rnns_struggle" in out and "6/8" in out
    assert out.count("day01_why_rnns_struggle") == 1


def test_current_notebook_found_from_session_or_folder(tmp_path, monkeypatch):
    """Does selfcheck() find the open notebook from Jupyter's session name or the cwd?"""
    nb = _notebook(tmp_path, DAYS[2])
    monkeypatch.chdir(nb.parent)
    assert P._current_notebook(None) == nb
    other = _notebook(tmp_path, DAYS[0])
    monkeypatch.setenv("JPY_SESSION_NAME", str(other))
    assert P._current_notebook(None) == other
    monkeypatch.chdir(tmp_path)
    assert P._current_notebook("3") == nb
    with pytest.raises(FileNotFoundError, match="does not exist"):
        P._current_notebook("missing.ipynb")


def test_selfcheck_does_nothing_while_nbgrader_grades(monkeypatch, capsys):
    """Would a selfcheck() line in a notebook start a grader inside the grader? (It must not.)"""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert P.selfcheck() is None
    assert "skipped" in capsys.readouterr().out
    assert P.show_progress() is None        # a cell ending in it shows no '' (issue 48)
    assert "not shown" in capsys.readouterr().out


def test_learner_modules_import_no_grading_material(fresh_python):
    """Do course.progress and course.widgets load without the hidden tests or solutions?"""
    code = ("import sys, course.progress, course.widgets; "
            "bad = [m for m in sys.modules if m.startswith(('autograder', 'solutions'))]; "
            "print(bad)")
    done = fresh_python(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_selfcheck_button_is_absent_while_grading_and_a_button_otherwise(monkeypatch):
    """Is the Self-check button a real button for learners, and nothing under nbgrader?"""
    box = P.selfcheck_button("x.ipynb")
    assert box.children[0].description == "Self-check"
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert P.selfcheck_button() is None
