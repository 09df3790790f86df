"""What a submission causes is its own: never the machine's ``environment-error``.

The attacks of issue 47 on a blank Day 2 notebook (a 13.5 MB markdown cell, ``schema_version``
99 and ``"task": true`` in an answer cell's nbgrader metadata) made nbgrader or the worker's
read-back fail, and the failure was filed as the machine's: nothing paid, graded again forever,
never a 0 in grades.csv. Each is graded here through the real pipeline. Where nbgrader itself
fails on a submission, or a check breaks on its answers, or its grading process dies twice,
the machine is asked first: the day's answer key is graded the same way, and only when that
fails too is it ``environment-error`` (:mod:`autograder.grading.preflight`).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

from autograder.core.records import write_csv
from autograder.grading import admission, execute, pipeline, preflight, template, worker
from autograder.sandbox import GiB, Limits, MiB

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

DAY = "day02_queries_keys_values"
KiB = 1024
LIMITS = Limits(memory=int(1.5 * GiB), cell_timeout=15, notebook_timeout=60, output=2 * MiB,
                file_size=64 * MiB)


def _answer_cell(nb):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))


def _attacks(root) -> dict:
    blank = S.release(root, DAY)
    big = nbformat.from_dict(blank)
    big.cells.insert(0, nbformat.v4.new_markdown_cell("x" * 13_500_000))
    schema = nbformat.from_dict(blank)
    _answer_cell(schema).metadata.nbgrader["schema_version"] = 99
    task = nbformat.from_dict(blank)
    _answer_cell(task).metadata.nbgrader["task"] = True
    return {"blank": blank, "markdown-13mb": big, "schema-99": schema, "task-true": task}


def _one_line_zero(result) -> None:
    assert result.status != "environment-error", (result.student, result.detail)
    assert result.score == 0.0, (result.student, result.tests)
    assert "\n" not in result.detail and len(result.detail) < 2000, result.detail


# --------------------------------------------------------------------------- fast: the rules

def _submission(root, nb, settings) -> admission.Submission:
    source = nbformat.read(str(root / "source" / DAY / f"{DAY}.ipynb"), 4)
    sub = admission.Submission(DAY, None, source, S.release(root, DAY), settings)
    sub.notebook = nbformat.from_dict(nb)
    return sub


def test_do_the_admission_cap_and_the_readback_limit_agree(root, monkeypatch):
    """A notebook admission accepts, just under its cap when written out, with every notice
    the executor adds to its cells and every byte of output the limits let through in the
    form that takes most room once written (newlines), and each test's message at its cap:
    does the autograded notebook fit what the worker reads back?"""
    settings = {"max_notebook_bytes": 512 * KiB, "limits": {"output": 64 * KiB}}
    cap = admission.notebook_cap(settings)
    # the slack is for what nbgrader adds (metadata): the cells and outputs fit without it
    monkeypatch.setattr(admission, "READBACK_SLACK", 64 * KiB)
    nb = S.release(root, DAY)
    size = len(nbformat.writes(nb).encode())
    nb.cells.append(nbformat.v4.new_code_cell("1"))  # tiny code cells: the most notices
    per_cell = len(nbformat.writes(nb).encode()) - size
    nb.cells += [nbformat.v4.new_code_cell("1")
                 for _ in range((cap - 2 * KiB - size) // per_cell - 1)]
    sub = _submission(root, nb, settings)
    admission.drop_foreign_metadata(sub)
    admission.write_out(sub)                       # admitted
    assert cap - 4 * KiB < len(sub.text.encode()) <= cap
    graded = nbformat.reads(sub.text, 4)
    why = "the notebook ran out of its 600 s time budget before this cell"
    for cell in graded.cells:
        if cell.cell_type == "code":
            execute.GuardedExecute._stop_output(None, cell, why)
            if cell.metadata.get("nbgrader", {}).get("grade"):
                message = execute._capped_message("\x01" * 10**6)
                cell.outputs = [nbformat.v4.new_output("error", ename="CheckFailure",
                                                       evalue=message,
                                                       traceback=[f"CheckFailure: {message}"])]
    execute.begin()
    flood = "\n" * (settings["limits"]["output"] // 2)  # measured as JSON: the whole limit
    for _ in range(2):  # the output limit, then errors past it
        graded.cells[1].outputs.append(nbformat.v4.new_output("stream", name="stdout",
                                                              text=flood))
    written = len(nbformat.writes(graded).encode())
    assert written <= admission.readback_limit(settings, len(sub.text.encode()))
    assert admission.readback_limit(settings) >= admission.readback_limit(settings, cap)
    # the defaults: the 13.5 MB markdown attack is read back whole
    default = {"limits": Limits().to_json()}
    assert admission.readback_limit(default, 13_600_000) > 13_600_000 + 12 * Limits().output


def test_does_a_notebook_that_grows_when_written_out_get_rejected(root):
    """A file under the cap whose cell of newlines grows five-fold once written one line per
    item: rejected with a one-line reason, before nbgrader sees it?"""
    settings = {"max_notebook_bytes": 1 * MiB, "limits": {"output": 64 * KiB}}
    nb = S.release(root, DAY)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("\n" * 300_000))
    assert len(json.dumps(nb)) < 1 * MiB
    with pytest.raises(admission.Refused) as info:
        admission.write_out(_submission(root, nb, settings))
    assert info.value.status == "rejected" and "1 MiB" in info.value.detail
    assert "\n" not in info.value.detail


@pytest.mark.parametrize("meta", ["read-only", ["x"], {"grade_id": ["day02_softmax"]},
                                  {"grade_id": 7, "solution": True}])
def test_is_malformed_metadata_removed_not_a_crash(root, meta):
    """nbgrader metadata that is not a dict, or a grade id that is not text: removed and
    flagged, the notebook admitted?"""
    nb = S.release(root, DAY)
    _answer_cell(nb).metadata["nbgrader"] = meta
    sub = _submission(root, nb, {"limits": {"output": 64 * KiB}})
    for step in admission.STEPS[1:]:
        step(sub)
    assert any("malformed nbgrader metadata" in f for f in sub.flags), sub.flags
    assert sub.text


def test_is_the_courses_metadata_restored_by_grade_id(root):
    """The learner's nbgrader metadata on a cell the course gave never reaches nbgrader: the
    release's comes back, flagged; a cell left as given is not flagged?"""
    nb = S.release(root, DAY)
    cell = _answer_cell(nb)
    cell.metadata.nbgrader.update(schema_version=99, task=True, points=100)
    sub = _submission(root, nb, {})
    admission.drop_foreign_metadata(sub)
    given = _answer_cell(S.release(root, DAY)).metadata.nbgrader
    assert _answer_cell(sub.notebook).metadata.nbgrader == given
    assert sub.flags == [f"cell {sub.notebook.cells.index(_answer_cell(sub.notebook)) + 1} "
                         f"({given['grade_id']}) carried nbgrader metadata other than the "
                         "course's (the course's was restored)"]
    sub = _submission(root, S.reference(root, DAY), {})   # the source's metadata: as given
    admission.drop_foreign_metadata(sub)
    assert sub.flags == []


def test_is_a_judges_message_capped():
    """A check's message quoting a huge answer: at most 2,000 characters, marked as cut?"""
    message = execute._capped_message("1, " * 10**6)
    assert len(message) == execute.MAX_MESSAGE and message.endswith("…(cut)")
    assert execute._capped_message("short") == "short"


def test_does_a_death_count_against_the_machine_only_when_the_control_fails():
    """A notebook whose grading process died twice: kernel-died with 0 when the answer key
    grades afterwards, environment-error when it died or failed too?"""
    job = {"student": "ada", "day": DAY, "total": 10.0, "key": "k",
           "settings": {"sandbox": False}}
    why = "the grading process died (exit code -9) twice on this notebook"
    ok = preflight.after_death(job, why, {"status": "graded", "detail": ""})
    assert (ok["status"], ok["score"]) == ("kernel-died", 0.0) and "answer key grades" in \
        ok["detail"]
    for control in (None, {"status": "environment-error", "detail": "no kernel"}):
        bad = preflight.after_death(job, why, control)
        assert bad["status"] == "environment-error" and "answer key" in bad["detail"]


# --------------------------------------------------------------------------- slow: graded

@pytest.mark.slow
def test_do_the_attacks_earn_a_zero_of_their_own(root, tmp_path):
    """The three attacks on a blank Day 2 notebook, graded as `grade` grades (a worker
    pool): each a 0 that counts in grades.csv, never environment-error?"""
    subs = tmp_path / "subs"
    for name, nb in _attacks(root).items():
        S.put(subs, name, nb, day=DAY)
    results = pipeline.grade(root, subs, days=[DAY], jobs=1, sandbox="auto", limits=LIMITS,
                             results_dir=tmp_path / "out")
    by = {r.student: r for r in results}
    for r in results:
        _one_line_zero(r)
    assert by["markdown-13mb"].status == "graded"
    for name in ("schema-99", "task-true"):
        assert by[name].status == "graded" and "the course's was restored" in by[name].detail
    write_csv(results, [DAY], tmp_path / "grades.csv")
    rows = {row["student_id"]: row for row in csv.DictReader(open(tmp_path / "grades.csv"))}
    assert {s: rows[s][DAY] for s in by} == {s: "0" for s in by}


@pytest.fixture
def in_process(root, monkeypatch):
    """A runner grading each job in this process, as a pool worker would (so that nbgrader
    and the judge can be made to fail on one submission)."""
    for var in ("PYTHONPATH", "JUPYTER_PATH"):   # _worker_setup prepends to both
        monkeypatch.setenv(var, os.environ.get(var, ""))
    monkeypatch.setattr(preflight, "_CONTROL_OK", set())
    saved = dict(worker._WORKER)
    # a short folder: a kernel's IPC socket paths must stay under 107 characters
    base = Path(tempfile.mkdtemp(prefix="tfs-sf-"))

    def runner(tpl, jobs):
        worker._worker_setup(tpl, root, base, False)
        for job in jobs:
            yield worker.grade_one(job)

    template.template_cache(root, [DAY])
    yield runner
    worker._WORKER.clear()
    worker._WORKER.update(saved)
    shutil.rmtree(base, ignore_errors=True)


def _grade(root, tmp_path, runner, students):
    subs = tmp_path / "subs"
    for student in students:
        S.put(subs, student, S.reference(root, DAY), day=DAY)
    return {r.student: r for r in pipeline.grade(root, subs, days=[DAY], sandbox=False,
                                                 limits=LIMITS, runner=runner)}


@pytest.mark.slow
@pytest.mark.parametrize("everyone", [False, True], ids=["one notebook", "every notebook"])
def test_is_a_crash_of_nbgrader_blamed_only_after_the_control(root, tmp_path, monkeypatch,
                                                              in_process, everyone):
    """nbgrader raises on one submission while the answer key grades: rejected with a one-line
    reason; nbgrader raising on everything (the control too): environment-error?"""
    real = worker._run_converter

    def converter(cls, config, day, student):
        if everyone or student == "victim":
            raise RuntimeError("nbgrader failed\non this notebook")
        return real(cls, config, day, student)

    monkeypatch.setattr(worker, "_run_converter", converter)
    r = _grade(root, tmp_path, in_process, ["victim"])["victim"]
    if everyone:
        assert r.status == "environment-error" and "did not grade either" in r.detail
    else:
        _one_line_zero(r)
        assert r.status == "rejected" and "RuntimeError: nbgrader failed on this" in r.detail
        assert "answer key grades" in r.detail


@pytest.mark.slow
def test_is_a_check_that_breaks_on_one_notebook_its_failed_test(root, tmp_path, monkeypatch,
                                                                 in_process):
    """A check that reports a grader bug on this submission's answers but not on the answer
    key's (graded with no seed): that test fails, the rest stands, graded and flagged?"""
    from autograder import judge

    real = judge.run

    def run(call, conn, seed=None):
        verdict = real(call, conn, seed=seed)
        if seed is not None and call.function == "check_softmax_values":
            return replace(verdict, passed=False, internal="grader bug",
                           message="internal error of the grader (not your code): broke")
        return verdict

    monkeypatch.setattr(judge, "run", run)
    r = _grade(root, tmp_path, in_process, ["ada"])["ada"]
    failed = [t.grade_id for t in r.tests if t.points < t.max_points]
    assert r.status == "graded" and failed == ["day02_softmax_values"], (r.detail, r.tests)
    assert r.score == r.max_score - 2
    assert any("the answer key grades" in f for f in r.flags), r.flags


@pytest.mark.slow
def test_does_a_notebook_that_kills_its_worker_twice_get_its_own_status(root, tmp_path):
    """A notebook whose code kills its grading process (no sandbox): after the retry, the
    answer key grades in a fresh worker, so kernel-died with 0, not the machine's fault?"""
    subs = tmp_path / "subs"
    S.put(subs, "killer", S.with_cell(S.release(root, DAY), "import os, signal\n"
                                      "os.kill(os.getppid(), signal.SIGKILL)"), day=DAY)
    [r] = pipeline.grade(root, subs, days=[DAY], jobs=1, sandbox=False, limits=LIMITS)
    assert (r.status, r.score) == ("kernel-died", 0.0), r.detail
    assert "twice" in r.detail and "answer key grades" in r.detail
