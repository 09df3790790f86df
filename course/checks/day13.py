"""Visible checks for Day 13: small, friendly examples (the hidden tests use others)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from course.checking import CheckFailure, call, expect_tensor, passed


def check_tokenizer(CharTokenizer) -> None:
    """'abcab' has vocabulary a, b, c; encode/decode round trip."""
    tok = call(CharTokenizer, "abcab", name="CharTokenizer('abcab')")
    if getattr(tok, "vocab_size", None) != 3:
        raise CheckFailure(f"CharTokenizer('abcab').vocab_size should be 3, got "
                           f"{getattr(tok, 'vocab_size', None)!r}.")
    ids = call(tok.encode, "cab", name="encode('cab')")
    if list(ids) != [2, 0, 1]:
        raise CheckFailure(f"encode('cab') should be [2, 0, 1] (ids in sorted order), got {ids!r}.")
    back = call(tok.decode, ids, name="decode")
    if back != "cab":
        raise CheckFailure(f"decode(encode('cab')) returned {back!r}.")
    passed("CharTokenizer: vocabulary ['a', 'b', 'c'], encode('cab') = [2, 0, 1], round trip")


def check_get_batch(get_batch) -> None:
    """Shapes (4, 6) and y = x shifted by one on data = arange(30)."""
    data = torch.arange(30)
    out = call(get_batch, data, 4, 6, generator=torch.Generator().manual_seed(0),
               name="get_batch(arange(30), 4, 6)")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("get_batch should return a tuple (x, y).")
    x, y = out
    expect_tensor(x, "x", shape=(4, 6), dtype=torch.long)
    expect_tensor(y, "y", shape=(4, 6), dtype=torch.long)
    if torch.equal(x, y):
        raise CheckFailure("y equals x: the target must be the next token, "
                           "data[i + 1 : i + T + 1].")
    if not torch.equal(y, x + 1):
        raise CheckFailure(f"on data = arange(30), y should be x + 1. Got x[0] = {x[0].tolist()}, "
                           f"y[0] = {y[0].tolist()}.")
    passed("get_batch: x, y of shape (4, 6), y = x shifted by one")


class _Uniform(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.vocab = vocab

    def forward(self, idx):
        return self.w.expand(*idx.shape, self.vocab) * 0.0


def check_estimate_loss(estimate_loss) -> None:
    """A model with uniform logits over 10 tokens has loss ln(10)."""
    data = torch.randint(0, 10, (200,), generator=torch.Generator().manual_seed(0))
    loss = call(estimate_loss, _Uniform(10), data, 4, 8, eval_iters=2,
                name="estimate_loss(uniform model, ...)")
    if not isinstance(loss, float):
        raise CheckFailure(f"estimate_loss should return a Python float (use .item()), got "
                           f"{type(loss).__name__}.")
    if abs(loss - math.log(10)) > 1e-5:
        raise CheckFailure(f"uniform logits over 10 tokens should give ln(10) = 2.3026, got "
                           f"{loss:.4f}.")
    passed(f"estimate_loss: uniform logits over 10 tokens give ln(10) = {loss:.4f}")


def check_get_lr(get_lr) -> None:
    """Warmup reaches max_lr; the end of the cosine is min_lr."""
    got = [call(get_lr, s, 1.0, 10, 100, 0.1, name="get_lr") for s in (0, 9, 100)]
    want = [0.1, 1.0, 0.1]
    if any(abs(g - w) > 1e-9 for g, w in zip(got, want, strict=True)):
        raise CheckFailure(f"get_lr at steps 0, 9, 100 (max 1.0, warmup 10, total 100, min 0.1) "
                           f"should be {want}, got {got}.")
    passed("get_lr: 0.1 at step 0, 1.0 at the end of warmup, 0.1 at the end")


def check_train(train) -> None:
    """Two steps on a tiny model run and return the history keys."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 8), nn.Linear(8, 5))
    model.n_ctx = 8
    data = torch.arange(100) % 5
    hist = call(train, model, data, data, steps=2, batch_size=2, block_size=4, max_lr=1e-2,
                warmup_steps=1, eval_every=1, eval_iters=1, name="train (2 steps)")
    if not isinstance(hist, dict) or not {"step", "train_loss", "val_loss"} <= set(hist):
        raise CheckFailure("train should return a dict with lists 'step', 'train_loss', "
                           "'val_loss'.")
    if hist["step"] != [1, 2]:
        raise CheckFailure(f"with steps=2 and eval_every=1, history['step'] should be [1, 2], "
                           f"got {hist['step']}.")
    passed("train: 2 steps run; history has step, train_loss, val_loss")


def check_generate(generate) -> None:
    """Shape (2, 3 + 4); the prompt is kept."""
    model = nn.Sequential(nn.Embedding(6, 4), nn.Linear(4, 6))
    model.n_ctx = 4
    idx = torch.tensor([[1, 2, 3], [0, 0, 0]])
    out = call(generate, model, idx, 4, generator=torch.Generator().manual_seed(0),
               name="generate(model, idx of shape (2, 3), 4)")
    expect_tensor(out, "generate output", shape=(2, 7), dtype=torch.long)
    if not torch.equal(out[:, :3], idx):
        raise CheckFailure("the output must start with the prompt idx.")
    passed("generate: (2, 3) -> (2, 7), prompt kept")


def check_bpe(merge, train_bpe, BPETokenizer) -> None:
    """merge([5, 5, 5, 2], (5, 5), 9) == [9, 5, 2]; 'aaab aab' learns (a, a) first; the
    tokenizer's encode uses the merges and decode gives the text back."""
    out = call(merge, [5, 5, 5, 2], (5, 5), 9, name="merge([5, 5, 5, 2], (5, 5), 9)")
    if list(out) != [9, 5, 2]:
        raise CheckFailure(f"merge([5, 5, 5, 2], (5, 5), 9) should be [9, 5, 2] (from the left, "
                           f"never overlapping), got {out!r}.")
    # chars ' ', 'a', 'b' -> 0, 1, 2; chunks 'aaab' and ' aab': (a, a) occurs 3 times
    merges = call(train_bpe, "aaab aab", 2, name="train_bpe('aaab aab', 2)")
    merges = [tuple(p) for p in merges]
    if merges[:1] != [(1, 1)] or len(merges) != 2:
        raise CheckFailure(f"train_bpe('aaab aab', 2) should start with (1, 1) = ('a', 'a'), "
                           f"counted 3 times, and learn 2 merges; got {merges!r}.")
    tok = call(BPETokenizer, [" ", "a", "b"], merges, name="BPETokenizer([' ', 'a', 'b'], merges)")
    ids = call(tok.encode, "aab aaab", name="encode('aab aaab')")
    if len(ids) >= 8 or call(tok.decode, ids, name="decode") != "aab aaab":
        raise CheckFailure(f"encode('aab aaab') gave {ids!r}: it should use the merges (fewer "
                           "than 8 ids) and decode back to 'aab aaab'.")
    passed(f"BPE: merge from the left; train_bpe('aaab aab', 2) = {merges}; encode('aab aaab') "
           f"= {list(ids)}, decoded back")
