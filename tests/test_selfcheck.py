"""Tests for autograder/selfcheck.py: a learner grades one notebook and sees what to fix."""

from __future__ import annotations

import hashlib
import json
import shutil

import nbformat
import pytest

from autograder import pipeline
from autograder import selfcheck as S
from autograder.__main__ import main

DAY2 = "day02_queries_keys_values"


def test_day_is_read_from_folder_or_file_name(root, tmp_path):
    """Is the day found from the folder, from a renamed file, and refused when unknown?"""
    assert S.day_of(root / "release" / DAY2 / f"{DAY2}.ipynb", root) == DAY2
    assert S.day_of(tmp_path / "day02-copy.ipynb", root) == DAY2
    with pytest.raises(pipeline.PipelineError, match="cannot tell which day"):
        S.day_of(tmp_path / "homework.ipynb", root)


def test_tests_are_grouped_under_their_exercise(root):
    """Is every Day 2 test cell mapped to its exercise heading and its visible comment?"""
    tests = S.test_map(root, DAY2)
    assert tests["day02_softmax_values"].exercise.startswith("Exercise 1")
    assert tests["day02_attention_mask"].exercise.startswith("Exercise 2")
    assert "masks" in tests["day02_attention_mask"].checks
    assert "BEGIN" not in tests["day02_attention_mask"].checks


def test_explanations_for_unfinished_work():
    """Are NotImplementedError and NameError turned into advice, CheckFailure kept as is?"""
    assert "not written yet" in S.explain("NotImplementedError: ")
    assert "Restart & Run All" in S.explain("NameError: name 'softmax' is not defined")
    assert S.explain("CheckFailure: fill with -inf") == "fill with -inf"


def test_report_prints_points_status_and_diagnosis(root, tmp_path):
    """Does the report show per-exercise points, pass/fail and the failing test's diagnosis?"""
    nb = tmp_path / f"{DAY2}.ipynb"
    nb.write_text("{}", encoding="utf-8")
    tests = [pipeline.TestResult("day02_softmax_values", 2, 2),
             pipeline.TestResult("day02_softmax_stable", 1, 1),
             pipeline.TestResult("day02_attention_values", 3, 3),
             pipeline.TestResult("day02_attention_mask", 0, 2,
                                 "CheckFailure: masked positions still get weight")]
    result = pipeline.Result("learner", DAY2, "graded", 6, 8, tests)
    text, groups = S.format_report(result, S.test_map(root, DAY2), nb, 3.0, None)
    assert "3/3 points" in text and "3/5 points" in text
    assert "✘ FAIL  0/2  day02_attention_mask" in text
    assert "diagnosis: masked positions still get weight" in text
    assert "Total: 6/8 points (75%), 1 test to fix" in text
    assert len(groups) == 2


def test_cli_refuses_a_missing_notebook(tmp_path, capsys):
    """Does `selfcheck` on a path that does not exist say so and exit 2?"""
    assert main(["selfcheck", str(tmp_path / "nope.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_one_bug_is_diagnosed_and_progress_saved(root, tmp_path, capsys):
    """Does a Day 2 notebook with one bug lose exactly that test, with the right diagnosis,
    while the notebook itself is left byte-for-byte unchanged?"""
    folder = tmp_path / "my-course" / DAY2
    folder.mkdir(parents=True)
    nb_path = folder / f"{DAY2}.ipynb"
    shutil.copy2(root / "solutions" / DAY2 / f"{DAY2}.ipynb", nb_path)
    nb = nbformat.read(str(nb_path), as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            cell.source = cell.source.replace('masked_fill(~mask, float("-inf"))',
                                              "masked_fill(~mask, 0.0)")
    nbformat.write(nb, str(nb_path))
    before = hashlib.sha256(nb_path.read_bytes()).hexdigest()

    assert main(["selfcheck", str(nb_path)]) == 1
    out = capsys.readouterr().out
    assert hashlib.sha256(nb_path.read_bytes()).hexdigest() == before
    assert "✘ FAIL  0/2  day02_attention_mask" in out and "-inf" in out
    assert "Total: 6/8 points (75%), 1 test to fix" in out
    saved = json.loads((tmp_path / "my-course" / ".course_progress.json").read_text())
    assert saved["days"][DAY2]["score"] == 6.0
    assert sorted(p.name for p in folder.iterdir()) == [nb_path.name]

    assert main(["progress", str(tmp_path / "my-course")]) == 0
    assert "6/8" in capsys.readouterr().out
