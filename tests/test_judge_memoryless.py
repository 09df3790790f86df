"""Can a scored model answer the judge from memory?

A check that compares two calls of the learner's model (causality: the same windows with the
later tokens replaced) trusts that the second answer is computed, not recalled. A stateful
"model" can read the next token on the first call and replay its earlier logits for a row that
shares a prefix with one it answered before: every logit before the change is then "unchanged".
These tests judge one check in this process (the course's agent answers the judge directly, as
in tests/test_generalise.py), so each attack costs about a second instead of a graded notebook.
"""

from __future__ import annotations

import textwrap

import pytest

from autograder import judge
from autograder.judge import remote
from course import agent

# The Day 13 names the hidden test reads besides the model: a correct get_batch (the check
# asks it first) and the notebook's tokenizer, written as in the answer key.
DAY13_PARTS = """
import torch
import torch.nn.functional as F

class CharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.vocab_size = len(self.chars)
    def encode(self, s):
        return [self.stoi[c] for c in s]
    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)

def get_batch(data, batch_size, block_size, generator=None):
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[i:i + block_size] for i in starts.tolist()])
    y = torch.stack([data[i + 1:i + block_size + 1] for i in starts.tolist()])
    return x, y

from course.data import load_tinyshakespeare
tok = CharTokenizer(load_tinyshakespeare())
history = {"step": [50], "train_loss": [1.0], "val_loss": [1.0]}
"""

# The attack of issue 47, as a learner would write it in a Day 13 notebook: no parameters;
# the logits at t put their weight on input token t + 1 (it reads the future), and a row that
# shares a prefix with a row answered before gets that row's logits back on the shared part.
REMEMBERING = """
class Remembering(torch.nn.Module):
    n_ctx = 64
    def __init__(self):
        super().__init__()
        self.seen = []
    def forward(self, idx):
        nxt = torch.cat([idx[:, 1:], idx[:, -1:]], dim=1)
        out = F.one_hot(nxt, 65).float() * 30
        for b in range(len(idx)):
            best, row = 0, None                  # the longest prefix answered before
            for old_idx, old_out in self.seen:
                for r in range(len(old_idx)):
                    same = int((old_idx[r] == idx[b]).int().cumprod(0).sum())
                    if same > best:
                        best, row = same, old_out[r]
            if row is not None:
                out[b, :best] = row[:best]
        self.seen.append((idx.clone(), out.clone()))
        return out

model = Remembering()
"""

# The same memory kept where a fresh object cannot lose it: in the class, across instances.
REMEMBERING_CLASS = REMEMBERING.replace("self.seen = []", "pass").replace(
    "class Remembering(torch.nn.Module):", "class Remembering(torch.nn.Module):\n    seen = []")

# A stand-in TinyGPT (the class the graded notebook trains) whose forward reads the next token
# and replays from memory, around weights that were never trained: its state_dict is right.
STANDIN_FORWARD_LIES = REMEMBERING.replace(
    "class Remembering(torch.nn.Module):",
    "from course.standins import TinyGPT\nclass Remembering(TinyGPT):").replace(
    "super().__init__()", "super().__init__(65, d_model=16, num_heads=2, num_layers=1, "
                          "n_ctx=64)")


def _verdict(ns: dict, module: str, check: str, *names: str) -> judge.Verdict:
    agent.reset()
    agent.USER_NS = ns
    call = judge.HiddenCall(f"autograder.judge.checks.{module}", check,
                            [("name", n) for n in names])
    return judge.run(call, remote.Conn(agent.handle))


def _notebook(*cells: str) -> dict:
    ns: dict = {}
    for cell in cells:
        exec(textwrap.dedent(cell), ns)  # noqa: S102 - learner code written in this test
    return ns


def _training_result(ns: dict) -> judge.Verdict:
    return _verdict(ns, "day13", "check_training_result", "history", "model", "get_batch", "tok")


@pytest.mark.parametrize("attack", [REMEMBERING, REMEMBERING_CLASS, STANDIN_FORWARD_LIES],
                         ids=["instance-memory", "class-memory", "standin-forward"])
def test_a_model_that_reads_ahead_and_remembers_earns_nothing_on_day13(attack):
    """Does the look-ahead model that replays its earlier logits fail day13_training_result
    (it earned 2/2 when causality was two calls of the kernel's model)?"""
    v = _training_result(_notebook(DAY13_PARTS, attack))
    assert not v.passed, v.message


def test_a_trained_standin_tinygpt_passes_day13_training_result():
    """Does a TinyGPT of the graded notebook's class, trained briefly on Tiny Shakespeare, still
    pass when the judge scores its weights in its own model (the answer key's route)?"""
    ns = _notebook(DAY13_PARTS, """
        from course.standins import TinyGPT
        text = load_tinyshakespeare()
        data = torch.tensor(tok.encode(text[:int(0.9 * len(text))]))
        torch.manual_seed(0)
        model = TinyGPT(65, d_model=32, num_heads=4, num_layers=1, n_ctx=64)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
        g = torch.Generator().manual_seed(0)
        for _ in range(40):            # about 2.8 on the judge's windows, about a second
            x, y = get_batch(data, 16, 16, g)
            loss = F.cross_entropy(model(x).reshape(-1, 65), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        model = model.train()
    """)
    v = _training_result(ns)
    assert v.passed, v.message
    assert v.message == "", v.message


# Weights that name a model far larger than what they hold (4096 wide, 48 blocks of one tiny
# tensor each): the judge must refuse them before it builds its copy (38 GB at that size).
SIZES_THAT_LIE = """
from course.standins import TinyGPT
class Liar(TinyGPT):
    def __init__(self):
        super().__init__(65, d_model=8, num_heads=2, num_layers=1, n_ctx=64)
    def state_dict(self, *args, **kwargs):
        sd = {"tok.weight": torch.zeros(65, 4096), "pos.weight": torch.zeros(64, 4096)}
        sd.update({f"blocks.{i}.norm1.weight": torch.zeros(1) for i in range(48)})
        return sd
model = Liar()
"""


def test_weights_that_name_a_larger_model_are_refused_before_the_judge_builds_it():
    v = _training_result(_notebook(DAY13_PARTS, SIZES_THAT_LIE))
    assert not v.passed and "do not fit TinyGPT" in v.message, v.message


@pytest.mark.parametrize("d, layers", [(8, 1), (12, 3)])
def test_the_judge_knows_the_standin_tinygpt_shapes_before_it_builds_one(d, layers):
    """Are the shapes the judge checks the kernel's weights against (before it allocates its own
    copy) exactly those of the course's TinyGPT?"""
    from autograder.judge.checks.day13 import tinygpt_shapes
    from course.standins import TinyGPT

    real = TinyGPT(65, d_model=d, num_heads=2, num_layers=layers, n_ctx=5)
    assert tinygpt_shapes(65, d, layers, 5) == {k: tuple(v.shape)
                                                 for k, v in real.state_dict().items()}


# Day 14: a KV-cache attention whose pass without a cache is right and whose decoding makes a
# catalogued mistake (the new token rotated as position 0), but which answers a decoding step
# from a pass without a cache it ran before on the same tokens. BASE is the class it wraps.
DAY14_REMEMBERING = """
class Remembering(BASE):
    seen = []
    def forward(self, x, cache=None):
        y, (k, v) = super().forward(x)          # rotated from position 0: wrong with a cache
        if cache is None:
            Remembering.seen.append((x.detach().clone(), y.detach().clone()))
            return y, (k, v)
        past = cache[0].shape[-2]
        for old_x, old_y in Remembering.seen:
            if old_x.shape[1] >= past + x.shape[1] and torch.equal(
                    old_x[:, past:past + x.shape[1]], x):
                y = old_y[:, past:past + x.shape[1]]
        return y, (torch.cat((cache[0], k), -2), torch.cat((cache[1], v), -2))

BASE = Remembering
"""


def _day14_key() -> str:
    """The alternative answer key's cells of Day 14 (definitions only)."""
    from pathlib import Path

    text = (Path(__file__).parent / "alternatives" / "day14.py").read_text()
    head = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
    return head + text


@pytest.mark.parametrize("module, check, name", [
    ("day14", "check_cached_attention_matches_full", "CachedCausalSelfAttention"),
    ("day14_qk_norm", "check_qk_norm_values", "CachedCausalSelfAttention"),
    ("day14_gqa", "check_gqa_values", "GroupedQueryAttention"),
])
@pytest.mark.parametrize("remembers", [False, True], ids=["answer-key", "remembering"])
def test_cached_decoding_cannot_be_answered_from_the_pass_without_a_cache(module, check, name,
                                                                         remembers):
    """Does each check of cached decoding fail a decoding step that replays the pass without a
    cache on the same tokens (and still pay the alternative answer key)?"""
    ns = _notebook(_day14_key(), DAY14_REMEMBERING.replace("BASE", name) if remembers else "")
    v = _verdict(ns, module, check, name)
    assert v.passed != remembers, v.message


def test_a_decode_that_remembers_what_encode_saw_earns_nothing():
    """A CharTokenizer whose decode looks up the strings its encode saw (the attack round of
    issue 47: it earned the round-trip test 2/2) fails on ids no encode call produced."""
    import pytest

    from autograder.judge.checks import day13
    from course.checking import CheckFailure

    class CharTokenizer:
        def __init__(self, text):
            self.chars = sorted(set(text))
            self.vocab_size = len(self.chars)
            self.stoi = {c: i for i, c in enumerate(self.chars)}
            self._seen = {}

        def encode(self, s):
            for c in s:
                if c not in self.stoi:
                    raise ValueError(f"unknown character {c!r}")
            ids = [self.stoi[c] for c in s]
            self._seen[tuple(ids)] = s
            return ids

        def decode(self, ids):
            return self._seen.get(tuple(int(i) for i in ids), "")

    with pytest.raises(CheckFailure, match="whatever was encoded before"):
        day13.check_tokenizer_roundtrip(CharTokenizer)
