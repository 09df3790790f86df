"""Does the class report count statuses, pass rates and the most frequent diagnoses?"""

from __future__ import annotations

import json

from autograder.grading.pipeline import Result, TestResult
from autograder.grading.report import diagnosis_key, load_results, summarize, write_report

DAY = "day04_multi_head_attention"


def _results():
    out = []
    for i in range(8):
        wrong = i < 3  # 3 of 8 = 38% scaled by sqrt(d_model)
        tests = [TestResult("day04_scale", 0.0 if wrong else 2.0, 2.0,
                            f"CheckFailure: max error {0.1 * (i + 1):.3f}: you scaled by "
                            "sqrt(d_model); scale by sqrt(d_k) per head" if wrong else ""),
                 TestResult("day04_shapes", 1.0, 1.0)]
        out.append(Result(f"s{i}", DAY, "graded", sum(t.points for t in tests), 3.0, tests))
    out.append(Result("late", DAY, "missing", 0.0, 3.0))
    out.append(Result("loop", DAY, "timeout", 0.0, 3.0,
                      [TestResult("day04_scale", 0.0, 2.0, "NotExecuted: time budget"),
                       TestResult("day04_shapes", 0.0, 1.0, "NotExecuted: time budget")]))
    return out


def test_diagnoses_group_across_numbers():
    """Do two messages that differ only in numbers count as one diagnosis?"""
    a = diagnosis_key("CheckFailure: max error 0.100: you scaled by sqrt(d_model)")
    b = diagnosis_key("CheckFailure: max error 0.250: you scaled by sqrt(d_model)")
    assert a == b and "CheckFailure" not in a


def test_failures_group_by_the_first_step_that_differs():
    """Two students whose output differs at different elements, with the weights right: one
    diagnosis, the step their message names."""
    msg = ("CheckFailure: output differs from the expected values (rtol=1e-06, atol=1e-09): max "
           "abs difference {} at index (0, 1)\nStep: attn_weights matches; output does not: "
           "the mistake is after the softmax.\nWhere: only indices {} of dimension 1 differ")
    a, b = diagnosis_key(msg.format(0.5, 1)), diagnosis_key(msg.format(0.25, 3))
    assert a == b == "attn_weights matches; output does not: the mistake is after the softmax."


def test_summary_shares_and_pass_rates():
    """Is the top diagnosis 3 of the 9 kernel-run submissions, with its pass rate beside it?"""
    s = summarize(_results())
    top = s["frequent"][0]
    assert top["grade_id"] == "day04_scale" and "sqrt(d_model)" in top["diagnosis"]
    assert top["count"] == 3 and abs(top["share"] - 3 / 9) < 1e-9
    assert abs(s["pass_rate"][f"{DAY}/day04_scale"] - 5 / 9) < 1e-9
    assert s["status"][DAY]["missing"] == 1 and s["status"][DAY]["timeout"] == 1


def test_report_writes_html_and_pngs(tmp_path):
    """Are report.html and its three PNG figures written from a results folder?"""
    results = tmp_path / "results"
    for r in _results():
        (results / r.student).mkdir(parents=True, exist_ok=True)
        (results / r.student / f"{r.day}.json").write_text(json.dumps(r.to_json()))
    page = write_report(results, tmp_path / "report")
    html = page.read_text()
    for png in ("scores.png", "pass_rate.png", "diagnoses.png"):
        assert (tmp_path / "report" / png).stat().st_size > 1000
        assert png in html
    assert "sqrt(d_model)" in html and "33%" in html


def test_diagnoses_group_by_what_the_message_names():
    """Failures of two tests whose messages name the same mistake (their Hint:) count as one
    diagnosis, once per submission; a generic first line does not become the label."""
    generic = ("CheckFailure: {} differs from the expected values (rtol=1e-06): max abs "
               "difference {:.3f} at index (0, 1).\nHint: you scaled by sqrt(d_model); scale "
               "by sqrt(d_k) per head")
    out = []
    for i in range(4):
        tests = [TestResult("day04_mha_values", 0.0, 2.0, generic.format("output", 0.1 * i)),
                 TestResult("day04_mha_matches_torch", 0.0, 2.0,
                            generic.format("MHA output", 0.2 * i))]
        out.append(Result(f"s{i}", DAY, "graded", 0.0, 4.0, tests))
    where = ("CheckFailure: x differs from the expected values: max abs difference 1.2 at "
             "index (3,).\nWhere: only indices 3 of dimension 0 (size 4) differ")
    out.append(Result("w", DAY, "graded", 0.0, 4.0, [TestResult("day04_mask", 0.0, 2.0, where)]))
    top, second = summarize(out)["frequent"][:2]
    assert top["diagnosis"].startswith("you scaled by sqrt(d_model)") and top["count"] == 4
    assert top["grade_id"] == "day04_mha_matches_torch, day04_mha_values"
    assert second["diagnosis"].startswith("only indices # of dimension #")
    assert all("differs from the expected" not in x["diagnosis"]
               for x in summarize(out)["frequent"])


def test_blank_notebooks_are_not_started_not_a_diagnosis(root, tmp_path):
    """Do notebooks whose only failures are stubs count as "not started" (no diagnosis row),
    does a diagnosis show as a student read it (numbers kept, no '#'), and are only the days
    with a submission listed, under their titles?"""
    stub = "NotImplementedError: "
    out = _results()
    for i in range(3):
        out.append(Result(f"b{i}", DAY, "graded", 1.0, 3.0,
                          [TestResult("day04_scale", 0.0, 2.0, stub),
                           TestResult("day04_shapes", 1.0, 1.0)]))
    out.append(Result("x", "day05_positional_encoding", "missing", 0.0, 4.0))
    s = summarize(out)
    assert s["blank"] == {DAY: 3} and s["days"] == [DAY]
    assert all("NotImplementedError" not in x["diagnosis"] for x in s["frequent"])
    results = tmp_path / "results"
    for r in out:
        (results / r.student).mkdir(parents=True, exist_ok=True)
        (results / r.student / f"{r.day}.json").write_text(json.dumps(r.to_json()))
    page = write_report(results, tmp_path / "report", root).read_text()
    assert "Day 4: " in page and "Day 5" not in page and "not started" in page
    assert "max error 0.100: you scaled by sqrt(d_model)" in page and "#" not in page.split(
        "Most frequent diagnoses", 1)[1]


def test_results_of_another_schema_are_never_read(tmp_path):
    """A result written by another version of the grader (no schema, or another one) is not
    read with fields dropped or defaulted: from_json refuses it, the report leaves it out,
    and grade's resume grades it again (pipeline.grade treats a refused result as absent)."""
    import pytest

    from autograder.core.records import RESULT_SCHEMA

    r = _results()[0]
    assert r.to_json()["schema"] == RESULT_SCHEMA
    assert Result.from_json(r.to_json()) == r
    for schema in (None, RESULT_SCHEMA + 1):
        data = {k: v for k, v in r.to_json().items() if k != "schema"}
        if schema is not None:
            data["schema"] = schema
        with pytest.raises(ValueError, match="schema"):
            Result.from_json(data)
    results = tmp_path / "results" / "old"
    results.mkdir(parents=True)
    (results / f"{DAY}.json").write_text(json.dumps({"student": "old", "day": DAY,
                                                     "status": "graded", "score": 3.0}))
    assert summarize(load_results(tmp_path / "results"))["n"] == 0


def test_a_failure_is_made_one_way_and_written_as_text():
    """Result.failed: no points, the job's total and key, the status an enum that files hold
    as its text."""
    from autograder.core.records import Status

    job = {"student": "ann", "day": DAY, "total": 3.0, "key": "k1", "settings": {}}
    r = Result.failed(job, Status.TIMEOUT, "took too long")
    assert (r.score, r.max_score, r.key, r.detail) == (0.0, 3.0, "k1", "took too long")
    assert r.status == "timeout" and json.loads(json.dumps(r.to_json()))["status"] == "timeout"
    assert Result.from_json(json.loads(json.dumps(r.to_json()))).status is Status.TIMEOUT
