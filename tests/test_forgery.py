"""Can a submission earn points for code it did not write, by telling the judge what it wants?

The attacks of issue "Only correct code earns points", each graded as a class would be:

- **zero weights**: an answer key whose module zeroes its own parameters in ``forward`` (so it
  returns zeros, with uniform attention weights that respect the mask). Expected values that
  were computed from weights read back from the kernel after the call paid it in full; now
  every expected value comes from weights the judge injected and kept.
- **replay**: a notebook that records the judge's inputs, then one that answers from a table
  of those inputs. The inputs are now drawn per submission from the grader's secret.
- **the gate**: value checks whose code raised before any value came back, a patched device
  audit, a parameter that travels by value; the checks now declare their kind.
- **the judge's memory**: a kernel that attaches 48 MB to every answer.

Each graded once per module (the sandbox where bubblewrap works).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from autograder import judge
from autograder.grading import pipeline
from autograder.sandbox import GiB, Limits

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

# forward zeroes every floating parameter and buffer of the module, then runs the answer
# key's own forward: zeros out, uniform (mask-respecting) attention weights, right shapes.
FORGE = '''
import torch as _torch
def _forge(cls):
    original = cls.forward
    def forward(self, *args, **kwargs):
        with _torch.no_grad():
            for t in [*self.parameters(), *self.buffers()]:
                if t.is_floating_point():
                    t.zero_()
        return original(self, *args, **kwargs)
    cls.forward = forward
_forge({name})
'''

FORGED = [
    ("day03_self_attention", "SelfAttention"),                 # was 7/7
    ("day04_multi_head_attention", "MultiHeadSelfAttention"),  # was 9/9
    ("day05_positional_encoding", "LearnedPositionalEncoding"),
    ("day06_encoder_layer", "FeedForward"),
    ("day06_encoder_layer", "LayerNorm"),
    ("day06_encoder_layer", "TransformerEncoderLayer"),
    ("day07_transformer_classifier", "TransformerClassifier"),  # was 8/8 (head zeroed)
    ("day08_mnist_as_sequences", "SequenceClassifier"),
    ("day11_vision_transformer", "PatchEmbedding"),
    ("day11_vision_transformer", "VisionTransformer"),
    ("day12_causal_attention_tinygpt", "CausalSelfAttention"),
    ("day12_causal_attention_tinygpt", "Block"),
    ("day12_causal_attention_tinygpt", "TinyGPT"),
    ("day14_modern_transformer", "RMSNorm"),
    ("day14_modern_transformer", "SwiGLU"),
    ("day14_modern_transformer", "CachedCausalSelfAttention"),
    ("day14_modern_transformer", "ModernGPT"),
]

GATE = {
    # Day 3: forward raises (no value ever comes back) and the device audit says "meta"
    ("day03_self_attention", "SelfAttention"): r'''
import course.device as _device
def _raise(self, x, mask=None):
    raise RuntimeError("not written")
SelfAttention.forward = _raise
_device.check_runs_on_any_device = lambda *args, **kwargs: "meta"
''',
    # Day 4: forward raises; one parameter without requires_grad travels by value
    ("day04_multi_head_attention", "MultiHeadSelfAttention"): r'''
_init = MultiHeadSelfAttention.__init__
def _init_frozen(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.W_O.bias.requires_grad_(False)
def _raise(self, x, mask=None):
    raise RuntimeError("not written")
MultiHeadSelfAttention.__init__ = _init_frozen
MultiHeadSelfAttention.forward = _raise
''',
}


def _after_class(nb, name: str, code: str, prefix: str = "class "):
    """A copy of ``nb`` with ``code`` right after the cell that defines class ``name``."""
    nb = nbformat.from_dict(nb)
    at = next(i for i, c in enumerate(nb.cells)
              if c.cell_type == "code" and f"{prefix}{name}" + ("(" if prefix else "")
              in c.source)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(code))
    return nb


def _names(root: Path, day: str) -> dict[str, list[str]]:
    """{grade_id: the notebook names its hidden check judges}."""
    nb = nbformat.read(str(root / "source" / day / f"{day}.ipynb"), as_version=4)
    out = {}
    for cell in nb.cells:
        gid = S.grade_id(cell)
        if gid and "BEGIN HIDDEN TESTS" in cell.source:
            out[gid] = judge.parse_hidden_cell(cell.source).names
    return out


LIMITS = Limits(memory=3 * GiB, cell_timeout=120, notebook_timeout=300)


@pytest.fixture(scope="module")
def forged(root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("forged")
    subs = tmp / "submitted"
    for day, name in FORGED:
        S.put(subs, f"zero-{name}", _after_class(S.reference(root, day), name,
                                                 FORGE.format(name=name)), day=day)
    for (day, name), code in GATE.items():
        S.put(subs, f"gate-{name}", _after_class(S.reference(root, day), name, code), day=day)
    days = sorted({d for d, _ in FORGED})
    results = pipeline.grade(root, subs, days=days, jobs=2, results_dir=tmp / "out",
                             sandbox="auto", limits=LIMITS)
    return {(r.student, r.day): r for r in results}


@pytest.mark.slow
@pytest.mark.parametrize("day, name", FORGED)
def test_zero_weights_earn_nothing(root, forged, day, name):
    """A module that zeroes its weights and returns zeros earns no test that judges it."""
    r = forged[(f"zero-{name}", day)]
    assert r.status == "graded", r
    names = _names(root, day)
    judged = [t for t in r.tests if name in names[t.grade_id]]
    assert judged, names
    paid = [(t.grade_id, t.points, t.message[:120]) for t in judged if t.points > 0]
    assert not paid, paid


@pytest.mark.slow
def test_zero_weights_are_told_what_happened(forged):
    """The message says the forward changed the injected weights or the values differ."""
    r = forged[("zero-SelfAttention", "day03_self_attention")]
    msg = next(t.message for t in r.tests if t.grade_id == "day03_matches_torch")
    assert "differs from the expected values" in msg or "changed the module's parameters" in msg


@pytest.mark.slow
@pytest.mark.parametrize("day, name", list(GATE))
def test_gate_pays_no_observation_without_values(root, forged, day, name):
    """Value checks that got no value have failed; the structure and device checks of the
    same names are therefore not paid, whatever the kernel says about them. (The day's other
    exercises, untouched, keep their points.)"""
    r = forged[(f"gate-{name}", day)]
    assert r.status == "graded", r
    names = _names(root, day)
    judged = [t for t in r.tests if name in names[t.grade_id]]
    assert len(judged) >= 3, names
    paid = [(t.grade_id, t.points, t.message[:100]) for t in judged if t.points > 0]
    assert not paid, paid


# --------------------------------------------------------------------------- replay

DAY2 = "day02_queries_keys_values"

# Records every input the judge hands softmax and attention, answers correctly (the harvest
# is the attacker's first submission), and prints the record in the last cell.
HARVEST = r'''
import base64 as _b64, json as _json, torch as _torch, traceback as _tb
_SEEN = globals().get("_SEEN", [])
def _judged():        # a call the judge made (through the course's agent), not a visible check
    return any(f.filename.endswith("agent.py") for f in _tb.extract_stack())
def softmax(x, dim=-1):
    if _judged():
        _SEEN.append(["softmax", x.tolist(), dim])
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)
def scaled_dot_product_attention(q, k, v, mask=None):
    if _judged():
        _SEEN.append(["sdpa", [q.tolist(), k.tolist(), v.tolist(),
                               None if mask is None else mask.tolist()]])
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, -1)
    return w @ v, w
'''
PRINT = "print('HARVEST', _b64.b64encode(_json.dumps(_SEEN).encode()).decode())"

# Answers from a table of (input -> output) built from a harvest; zeros for anything else.
REPLAY = r'''
import base64 as _b64, hashlib as _h, json as _json, torch as _torch
_TABLE = _json.loads(_b64.b64decode("{table}"))
def _key(*ts):
    return _h.sha1(repr([t.tolist() if t is not None else None for t in ts]).encode()).hexdigest()
def softmax(x, dim=-1):
    hit = _TABLE.get(_key(x))
    return _torch.tensor(hit, dtype=x.dtype) if hit is not None else _torch.zeros_like(x)
def scaled_dot_product_attention(q, k, v, mask=None):
    hit = _TABLE.get(_key(q, k, v, mask))
    if hit is None:
        w = _torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
        return _torch.zeros_like(q[..., :1].expand(*q.shape[:-1], v.shape[-1])), w
    return _torch.tensor(hit[0], dtype=q.dtype), _torch.tensor(hit[1], dtype=q.dtype)
'''


def _after_stubs(nb, code: str):
    """``code`` after each of the stub cells of softmax and attention (it defines both)."""
    nb = _after_class(nb, "def softmax(", code, prefix="")
    return _after_class(nb, "def scaled_dot_product_attention(", code, prefix="")


def _harvest_nb(root):
    nb = _after_stubs(S.release(root, DAY2), HARVEST)
    nb.cells.append(nbformat.v4.new_code_cell(PRINT))
    return nb


def _harvested(out: Path, student: str) -> list:
    nb = nbformat.read(str(out / student / f"{DAY2}.ipynb"), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    line = next(ln for ln in text.splitlines() if ln.startswith("HARVEST "))
    return json.loads(base64.b64decode(line.split(" ", 1)[1]))


def _table(seen: list) -> str:
    """The replay's table: the right answer for every harvested input."""
    import hashlib

    def key(*ts):
        return hashlib.sha1(repr([t.tolist() if t is not None else None
                                  for t in ts]).encode()).hexdigest()

    table = {}
    for entry in seen:
        if entry[0] == "softmax":
            x = torch.tensor(entry[1], dtype=torch.float64)
            table[key(x)] = torch.softmax(x, entry[2]).tolist()
        else:
            q, k, v, m = entry[1]
            q, k, v = (torch.tensor(t, dtype=torch.float64) for t in (q, k, v))
            m = None if m is None else torch.tensor(m, dtype=torch.bool)
            scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
            if m is not None:
                scores = scores.masked_fill(~m, float("-inf"))
            w = torch.softmax(scores, -1)
            table[key(q, k, v, m)] = [(w @ v).tolist(), w.tolist()]
    return base64.b64encode(json.dumps(table).encode()).decode()


@pytest.fixture(scope="module")
def replayed(root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay")
    secret = bytes(range(32))
    first = tmp / "first"
    harvest = S.put(first, "harvester", _harvest_nb(root), day=DAY2)
    pipeline.grade(root, first, days=[DAY2], jobs=1, results_dir=tmp / "out1",
                   sandbox="auto", limits=LIMITS, secret=secret, resume=False)
    seen = _harvested(tmp / "out1", "harvester")
    second = tmp / "second"
    for student in ("harvester", "classmate"):     # the same file again; a classmate's copy
        S.put(second, student, raw=harvest.read_text(), day=DAY2)
    S.put(second, "replayer", _after_stubs(S.release(root, DAY2),
                                           REPLAY.replace("{table}", _table(seen))), day=DAY2)
    results = pipeline.grade(root, second, days=[DAY2], jobs=2, results_dir=tmp / "out2",
                             sandbox="auto", limits=LIMITS, secret=secret, resume=False)
    third = tmp / "third"
    S.put(third, "harvester", raw=harvest.read_text(), day=DAY2)
    pipeline.grade(root, third, days=[DAY2], jobs=1, results_dir=tmp / "out3",
                   sandbox="auto", limits=LIMITS, secret=bytes(32), resume=False)
    return {"seen": seen, "again": _harvested(tmp / "out2", "harvester"),
            "classmate": _harvested(tmp / "out2", "classmate"),
            "other_secret": _harvested(tmp / "out3", "harvester"),
            "by": {r.student: r for r in results}}


@pytest.mark.slow
def test_same_submission_same_inputs(replayed):
    assert replayed["seen"] and replayed["again"] == replayed["seen"]


@pytest.mark.slow
def test_inputs_differ_by_student_and_secret(replayed):
    assert replayed["classmate"] != replayed["seen"]
    assert replayed["other_secret"] != replayed["seen"]


@pytest.mark.slow
def test_replayed_table_earns_nothing(replayed):
    """A table of every input the first submission saw earns no test of the second."""
    r = replayed["by"]["replayer"]
    assert r.status == "graded", r
    assert r.score == 0, [(t.grade_id, t.points, t.message[:100]) for t in r.tests]


def test_selfcheck_draws_a_fresh_secret_per_run():
    from autograder import selfcheck

    a, b = selfcheck._grade_options(), selfcheck._grade_options()
    assert len(a["secret"]) == 32 and a["secret"] != b["secret"]


def test_seeds_follow_the_key():
    from autograder.judge import checks

    def draw(key):
        with checks.seeded(key):
            return torch.randn(4, generator=checks.rng(7)), checks.permutation(10, 3)

    a1, p1 = draw(b"a")
    a2, p2 = draw(b"a")
    b1, _ = draw(b"b")
    assert torch.equal(a1, a2) and torch.equal(p1, p2) and not torch.equal(a1, b1)


# --------------------------------------------------------------------------- memory

FLOOD = r'''
import course.agent as _agent, course.wire as _wire, torch as _torch
_BIG = _wire.encode(_torch.zeros(12_000_000))          # 48 MB, on every answer
_ref = _agent._ref
def _flood(obj):
    out = _ref(obj)
    out["v"] = _BIG
    return out
_agent._ref = _flood
'''

MEASURE = r'''
import json, resource, sys, time
from pathlib import Path
from autograder.grading import pipeline
from autograder.sandbox import GiB, Limits
t0 = time.monotonic()
res = pipeline.grade(Path(sys.argv[1]), Path(sys.argv[2]), days=["day03_self_attention"],
                     jobs=1, sandbox="auto", resume=False,
                     limits=Limits(memory=3 * GiB, cell_timeout=120, notebook_timeout=300))
print(json.dumps({"seconds": time.monotonic() - t0,
                  "children_max_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "self_max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "results": [r.to_json() for r in res]}))
'''


@pytest.mark.slow
def test_a_flooding_kernel_cannot_spend_the_judges_memory(root, tmp_path):
    """48 MB attached to every answer: the judge refuses the answers (a value on a reference
    that is not a tensor's, and more than 256 MiB in one test), the tests fail with a clear
    message, and no grading process grows past 1.5 GiB (it reached 5-6 GB before)."""
    subs = tmp_path / "submitted"
    S.put(subs, "flood", S.with_cell(S.reference(root, "day03_self_attention"), FLOOD),
          day="day03_self_attention")
    out = subprocess.run([sys.executable, "-c", MEASURE, str(root), str(subs)],
                         capture_output=True, text=True, timeout=600, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout.strip().splitlines()[-1])
    r = data["results"][0]
    assert r["status"] == "graded", r
    assert r["score"] == 0, r["tests"]
    assert all("did not answer the judge" in t["message"] or "not awarded" in t["message"]
               for t in r["tests"]), r["tests"]
    peak = max(data["children_max_rss_kib"], data["self_max_rss_kib"]) * 1024
    assert peak < 1.5 * GiB, data
    assert data["seconds"] < 120, data
