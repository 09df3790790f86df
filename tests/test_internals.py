"""No answer in the graded kernel: the stand-ins a kernel holds, and the host's review of cells
that reach into the course's internals (issue 47).

A kernel grading Day N holds the stand-ins of earlier days only (``course.standins``,
``autograder.sandbox.kernel_files.standins_view``); what the judge must make there itself (the
probes) earns nothing when an answer cell reaches it (``autograder.judge.internals``). The
attacks are one-line answers a class would share: each earns 0, and the answer keys, graded
beside them, earn full marks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from autograder.grading import pipeline
from autograder.grading.score import _own_code
from autograder.judge.internals import review, withheld
from autograder.sandbox import GiB, Limits, kernel_files
from course import standins

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

DAYS = sorted(p.name for p in (Path(__file__).parents[1] / "source").iterdir()
              if p.name.startswith("day"))


# ----------------------------------------------------------------------- the stand-ins held
def test_a_day_holds_only_earlier_stand_ins(tmp_path, root):
    """Does each day's view hold exactly the modules of earlier days, and the package the
    __init__ alone?"""
    for day in DAYS:
        package, allowed = kernel_files.standins_view(tmp_path, root, day)
        assert sorted(p.name for p in package.iterdir()) == ["__init__.py"]
        held = sorted(p.stem for p in allowed.iterdir())
        assert held == standins.modules_before(day), day
        assert all(m < day[:5] for m in held)
    assert standins.modules_before("day04_multi_head_attention") == ["day02"]
    assert "day12" in standins.modules_before("day13_training_tinygpt")


def test_every_stand_in_lives_in_its_own_days_module():
    """Is each stand-in defined in the module of the day that teaches it (or an earlier one),
    so that hiding a day's module hides its answers?"""
    for day, names in standins.WHERE.items():
        for name, module in names.items():
            obj = standins.STANDINS[day][name]
            assert obj.__module__ in (f"course.standins.{module}", "course.probes"), obj
            assert module <= day[:5]


# ----------------------------------------------------------------------- the host's review
@pytest.mark.parametrize("cells, names, replaced", [
    (["from course.standins import MultiHeadSelfAttention"], {"MultiHeadSelfAttention"}, False),
    (["from course.probes import ReferenceSoftmax\nsoftmax = ReferenceSoftmax()"],
     {"softmax", "ReferenceSoftmax"}, False),
    (["import course.probes as p\n", "def softmax(x, dim=-1):\n    return p.ReferenceSoftmax()(x)"],
     {"p", "softmax"}, False),
    (["def _get():\n    from course import probes\n    return probes.ReferenceRNNForward()",
      "def rnn_forward(*a):\n    return _get()(*a)"], {"_get", "rnn_forward"}, False),
    (["import importlib\nsoftmax = importlib.import_module('course.pro' + 'bes').X()"],
     {"importlib", "softmax"}, False),
    (["import course\nLayerNorm = getattr(course, 'stand' + 'ins').LayerNorm"],
     {"course", "LayerNorm"}, False),
    (["import contextlib, course.checking\n"
      "course.checking.forbid = lambda *a: contextlib.nullcontext()"], set(), True),
    (["from course import checking\nsetattr(checking, 'forbid', print)"], set(), True),
    (["import gc\nsoftmax = [o for o in gc.get_objects() if 'Softmax' in type(o).__name__][0]"],
     {"gc", "softmax"}, False),
])
def test_reaching_internals_earns_nothing(cells, names, replaced):
    """Does the review name every cell that reaches the course's internals, withhold what it
    defines (and what uses it), and withhold everything when a course function is replaced?"""
    found = review(cells)
    assert names <= found.names and found.replaced == replaced, found
    assert found.flags and all("cell " in f for f in found.flags)
    verdicts = {"t": {"names": sorted(names) or ["x"]}, "other": {"names": ["unrelated"]}}
    out = withheld(verdicts, found)
    assert "t" in out
    assert ("other" in out) == replaced


def test_load_previous_is_reported_not_withheld():
    """An edited given cell that still loads an earlier day's object is reported only: while
    grading, load_previous returns an earlier day's stand-in or fails."""
    found = review(["from course.previous import load_previous\n"
                    "MultiHeadSelfAttention = load_previous('day04_multi_head_attention', "
                    "'MultiHeadSelfAttention')"])
    assert not found.names and not found.replaced and found.flags


def test_a_course_helper_is_flagged_where_a_built_in_is_forbidden():
    """Is a course module used where the exercise forbids a built-in flagged by the host (a
    helper may call it, and the kernel's forbid can be replaced)?"""
    from autograder.judge import static_review

    found = static_review(["import course.plots as p\n", "def f(x):\n    return x"],
                          ["torch.nn.functional.layer_norm"])
    assert len(found) == 1 and "cell 1" in found[0] and "course helper" in found[0]


def test_answer_keys_and_alternatives_reach_nothing(root):
    """Is every answer key's own code (and every alternative's) free of findings?"""
    from autograder.authoring.alternatives import load

    for day in DAYS:
        own = _own_code(S.reference(root, day), S.release(root, day))
        found = review(own)
        assert not found.flags and not found.names and not found.replaced, (day, found.flags)
    alternatives = load(Path(__file__).parent / "alternatives", DAYS)
    assert len(alternatives) >= 28
    for alt in alternatives:
        found = review(list(alt.cells.values()))
        assert not found.flags and not found.names and not found.replaced, (alt, found.flags)


# ----------------------------------------------------------------------- graded end to end
def _answered(nb, answers: dict[str, str]):
    """``nb`` with the source of each answer cell (by grade_id) replaced."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        if S.grade_id(cell) in answers:
            cell.source = answers[S.grade_id(cell)]
    return nb


ONE_LINE = {
    ("day04_multi_head_attention", "standin"): {
        "day04_mha": "from course.standins import MultiHeadSelfAttention"},
    ("day09_training_loop", "standin"): {
        "day09_warmup_cosine_schedule": "from course.standins import warmup_cosine_schedule",
        "day09_train_one_epoch": "from course.standins import train_one_epoch",
        "day09_evaluate": "from course.standins import evaluate"},
    ("day06_encoder_layer", "forbid-and-standin"): {
        "day06_layer_norm": "import contextlib, course.checking as _c\n"
                            "_c.forbid = lambda *a: contextlib.nullcontext()\n"
                            "from course.standins import LayerNorm",
        "day06_ffn": "from course.probes import FeedForwardBlock as FeedForward"},
    ("day02_queries_keys_values", "probe"): {
        "day02_softmax": "from course.probes import ReferenceSoftmax\nsoftmax = "
                         "ReferenceSoftmax()"},
    ("day01_why_rnns_struggle", "probe"): {
        "day01_rnn_forward": "from course.probes import ReferenceRNNForward\n"
                             "rnn_forward = ReferenceRNNForward()"},
    ("day08_mnist_as_sequences", "probe"): {
        "day08_sequence_classifier": "from course.probes import ReferenceSequenceClassifier "
                                     "as SequenceClassifier"},
    ("day12_causal_attention_tinygpt", "standin"): {
        "day12_tinygpt": "from course.standins import TinyGPT"},
    # the bytecode of an older single-file course/standins.py, loaded by hand (the review sees
    # no course name: only the sandbox's view stops it)
    ("day04_multi_head_attention", "stale-bytecode"): {
        "day04_mha": "import glob, marshal\n"
                     "ns = {}\n"
                     "for p in glob.glob('/tmp/.lib/*/__pycache__/' + 'stand' + 'ins.*.pyc'):\n"
                     "    exec(marshal.loads(open(p, 'rb').read()[16:]), ns)\n"
                     "MultiHeadSelfAttention = ns['MultiHeadSelfAttention']"},
}


@pytest.fixture(scope="module")
def graded(root, tmp_path_factory):
    import importlib.util
    import py_compile

    tmp = tmp_path_factory.mktemp("internals")
    # An instructor's checkout that ran an older course holds this bytecode.
    stale = root / "course" / "__pycache__" / importlib.util.cache_from_source(
        "standins.py").rpartition("/")[2]
    made = not stale.exists()
    if made:
        py_compile.compile(str(root / "course" / "standins" / "day04.py"), cfile=str(stale))
    subs = tmp / "submitted"
    days = sorted({d for d, _ in ONE_LINE})
    for (day, name), answers in ONE_LINE.items():
        S.put(subs, name, _answered(S.release(root, day), answers), day=day)
    for day in days:
        S.put(subs, "reference", S.reference(root, day), day=day)
    try:
        results = pipeline.grade(root, subs, days=days, jobs=2, results_dir=tmp / "out",
                                 sandbox="auto", limits=Limits(memory=3 * GiB,
                                                               cell_timeout=120,
                                                               notebook_timeout=300))
    finally:
        if made:
            stale.unlink()
    return {(r.student, r.day): r for r in results}


@pytest.mark.slow
@pytest.mark.parametrize("day, name", list(ONE_LINE))
def test_one_line_answers_earn_nothing(graded, day, name):
    """Does a blank notebook whose answers import the course's stand-ins or probes earn 0,
    graded (never an environment-error)?"""
    r = graded[(name, day)]
    assert r.status == "graded", r
    assert r.score == 0, [(t.grade_id, t.points, t.message[:80]) for t in r.tests]


@pytest.mark.slow
def test_answer_keys_beside_them_earn_full_marks(graded, root):
    for (student, day), r in graded.items():
        if student == "reference":
            assert (r.status, r.score) == ("graded", pipeline.max_score(root, day)), r
            assert not [f for f in r.flags if "internals" in f], r.flags


@pytest.mark.parametrize("cells, everything", [
    # the routes the attack round of issue 47 found: runpy, exec of a course file, a probe
    (['import runpy\n_ns = runpy.run_module("cour" + "se.refer" + "ences")\n'
      'SequenceClassifier = _ns["Reference" + "Sequence" + "Classifier"]'], False),
    (['import os\nimport course\n_ns = {}\n'
      'exec(compile(open(os.path.join(course.__path__[0], "refer" + "ences.py")).read(), '
      '"x.py", "exec"), _ns)\nSequenceClassifier = _ns["ReferenceSequenceClassifier"]'], True),
    (['from torch import nn\nimport runpy\n'
      '_B = runpy.run_module("cour" + "se.pro" + "bes")["FeedForward" + "Block"]\n'
      'class SequenceClassifier(_B):\n    pass'], False),
    (["import importlib\nglobals()['SequenceClassifier'] = "
      "importlib.import_module('x').Y"], True),
])
def test_code_found_at_run_time_earns_nothing(cells, everything):
    """Does a cell that loads or runs code found at run time (runpy, exec, open, compile, a
    module's __path__) earn nothing for what it defines, and nothing at all when it defines
    names dynamically?"""
    found = review(cells)
    out = withheld({"t": {"names": ["SequenceClassifier"]}, "u": {"names": ["other"]}}, found)
    assert "t" in out, found
    assert ("u" in out) == everything, found


@pytest.mark.parametrize("cells", [
    # a second, review-only bypass round (issue 47): importlib through another module's sys,
    # sys imported from a public course module, __subclasses__ by a computed name, torch.sys
    ["import os\nL = getattr(os.sys, 'modules')['import' + 'lib']\n"
     "R = L.import_module('cour' + 'se.refer' + 'ences')\n"
     "SequenceClassifier = getattr(R, 'Reference' + 'SequenceClassifier')"],
    ["from course.progress import sys as S\nM = S.modules\n"
     "R = M['import' + 'lib'].import_module('cour' + 'se.refer' + 'ences')\n"
     "SequenceClassifier = getattr(R, 'Reference' + 'SequenceClassifier')"],
    ["import torch\nsub = getattr(type, '__sub' + 'classes__')\n"
     "def walk(c):\n    for s in sub(c):\n        yield s\n        yield from walk(s)\n"
     "SequenceClassifier = next(c for c in walk(torch.nn.Module) "
     "if c.__name__ == 'Reference' + 'SequenceClassifier')"],
    ["import torch\nS = torch.sys\n"
     "R = S.modules['import' + 'lib'].import_module('cour' + 'se.refer' + 'ences')",
     "SequenceClassifier = getattr(R, 'Reference' + 'SequenceClassifier')"],
])
def test_second_round_bypasses_earn_nothing(cells):
    found = review(cells)
    assert "SequenceClassifier" in found.names or found.replaced, found


def test_sys_for_stderr_is_not_a_reach():
    """`import sys` to print a warning is a learner's right; sys.modules under any name is not."""
    ok = review(["import sys\nprint('note', file=sys.stderr)\ndef softmax(x, dim=-1):\n"
                 "    return x"])
    assert not ok.names and not ok.flags
    bad = review(["import sys as S\nT = S\nsoftmax = T.modules['x'].y"])
    assert "softmax" in bad.names
