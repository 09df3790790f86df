"""Does the feedback page show the learner's code and diagnoses, and never the hidden tests?"""

from __future__ import annotations

import json

import nbformat

from autograder.grading.feedback import render, write_feedback
from autograder.grading.pipeline import Result, TestResult, graded_cells

DAY = "day03_self_attention"


def _autograded_like(root):
    """The source notebook stands in for an autograded one: it holds the hidden tests."""
    nb = nbformat.read(str(root / "source" / DAY / f"{DAY}.ipynb"), as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "day03_mask":
            cell.outputs = [nbformat.v4.new_output(
                "error", ename="CheckFailure", evalue="the mask was added after softmax",
                traceback=["  File autograder/judge/checks/day03.py, line 40, in check_mask",
                           "    hidden.check_mask(SelfAttention)"])]
    return nb


def _result(root):
    nb = _autograded_like(root)
    tests = [TestResult(g, 0.0 if g == "day03_mask" else p, p,
                        "CheckFailure: the mask was added after softmax; mask the scores"
                        if g == "day03_mask" else "") for g, p in graded_cells(nb)]
    return Result("alice", DAY, "graded", sum(t.points for t in tests),
                  sum(t.max_points for t in tests), tests), nb


def test_feedback_never_shows_hidden_tests(root):
    """Is no hidden-test source or traceback in the page, while each test's result is?"""
    result, nb = _result(root)
    page = render(result, nb)
    assert "BEGIN HIDDEN TESTS" not in page and "hidden.check" not in page
    assert "autograder.judge.checks" not in page and "Traceback" not in page
    assert "class SelfAttention" in page  # the learner's own code
    assert "mask the scores" in page  # the diagnosis
    for gid, _ in graded_cells(nb):
        assert f'<span class="id">{gid}</span>' in page


def test_feedback_opens_with_points_per_exercise_in_readable_names(root):
    """With the course at hand, does the page open with the day's title and a points table
    per exercise, name each test by what it checks, and drop empty reprs (a stray '')?"""
    result, nb = _result(root)
    nb.cells.insert(1, nbformat.v4.new_code_cell("show()"))
    nb.cells[1].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "''"}),
                           nbformat.v4.new_output("stream", text="x" * 400)]
    page = render(result, nb, root=root)
    assert "<h1>Day 3: " in page and "Points per exercise" in page
    table = page.split("<h2>Points per exercise</h2>", 1)[1].split("</table>", 1)[0]
    assert table.count("<tr>") >= 3 and "total" in table
    assert f"{result.score:g} / {result.max_score:g}" in table
    assert "the mask was added after softmax; mask the scores" in page
    assert "&#39;&#39;" not in page and "x" * 400 in page          # long lines wrap (CSS)
    assert "white-space:pre-wrap" in page


def test_feedback_for_a_missing_notebook_explains_the_status(root, tmp_path):
    """Does a student without a notebook still get a page that says why?"""
    results = tmp_path / "results"
    (results / "bob").mkdir(parents=True)
    r = Result("bob", DAY, "missing", 0.0, 7.0, detail="no day03_self_attention.ipynb submitted")
    (results / "bob" / f"{DAY}.json").write_text(json.dumps(r.to_json()))
    pages = write_feedback(results, tmp_path / "fb")
    html = pages[0].read_text()
    assert pages[0].name == f"{DAY}.html" and "No notebook was found" in html
    assert "0 / 7" in html


def test_feedback_escapes_learner_text(root):
    """Is HTML in the learner's code shown as text, not run as markup?"""
    result, nb = _result(root)
    nb.cells.insert(1, nbformat.v4.new_code_cell("s = '<script>alert(1)</script>'"))
    page = render(result, nb)
    assert "<script>alert" not in page and "&lt;script&gt;" in page
