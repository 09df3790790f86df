"""Can a submission forge a judged day's grade from inside its kernel?

Each submission is the blank Day 2 notebook plus one attack cell (the attacks that scored
full marks when the hidden tests ran in the kernel), or the answer key plus one for the attacks
on the judge's conversation itself. Judged outside the kernel, every one must
earn 0 points, and the reads must find no hidden material. Graded once for the module, in the
sandbox where bubblewrap works.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from autograder.grading import pipeline
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
    # the judge's conversation (autograder.grading.judge_session): an agent that ends it at
    # once, and one that sends forged answers on the stdin channel ahead of the real ones
    # (in the answer key: ON_REFERENCE)
    "serve-ends-at-once": "import course.agent as _a\n_a.serve = lambda request: None",
    "stdin-spam": r'''
import base64, json, course.agent as _a
_real = _a.handle
_zeros = {"$t": ["float32", [1], base64.b64encode(bytes(4)).decode()]}
_forged = base64.b64encode(json.dumps(_zeros).encode()).decode()
def _handle(request):
    k = get_ipython().kernel
    for _ in range(20):
        k.session.send(k.stdin_socket, "input_request", {"prompt": _forged, "password": False},
                       k.get_parent("shell"), ident=k._get_shell_context_var(k._shell_parent_ident))
    return _real(request)
_a.handle = _handle
''',
    # reading hidden material: the grading library and the hidden test cells
    "reads": r'''
import gc, sys
found = []
try:
    import autograder.judge.checks.day02 as _h
    found.append("imported autograder.judge.checks.day02")
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


ON_REFERENCE = ("serve-ends-at-once", "stdin-spam")


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
    ref = S.reference(root, DAY)
    for name, code in ATTACKS.items():
        S.put(subs, name, S.with_cell(ref if name in ON_REFERENCE else blank, code), day=DAY)
    S.put(subs, "locked-cell", _locked(blank), day=DAY)
    S.put(subs, "reference", ref, day=DAY)
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


# ---------------------------------------------------------------------------------------------
# Days whose checks hand the learner's code objects (probe models, optimizers, generators) and
# judge trained models: each attack sits right before the hidden test it targets, in a blank
# notebook, so that the stub cells above cannot undo it.

LATER = {
    # Day 13: a forged training history (the check used to read only the history)
    ("day13_training_tinygpt", "day13_training_result"): {
        "forged-history": ("history = {'step': [150], 'train_loss': [1.0], 'val_loss': [1.0]}\n"
                           "class _Tok:\n    vocab_size = 65\ntok = _Tok()"),
        # no parameters, not causal: the logits at t put all weight on input token t + 1 (2/2)
        "look-ahead": r'''
import torch
class _LookAhead(torch.nn.Module):
    n_ctx = 8
    def forward(self, idx):
        nxt = torch.cat([idx[:, 1:], idx[:, -1:]], dim=1)
        return torch.nn.functional.one_hot(nxt, 65).float() * 30
model = _LookAhead()
history = {"step": [150], "train_loss": [1.0], "val_loss": [1.0]}
''',
    },
    # Day 13: a generate that crops honestly but samples nothing: the crop check only observes
    # the probe's records, so it must not be paid while the sampling value checks fail
    ("day13_training_tinygpt", "day13_generate_crop"): {
        "crop-only-generate": r'''
import torch
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             generator=None):
    if temperature <= 0:
        raise ValueError("temperature must be > 0")
    for _ in range(max_new_tokens):
        model(idx[:, -model.n_ctx:])
        idx = torch.cat([idx, torch.zeros(len(idx), 1, dtype=torch.long)], 1)
    return idx
''',
    },
    # Day 9: the probes the judge makes in the kernel, patched to report a training that
    # never happened; and a "model" that looks up the exact held-out images
    ("day09_training_loop", "day09_schedule_values"): {
        "patched-probes": r'''
import course.probes as _p, torch
_p.step_schedule = lambda optimizer, scheduler, steps: [0.5] * steps
_p.TrainingProbe.forward = lambda self, x: (self.modes.append(True),
                                            self.linear(torch.tanh(x)))[1]
torch.nn.Module.load_state_dict = lambda self, *a, **k: None
def warmup_cosine_schedule(optimizer, warmup_steps, total_steps):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
''',
    },
    ("day09_training_loop", "day09_heldout_accuracy"): {
        # answers the held-out labels in the order the judge used to send the digits (3/3)
        "heldout-counter": r'''
import torch
from course.data import load_mnist
class _Counter(torch.nn.Module):
    def __init__(self, labels):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.labels, self.seen = labels, 0
    def forward(self, x):
        y = self.labels[self.seen:self.seen + len(x)]
        self.seen = (self.seen + len(x)) % len(self.labels)
        return torch.nn.functional.one_hot(y, 10).float() * 10
model = _Counter(load_mnist().heldout_labels)
''',
        "heldout-lookup": r'''
import hashlib, torch
class _Lookup(torch.nn.Module):
    """Remembers the exact held-out images the notebook holds."""
    def __init__(self, rows, labels):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.table = {hashlib.sha1(r.float().numpy().tobytes()).hexdigest(): int(y)
                      for r, y in zip(rows, labels)}
    def forward(self, x):
        out = torch.zeros(len(x), 10)
        for i, r in enumerate(x):
            y = self.table.get(hashlib.sha1(r.float().numpy().tobytes()).hexdigest())
            if y is not None:
                out[i, y] = 10.0
        return out
from course.data import load_mnist
_m = load_mnist()
_train = _m.train_images.float() / 255
heldout_rows = (_m.heldout_images.float() / 255 - _train.mean()) / _train.std()
model = _Lookup(heldout_rows, _m.heldout_labels)
''',
    },
}


def _before_test(nb, gid: str, code: str):
    nb = nbformat.from_dict(nb)
    i = next(i for i, c in enumerate(nb.cells) if S.grade_id(c) == gid)
    nb.cells.insert(i, nbformat.v4.new_code_cell(code))
    return nb


@pytest.fixture(scope="module")
def attacked_later(root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("judge-attacks-later")
    subs = tmp / "submitted"
    days = sorted({day for day, _ in LATER})
    for (day, gid), attacks in LATER.items():
        for name, code in attacks.items():
            S.put(subs, name, _before_test(S.release(root, day), gid, code), day=day)
    for day in days:
        S.put(subs, "reference", S.reference(root, day), day=day)
    results = pipeline.grade(root, subs, days=days, jobs=2, results_dir=tmp / "out",
                             sandbox="auto", limits=Limits(memory=3 * GiB, cell_timeout=120,
                                                           notebook_timeout=300))
    return {"by": {(r.student, r.day): r for r in results},
            "full": {day: pipeline.max_score(root, day) for day in days}}


@pytest.mark.slow
@pytest.mark.parametrize("day, gid, attack", [(d, g, a) for (d, g), attacks in LATER.items()
                                              for a in attacks])
def test_later_attack_earns_nothing(attacked_later, day, gid, attack):
    """Does a blank notebook plus this attack earn 0 points, the targeted test included?"""
    r = attacked_later["by"][(attack, day)]
    assert r.status == "graded", r
    assert r.score == 0, [(t.grade_id, t.points, t.message[:80]) for t in r.tests]
    target = next(t for t in r.tests if t.grade_id == gid)
    assert target.points == 0 and target.message, target


@pytest.mark.slow
def test_later_references_are_paid_in_full(attacked_later):
    for day, full in attacked_later["full"].items():
        r = attacked_later["by"][("reference", day)]
        assert (r.status, r.score) == ("graded", full), r
