"""Does grading give every broken, hanging or hostile submission a status, and never abort?

One batch of Day 3 submissions (the issue's robustness cases and the known cheats) is graded
once for the module, in the sandbox where bubblewrap works, with small limits so the slow
cases stay short.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.mutants import load_catalog
from autograder.grading import pipeline, template
from autograder.sandbox import GiB, Limits, MiB

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

LIMITS = Limits(memory=int(1.5 * GiB), cell_timeout=15, notebook_timeout=45, output=1 * MiB,
                file_size=64 * MiB)
BATCH_SIZE = 50


# A function the judge calls that hangs, and swallows the interrupt that ends the wait: the
# judge's conversation must still end, so that the later tests are judged as usual.
SWALLOWED_HANG = """
import time
def average_past_loop(x):
    try:
        time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return x * 0
"""


def _before_test(nb, gid: str, code: str):
    nb = nbformat.from_dict(nb)
    i = next(i for i, c in enumerate(nb.cells) if S.grade_id(c) == gid)
    nb.cells.insert(i, nbformat.v4.new_code_cell(code))
    return nb


def _mutant_nb(root):
    m = next(m for m in load_catalog() if m.day == S.DAY)
    return m.apply(S.reference(root))


@pytest.fixture(scope="module")
def batch(root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("robust")
    subs = tmp / "submitted"
    ref = S.reference(root)
    S.put(subs, "ref", ref)
    S.put(subs, "ref-again", ref)
    S.put(subs, "answer-markdown", S.answer_as_markdown(ref))
    S.put(subs, "test-deleted", S.without_test(ref, "day03_mask"))
    S.put(subs, "test-twice", S.duplicated_test(ref, "day03_mask"))
    S.put(subs, "renamed", ref, name=f"{S.DAY} (1).ipynb")
    S.put(subs, "loop", S.with_cell(ref, "while True:\n    pass"))
    S.put(subs, "judged-hang", _before_test(ref, "day03_average_past_loop", SWALLOWED_HANG))
    S.put(subs, "memhog", S.with_cell(
        ref, "import torch\nxs = []\nwhile True:\n    xs.append(torch.zeros(10**6))"))
    S.put(subs, "huge-tensor", S.with_cell(ref, "import torch\nx = torch.empty(10**12)"))
    S.put(subs, "exit", S.with_cell(ref, "import os\nos._exit(1)"))
    S.put(subs, "print-100mb", S.with_cell(
        ref, "for _ in range(100):\n    print('x' * 1_000_000)"))
    S.put(subs, "display-200mb", S.with_cell(
        ref, "from IPython.display import HTML, display\nfor _ in range(20_000):\n"
             "    display(HTML('x' * 10_000))"))
    S.put(subs, "result-100mb", S.with_cell(ref, "'y' * 100_000_000"))
    S.put(subs, "file-2gb", S.with_cell(
        ref, "with open('big.bin', 'wb') as f:\n    for _ in range(2000):\n"
             "        f.write(b'\\0' * 1_000_000)"))
    S.put(subs, "invalid-json", raw="{this is not json")
    S.put(subs, "truncated-json", raw=S.truncated_json(ref))
    S.put(subs, "other-day", S.reference(root, S.OTHER_DAY))
    S.put(subs, "warnings", S.with_warnings(ref))
    (subs / "absent").mkdir()
    mutant = _mutant_nb(root)
    for name, code in S.CHEATS.items():
        S.put(subs, name, S.with_cell(mutant, code))
    S.put(subs, "mutant-alone", mutant)
    # Classmates up to 50 submissions, so that the hanging one ("loop") sits among 50.
    blank = S.release(root)
    for i in range(BATCH_SIZE - len(list(subs.iterdir()))):
        S.put(subs, f"peer-{i:02d}", ref if i % 2 else blank)
    out = tmp / "out"
    t0 = time.monotonic()
    results = pipeline.grade(root, subs, days=[S.DAY], jobs=2, results_dir=out,
                             sandbox="auto", limits=LIMITS)
    return {"by": {r.student: r for r in results}, "results": results, "subs": subs,
            "out": out, "seconds": time.monotonic() - t0, "full": pipeline.max_score(root,
                                                                                     S.DAY)}


def _status(batch, student):
    r = batch["by"][student]
    return r.status, r.score


pytestmark = pytest.mark.slow


def test_every_case_has_its_status(batch):
    """Does each robustness case get the status (and score) the issue expects?"""
    full = batch["full"]
    expected = {
        "ref": ("graded", full),
        "renamed": ("graded", full),
        "test-twice": ("graded", full),
        "answer-markdown": ("graded", full),
        "warnings": ("graded", full),
        "print-100mb": ("graded", full),
        "display-200mb": ("graded", full),
        "result-100mb": ("graded", full),
        "file-2gb": ("graded", full),
        "loop": ("timeout", None),
        "judged-hang": ("timeout", full - 1),   # the later tests are judged as usual
        "memhog": ("memory-limit", None),  # the hog keeps its memory: later tests may fail
        "huge-tensor": ("memory-limit", full),
        "exit": ("kernel-died", 0.0),
        "invalid-json": ("unreadable", 0.0),
        "truncated-json": ("unreadable", 0.0),
        "other-day": ("missing", 0.0),
        "absent": ("missing", 0.0),
    }
    got = {s: _status(batch, s) for s in expected}
    for student, (status, score) in expected.items():
        assert got[student][0] == status, (student, got[student], batch["by"][student].detail)
        if score is not None:
            assert got[student][1] == score, (student, batch["by"][student].tests)


def test_one_hanging_submission_among_50(batch):
    """With one infinite loop among 50 submissions, is every other one graded as usual?"""
    by = batch["by"]
    assert len(by) == BATCH_SIZE
    assert by["loop"].status == "timeout"
    peers = [r for name, r in by.items() if name.startswith("peer-")]
    assert len(peers) >= 20
    for r in peers:
        want = batch["full"] if int(r.student[-2:]) % 2 else 0.0
        assert (r.status, r.score) == ("graded", want), (r.student, r.status, r.detail)


def test_answer_cell_turned_into_markdown_is_restored(batch):
    """Is an answer cell turned into markdown (cells inserted and deleted around it) graded?

    nbgrader restores the type of a graded cell from the gradebook, so the learner's code in
    it still runs and earns its points.
    """
    r = batch["by"]["answer-markdown"]
    assert r.status == "graded" and r.score == batch["full"], r.tests


def test_deleted_test_cell_scores_zero(batch):
    """Does a deleted test cell count 0 with a message, and the others keep their points?"""
    r = batch["by"]["test-deleted"]
    mask = next(t for t in r.tests if t.grade_id == "day03_mask")
    assert r.status == "graded" and mask.points == 0 and "missing" in mask.message
    assert r.score == batch["full"] - mask.max_points


def test_limits_are_reported(batch):
    """Do the truncated output and the file-size limit show in the result's flags?"""
    for student in ("print-100mb", "display-200mb", "result-100mb"):
        assert any("truncated" in f for f in batch["by"][student].flags), student
        nb = nbformat.read(str(batch["out"] / student / f"{S.DAY}.ipynb"), as_version=4)
        kept = len(nbformat.writes(nb))
        assert kept < 3 * MiB, (student, kept)
    assert any("file-size" in f for f in batch["by"]["file-2gb"].flags)


def test_known_cheats_earn_no_more_than_the_honest_mutant(batch, root):
    """Each cheat sits beside a mutant's wrong answer. Hidden tests are judged outside the
    kernel: does each cheat earn exactly what the mutant earns alone, flagged for review?"""
    honest = batch["by"]["mutant-alone"]
    assert honest.score < batch["full"]
    for name in S.CHEATS:
        r = batch["by"][name]
        assert r.status == "graded", (name, r.status, r.detail)
        assert r.score == honest.score, (name, r.tests)
        assert any(f.startswith("review:") for f in r.flags), (name, r.flags)


def test_same_submission_same_result(batch):
    """Do two copies of one notebook get identical scores and messages?"""
    a, b = batch["by"]["ref"], batch["by"]["ref-again"]
    assert (a.score, [t.__dict__ for t in a.tests]) == (b.score, [t.__dict__ for t in b.tests])


def test_results_are_written_and_resume_grades_nothing(batch, root, monkeypatch):
    """Is every result on disk, and does a re-run reuse them all without grading?"""
    files = sorted(p.parent.name for p in batch["out"].glob("*/*.json"))
    assert files == sorted(batch["by"])

    def boom(*a, **k):
        raise AssertionError("nothing should be graded again")

    monkeypatch.setattr(template, "prepare_template", boom)
    again = pipeline.grade(root, batch["subs"], days=[S.DAY], jobs=2,
                           results_dir=batch["out"], sandbox="auto", limits=LIMITS)
    assert {r.student: (r.status, r.score) for r in again} == {
        s: (r.status, r.score) for s, r in batch["by"].items()}


def test_a_changed_submission_changes_its_key(root, tmp_path):
    """Does editing a notebook (or the course's checks) change the resume key?"""
    fp = pipeline.course_fingerprint(root, S.DAY)
    p = S.put(tmp_path, "a", S.reference(root))
    k1 = pipeline.submission_key(p, fp)
    p.write_text(p.read_text().replace("SelfAttention", "SelfAttention ", 1))
    assert pipeline.submission_key(p, fp) != k1
    assert pipeline.submission_key(p, fp + "x") != pipeline.submission_key(p, fp)


def test_a_worker_that_dies_costs_one_status(root, tmp_path):
    """When student code kills its grading process, is the rest of the batch still graded?"""
    subs = tmp_path / "submitted"
    S.put(subs, "killer", S.with_cell(
        S.release(root), "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"))
    S.put(subs, "bad", raw="not a notebook")
    results = pipeline.grade(root, subs, days=[S.DAY], jobs=1, sandbox=False,
                             limits=LIMITS, tamper=False)
    by = {r.student: r for r in results}
    assert by["killer"].status in ("environment-error", "kernel-died"), by["killer"]
    assert by["bad"].status == "unreadable"


def _nb_with_error(ename, evalue):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])]
    nb.cells = [cell]
    return nb


@pytest.mark.parametrize("events, nb, log, want", [
    # out of address space, the kernel often segfaults in a later cell (bwrap exits 139)
    ({"kernel_died": True, "kernel_exit": 139},
     _nb_with_error("RuntimeError", "DefaultCPUAllocator: can't allocate memory"), "",
     "memory-limit"),
    ({"kernel_died": True, "kernel_exit": 134}, _nb_with_error("ValueError", "x"),
     "terminate called after throwing an instance of 'std::bad_alloc'", "memory-limit"),
    ({"kernel_died": True, "kernel_exit": 1}, _nb_with_error("ValueError", "x"), "",
     "kernel-died"),
    # the cgroup reached its memory ceiling: the memory limit, whatever the cells say
    ({"exit": {"oom": True}}, _nb_with_error("ValueError", "x"), "", "memory-limit"),
    ({"timeout": True}, _nb_with_error("ValueError", "x"), "", "timeout"),
    # out of memory, the kernel can no longer answer the judge before the cell's time runs out
    ({"timeout": True}, _nb_with_error("MemoryError", ""), "", "memory-limit"),
])
def test_status_from_events(events, nb, log, want):
    """Does each way a kernel can fail map to the status an instructor would expect?"""
    status, notes = pipeline._status_from(events, nb, log)
    assert status == want, notes
    assert notes


def test_exit_words_name_the_signal():
    """Is a crash reported by its signal name (bwrap exits 128+N), not a bare number?"""
    assert pipeline._exit_words(139) == "killed by SIGSEGV"
    assert pipeline._exit_words(-9) == "killed by SIGKILL"
    assert pipeline._exit_words(1) == "exit code 1"
    assert pipeline._exit_words(None) == "exit status unknown"


def test_kernel_cap_notice_is_recognised():
    """Does the executor look for the very words the kernel's start-up cap prints?"""
    from autograder.grading import execute
    from autograder.sandbox import kernel_startup

    assert execute.KERNEL_CAP_NOTICE in kernel_startup.STARTUP
