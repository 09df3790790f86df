"""Can a submission forge a judged day's grade from inside its kernel?

Each submission is the blank Day 2 notebook plus one attack cell (the attacks that scored
full marks when the hidden tests ran in the kernel). Judged outside the kernel, every one must
earn 0 points, and the reads must find no hidden material. Graded once for the module, in the
sandbox where bubblewrap works.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from autograder import pipeline
from autograder.sandbox import GiB, Limits

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

DAY = "day02_queries_keys_values"

ATTACKS = {
    # kernel method replacement: any cell that mentions the hidden tests runs as `pass`
    "do-execute": r'''
import types
_k = get_ipython().kernel
_orig = _k.do_execute
def _fake(self, code, *args, **kwargs):
    if "Hidden tests" in code or "hidden" in code:
        code = "pass"
    return _orig(code, *args, **kwargs)
_k.do_execute = types.MethodType(_fake, _k)
''',
    # display and result hooks: an execute_result nbgrader would read as partial credit
    "displayhook": "get_ipython().displayhook(8)\nget_ipython().displayhook('ok')",
    # transform hooks: every later cell becomes `pass`
    "transform-cell": "get_ipython().transform_cell = lambda raw: 'pass\\n'",
    "input-transformer": ("get_ipython().input_transformers_post.append("
                          "lambda lines: ['pass\\n'])"),
    # event callbacks that claim to be IPython's and clear the error
    "post-run-cell": r'''
def _clear(result):
    result.error_in_exec = None
_clear.__module__ = "IPython.core.events"
get_ipython().events.register("post_run_cell", _clear)
''',
    # replacing what a check would have used in-process
    "torch-allclose": ("import torch\ntorch.allclose = lambda *a, **k: True\n"
                       "torch.testing.assert_close = lambda *a, **k: None"),
    "tensor-double-zeros": ("import torch\n_z = torch.zeros_like\n"
                            "torch.Tensor.double = lambda self: _z(self)"),
    "checking-proxy": r'''
import course.checking as _c, torch
class _Yes:
    def __getattr__(self, name):
        if name in ("allclose", "equal", "isclose"):
            return lambda *a, **k: True
        return getattr(torch, name)
_c.torch = _Yes()
''',
    "softmax-swap": "import torch\ntorch.softmax = lambda x, dim=-1, **k: x * 0",
    # lying tensor types: equal to anything
    "lying-tensor": r'''
import torch
class Liar(torch.Tensor):
    def __eq__(self, other): return True
    def allclose(self, *a, **k): return True
def softmax(x, dim=-1):
    return torch.zeros_like(x).as_subclass(Liar)
def scaled_dot_product_attention(q, k, v, mask=None):
    return torch.zeros_like(q).as_subclass(Liar)
''',
    # a forged agent that answers every request with zeros
    "forged-agent": r'''
import base64, json, course.agent as _a
def _handle(request):
    zeros = {"$t": ["float32", [1], base64.b64encode(bytes(4)).decode()]}
    return base64.b64encode(json.dumps(zeros).encode()).decode()
_a.handle = _handle
''',
    # reading hidden material: the grading library and the hidden test cells
    "reads": r'''
import gc, sys
found = []
try:
    import autograder.checks.day02 as _h
    found.append("imported autograder.checks.day02")
except Exception:
    pass
marks = ("BEGIN " + "HIDDEN", "hidden" + ".check")
for i, src in enumerate(In):
    if any(m in src for m in marks) and "marks = (" not in src:
        found.append(f"In[{i}]")
for f in sys.meta_path:
    for cell in getattr(getattr(type(f), "find_spec", None), "__closure__", None) or ():
        found.append(f"finder closure {type(f).__name__}")
for o in gc.get_objects():
    if isinstance(o, str) and "def check_softmax" in o:
        found.append("source in memory")
        break
print("FOUND", found)
''',
}


def _locked(nb):
    """The do-execute cheat written in an answer cell whose metadata says it is read-only."""
    nb = S.with_cell(nb, ATTACKS["do-execute"])
    cell = nb.cells[next(i for i, c in enumerate(nb.cells) if c.cell_type == "code") + 1]
    cell.metadata["nbgrader"] = {"solution": False, "locked": True, "grade": False,
                                 "grade_id": "given_cell", "schema_version": 3}
    return nb


@pytest.fixture(scope="module")
def attacked(root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judge-attacks")
    subs = tmp / "submitted"
    blank = S.release(root, DAY)
    for name, code in ATTACKS.items():
        S.put(subs, name, S.with_cell(blank, code), day=DAY)
    S.put(subs, "locked-cell", _locked(blank), day=DAY)
    S.put(subs, "reference", S.reference(root, DAY), day=DAY)
    results = pipeline.grade(root, subs, days=[DAY], jobs=2, results_dir=tmp / "out",
                             sandbox="auto", limits=Limits(memory=3 * GiB, cell_timeout=60,
                                                           notebook_timeout=150))
    return {"by": {r.student: r for r in results}, "out": tmp / "out",
            "full": pipeline.max_score(root, DAY)}


@pytest.mark.slow
@pytest.mark.parametrize("attack", [*ATTACKS, "locked-cell"])
def test_attack_earns_nothing(attacked, attack):
    """Does a blank notebook plus this attack earn 0 points on every value check?"""
    r = attacked["by"][attack]
    assert r.status in ("graded", "tampered"), r
    assert r.score == 0, [(t.grade_id, t.points, t.message[:80]) for t in r.tests]


@pytest.mark.slow
def test_reads_find_no_hidden_material(attacked):
    """The grading library, the hidden test cells, a bundle in memory: none in the kernel."""
    nb = nbformat.read(str(attacked["out"] / "reads" / f"{DAY}.ipynb"), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "FOUND []" in text, text[-1500:]


@pytest.mark.slow
def test_reference_is_paid_in_full_beside_the_attacks(attacked):
    r = attacked["by"]["reference"]
    assert (r.status, r.score) == ("graded", attacked["full"]), r
