"""A grader's bad day costs no student a point: each fault of the grading machine found, fed to
the status logic as a synthetic graded notebook and verdicts (no kernel runs).

The routes:

- a notebook cell's ``load_mnist()`` raises DatasetUnavailable in the kernel (the later tests
  then say "name 'mnist' is not defined"), and this machine confirms the data is missing;
- a check's trusted copy (``trusted_mnist()``, in the judge's process) does not load: the
  judge reports its own failure (``internal``), or, until it does, a verdict message
  "DatasetUnavailable: ..." that this machine confirms;
- a bug of the grader that the judge catches (``internal``);
- nbgrader or the machinery failing (already ``environment-error`` in the worker and pool).

Each gives ``environment-error`` with what failed and its fix, pays nothing (an empty cell in
grades.csv), and is graded again by the next ``grade``; ``grade``, ``verify`` and ``demo``
check the datasets, bubblewrap and the template before the first notebook.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest

from autograder.__main__ import main
from autograder.core.course import PipelineError
from autograder.core.records import Result, write_csv
from autograder.grading import pipeline, preflight, score, template
from course import data

DAY = "day08_mnist_as_sequences"
NAME_ERROR = "name 'mnist' is not defined: run the cell that defines it"


@pytest.fixture
def shipped(tmp_path, monkeypatch, no_network):
    """An empty cache, no mirror, no network: only the copy shipped with the course."""
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(data.MIRROR_ENV, raising=False)


@pytest.fixture
def no_data(shipped, tmp_path, monkeypatch):
    """...and no shipped copy either: the course's data is nowhere on this machine."""
    monkeypatch.setattr(data, "SHIPPED_DIR", tmp_path / "no-shipped-copy")


def _unavailable(name: str = "mnist-test-images") -> str:
    """The message course.data gives for ``name`` on this machine (it must fail)."""
    with pytest.raises(data.DatasetUnavailable) as info:
        data.fetch(name, offline=True)
    return str(info.value)


def _verdict(message: str = "", passed: bool = False, internal: str = "") -> dict:
    return {"passed": passed, "message": message, "names": ["mnist"], "kind": "value",
            "forbidden": [], "stopped": "", "internal": internal}


def _graded(load_error: tuple[str, str] | None, test_message: str) -> nbformat.NotebookNode:
    """Cell 1 loads the data (with ``load_error`` as its (ename, evalue)); cell 2 is a test."""
    nb = nbformat.v4.new_notebook()
    load = nbformat.v4.new_code_cell("mnist = load_mnist()")
    if load_error:
        load.outputs = [nbformat.v4.new_output("error", ename=load_error[0],
                                               evalue=load_error[1], traceback=[])]
    test = nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\n...\n### END HIDDEN TESTS")
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True,
                                 "grade_id": "day08_split", "points": 2}
    if test_message:
        test.outputs = [nbformat.v4.new_output("error", ename="CheckFailure",
                                               evalue=test_message, traceback=[])]
    nb.cells = [load, test]
    return nb


def _events(judged: dict) -> dict:
    return {"timeout": False, "kernel_died": False, "kernel_exit": None,
            "output_truncated": False, "judged": judged, "exit": {}}


def _must_not_check(names):
    raise AssertionError(f"data_check called for {names}")


def _assert_data_fix(reason: str) -> None:
    for needle in ("DatasetUnavailable", "not the notebook", "python -m autograder fetch-data",
                   "COURSE_DATA_DIR", "git checkout -- course/datasets",
                   "python -m autograder grade` again"):
        assert needle in reason, (needle, reason)


# --------------------------------------------------------------------------- the notebook

@pytest.mark.parametrize("sandboxed", [None, True, False], ids=["host", "sandbox", "no sandbox"])
def test_is_a_dataset_the_kernel_could_not_load_the_machines_fault(no_data, sandboxed):
    """The notebook's load_mnist() raised DatasetUnavailable and the tests then found no
    `mnist`: with the data nowhere on this machine (as the host, or as a sandboxed or
    unsandboxed kernel sees it), is it environment-error with what failed and the fix?"""
    nb = _graded(("DatasetUnavailable", _unavailable()), NAME_ERROR)
    check = None if sandboxed is None else (
        lambda names: preflight.kernel_data_problems(names, sandboxed))
    status, reasons = score._status_from(_events({"day08_split": _verdict(NAME_ERROR)}), nb,
                                         "", check)
    assert status == "environment-error"
    [reason] = reasons
    _assert_data_fix(reason)
    assert "cell 1" in reason and "t10k-images-idx3-ubyte" in reason
    assert "on this machine: dataset mnist" in reason


def test_is_a_dataset_error_the_machine_does_not_confirm_graded_as_it_ran(shipped):
    """Anyone's code can raise an exception named DatasetUnavailable: when this machine's copy
    (the shipped one) verifies, is the notebook graded as it ran, flagged for review?"""
    nb = _graded(("DatasetUnavailable", "could not get the 'mnist' dataset file "
                                        "'t10k-images-idx3-ubyte'."), NAME_ERROR)
    status, reasons = score._status_from(_events({"day08_split": _verdict(NAME_ERROR)}), nb, "")
    assert status == "graded"
    assert any(r.startswith("review: cell 1 raised DatasetUnavailable") and "verifies" in r
               for r in reasons), reasons


def test_does_the_kernels_view_decide_not_the_hosts_cache(shipped, tmp_path, monkeypatch):
    """The host's cache holds good copies but its mirror (which the sandbox shows the kernel
    instead) a damaged one: is the kernel's view, not the host's, what is checked?"""
    data.fetch("mnist-test-labels")                    # the host's cache: a verified copy
    mirror = tmp_path / "mirror" / "mnist"
    mirror.mkdir(parents=True)
    (mirror / "t10k-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b not gzip")
    monkeypatch.setenv(data.MIRROR_ENV, str(tmp_path / "mirror"))
    assert preflight.fetch_problems(["mnist-test-labels"], offline=True) == []
    [problem] = preflight.kernel_data_problems(["mnist-test-labels"], sandboxed=True)
    assert "mnist" in problem and "corrupted" in problem


def test_is_optional_data_only_said(no_data):
    """CIFAR-10 (optional, downloaded on demand) unavailable in the kernel: graded, with a
    note, and nothing checked on this machine?"""
    nb = _graded(("DatasetUnavailable", _unavailable("cifar10")), "")
    status, reasons = score._status_from(_events({"day08_split": _verdict(passed=True)}), nb,
                                         "", _must_not_check)
    assert status == "graded"
    assert any(r.startswith("optional data was unavailable while grading (cell 1") and
               "no test needs it" in r for r in reasons), reasons


def test_does_an_environment_fault_come_before_the_kernels_death(no_data):
    """A kernel that died after its data failed to load: the machine's fault first (graded
    again once fixed, when the death gets its own status)?"""
    nb = _graded(("DatasetError", _unavailable()), "")
    events = _events({}) | {"kernel_died": True, "kernel_exit": -9}
    status, reasons = score._status_from(events, nb, "")
    assert status == "environment-error" and "DatasetError" in reasons[0]


# --------------------------------------------------------------------------- the judge

def test_is_the_judges_own_dataset_failure_the_machines_fault(no_data):
    """trusted_mnist() raised in the judge's process: with the judge saying so (internal),
    is it environment-error with the data fix, without asking the data again?"""
    message = f"DatasetUnavailable: {_unavailable()}"
    nb = _graded(None, message)
    judged = {"day08_split": _verdict(message, internal="dataset")}
    status, reasons = score._status_from(_events(judged), nb, "", _must_not_check)
    assert status == "environment-error"
    _assert_data_fix(reasons[0])
    assert "the judge could not run a check on this machine: day08_split" in reasons[0]


def test_does_the_judge_report_its_own_missing_data_as_the_machines_fault(no_data, monkeypatch):
    """The real route, without a kernel: Day 8's check loads its trusted copy of MNIST in the
    judge, which fails here; does the verdict, scored, give environment-error?"""
    from autograder import judge
    from autograder.judge import checks, remote
    from course import agent

    agent.reset()
    monkeypatch.setattr(agent, "USER_NS", {"normalization_stats": lambda images: (0.0, 1.0),
                                           "MEAN": 0.1, "STD": 0.3, "mnist": None})
    call = judge.HiddenCall("autograder.judge.checks.day08", "check_normalization",
                            [("name", n) for n in ("normalization_stats", "MEAN", "STD",
                                                   "mnist")])
    checks.trusted_mnist.cache_clear()
    try:
        verdict = judge.run(call, remote.Conn(agent.handle))
    finally:
        checks.trusted_mnist.cache_clear()  # later tests load the real copy again
        agent.reset()
    assert not verdict.passed and "DatasetUnavailable" in verdict.message
    judged = {"day08_normalization": verdict.to_json()}
    status, reasons = score._status_from(_events(judged), _graded(None, verdict.message), "")
    assert status == "environment-error"
    _assert_data_fix(reasons[0])


@pytest.mark.parametrize("confirmed", [True, False], ids=["data missing", "data present"])
def test_is_a_verdict_naming_a_dataset_error_checked_here(tmp_path, monkeypatch, shipped,
                                                          confirmed):
    """A verdict "DatasetUnavailable: ..." not marked internal (the judge's message, or the
    learner's code raising an exception of that name through call()): environment-error only
    when this machine confirms the data is missing?"""
    if confirmed:
        monkeypatch.setattr(data, "SHIPPED_DIR", tmp_path / "no-shipped-copy")
    message = ("DatasetUnavailable: could not get the 'tinyshakespeare' dataset file "
               "'input.txt'.")
    nb = _graded(None, message)
    status, reasons = score._status_from(_events({"day08_split": _verdict(message)}), nb, "")
    if confirmed:
        assert status == "environment-error"
        _assert_data_fix(reasons[0])
        assert "dataset tinyshakespeare (input.txt) unavailable" in reasons[0]
    else:
        assert status == "graded" and any(r.startswith("review: day08_split raised")
                                          for r in reasons), reasons


def test_is_a_bug_of_the_grader_never_the_learners():
    """A check that failed by the grader's own fault (internal "grader bug"): environment-error
    naming the check, not a lost point?"""
    message = "internal error of the grader (not your code): compare got a kernel tensor"
    nb = _graded(None, message)
    judged = {"day08_split": _verdict(message, internal="grader bug")}
    status, reasons = score._status_from(_events(judged), nb, "", _must_not_check)
    assert status == "environment-error"
    assert "day08_split: internal error of the grader" in reasons[0]
    assert "a bug of the grader" in reasons[0] and "grade` again" in reasons[0]


def test_does_an_honest_notebook_stay_graded(shipped):
    """No dataset error anywhere: graded, no data looked at?"""
    nb = _graded(None, "")
    status, reasons = score._status_from(_events({"day08_split": _verdict(passed=True)}), nb,
                                         "", _must_not_check)
    assert (status, reasons) == ("graded", [])


# --------------------------------------------------------------------------- what it pays

def test_does_an_environment_error_leave_its_grade_empty(tmp_path):
    """In grades.csv, is an environment-error neither 0 nor counted in the totals?"""
    results = [Result("ada", DAY, "environment-error", 0.0, 10.0, detail="dataset ..."),
               Result("ada", "day09_training_loop", "graded", 7.0, 10.0),
               Result("bob", DAY, "graded", 4.0, 10.0)]
    path = tmp_path / "grades.csv"
    write_csv(results, [DAY, "day09_training_loop"], path)
    rows = {r["student_id"]: r for r in csv.DictReader(open(path))}
    assert rows["ada"][DAY] == "" and rows["ada"]["total"] == "7"
    assert rows["ada"]["max_total"] == "10" and rows["bob"][DAY] == "4"


def test_is_an_environment_error_graded_again(root, tmp_path, monkeypatch):
    """A re-run of grade: is the environment-error result graded again while an unchanged
    graded result is kept?"""
    from autograder.grading import pipeline, template

    monkeypatch.setenv("TFS_GRADING_CACHE", str(tmp_path / "grading-cache"))
    monkeypatch.setattr(template, "template_cache", lambda root, days: tmp_path / "template")
    nb = root / "release" / DAY / f"{DAY}.ipynb"
    work = [("ada", DAY, nb), ("bob", DAY, nb)]
    out = tmp_path / "results"
    sent: list[list[str]] = []

    def runner(template, jobs):
        sent.append(sorted(j["student"] for j in jobs))
        for j in jobs:
            status = "environment-error" if j["student"] == "ada" and len(sent) == 1 \
                else "graded"
            yield Result(j["student"], j["day"], status, 0.0, j["total"],
                         key=j["key"]).to_json()

    first = pipeline.grade(root, None, days=[DAY], work=work, results_dir=out, sandbox=False,
                           runner=runner)
    assert {r.student: r.status for r in first} == {"ada": "environment-error",
                                                    "bob": "graded"}
    again = pipeline.grade(root, None, days=[DAY], work=work, results_dir=out, sandbox=False,
                           runner=runner)
    assert sent == [["ada", "bob"], ["ada"]]
    assert {r.student: r.status for r in again} == {"ada": "graded", "bob": "graded"}
    saved = json.loads((out / "ada" / f"{DAY}.json").read_text())
    assert saved["status"] == "graded"


# --------------------------------------------------------------------------- before grading

def test_which_days_need_which_data(root):
    """Are the datasets each day loads (in its notebook or its checks) found?"""
    need = {d: preflight.needed_datasets(root, [d]) for d in
            ("day01_why_rnns_struggle", DAY, "day13_training_tinygpt")}
    assert need == {"day01_why_rnns_struggle": [],
                    DAY: ["mnist-test-images", "mnist-test-labels"],
                    "day13_training_tinygpt": ["tinyshakespeare"]}


def test_does_preflight_say_everything_missing_at_once(root, no_data, monkeypatch):
    """No bubblewrap and no data: one message with both problems and their fixes, and no
    template built for a batch that cannot run?"""
    from autograder import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: (False, "bwrap not found"))
    monkeypatch.setattr(template, "template_cache", _must_not_check)
    with pytest.raises(PipelineError) as info:
        preflight.check(root, ["day01_why_rnns_struggle", DAY, "day13_training_tinygpt"],
                        sandbox=True)
    message = str(info.value)
    assert message.startswith("nothing was graded")
    for needle in ("bwrap not found", "apt-get install bubblewrap", "--no-sandbox",
                   "dataset mnist (t10k-images-idx3-ubyte) unavailable",
                   "dataset tinyshakespeare (input.txt) unavailable", "fetch-data",
                   "these need the data: day08, day13"):
        assert needle in message, needle


def test_does_preflight_say_when_the_template_cannot_be_built(root, shipped, monkeypatch):
    """nbgrader cannot generate the assignment: said before any notebook, with the command
    that shows which notebook fails; and with everything ready, it returns quietly?"""

    def broken(root, days):
        raise RuntimeError("generate_assignment failed on day08")

    monkeypatch.setattr(template, "template_cache", broken)
    with pytest.raises(PipelineError, match="grading template cannot be built.*day08.*"
                                            "python -m autograder build"):
        preflight.check(root, [DAY], sandbox=False)
    made = []
    monkeypatch.setattr(template, "template_cache", lambda root, days: made.append(days))
    assert preflight.check(root, [DAY], sandbox=False) is False
    assert made == [[DAY]]


def test_does_grade_stop_before_the_first_notebook(root, no_data, tmp_path, monkeypatch,
                                                   capsys):
    """`grade` with the data missing: exit status 2, the message, nothing graded?"""

    subs = tmp_path / "subs" / "ada" / DAY
    subs.mkdir(parents=True)
    (subs / f"{DAY}.ipynb").write_text((root / "release" / DAY / f"{DAY}.ipynb").read_text())
    monkeypatch.setattr(pipeline, "grade", _must_not_check)
    rc = main(["grade", str(tmp_path / "subs"), "--no-sandbox", "--root", str(root),
               "--output", str(tmp_path / "grading")])
    err = capsys.readouterr().err
    assert rc == 2 and "nothing was graded" in err and "dataset mnist" in err
    assert not (tmp_path / "grading").exists()


def test_does_fetch_data_fill_the_cache_or_say_what_is_missing(no_data, monkeypatch, capsys):
    """`fetch-data`: exit 1 naming the missing datasets and the fix; exit 0 once the shipped
    copy is back, each file verified in the cache?"""
    assert main(["fetch-data"]) == 1
    err = capsys.readouterr().err
    assert "dataset mnist (t10k-labels-idx1-ubyte) unavailable" in err and "COURSE_DATA_DIR" in err
    monkeypatch.setattr(data, "SHIPPED_DIR", Path(preflight.__file__).parents[2] / "course"
                        / "datasets")
    assert main(["fetch-data"]) == 0
    out = capsys.readouterr().out
    assert "tinyshakespeare: verified (sha256:" in out
    assert (data.cache_dir() / "mnist" / "t10k-images-idx3-ubyte").is_file()
