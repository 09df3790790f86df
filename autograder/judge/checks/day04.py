"""Hidden tests of Day 4: multi-head self-attention.

Expected values come from ``nn.MultiheadAttention(d_model, num_heads, batch_first=True)`` with
the learner's W_Q, W_K, W_V, W_O copied in. The classic mistakes are recomputed from the same
weights to name the one a learner made.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder.judge.checks import (
    CheckFailure,
    Step,
    call,
    compare,
    expect_module,
    expect_tensor,
    expect_unchanged,
    inject,
    manual_seed,
    observed_check,
    rng,
    shown,
    value_check,
)
from course.device import check_runs_on_any_device

NAMES = ("W_Q", "W_K", "W_V", "W_O")


def _build(cls, d_model: int, num_heads: int, seed: int):
    """The learner's module in float64 with the judge's weights injected, and the judge's
    copy of them ({"W_Q.weight": ..., "W_Q.bias": ..., ...})."""
    m = expect_module(cls, d_model, num_heads, name="MultiHeadSelfAttention")
    for name in NAMES:
        lin = getattr(m, name, None)
        if not isinstance(lin, nn.Linear):
            raise CheckFailure(f"self.{name} should be nn.Linear(d_model, d_model), got "
                               f"{type(lin).__name__}.")
    m = m.double()
    g = rng(seed)
    weights = {}
    for name in NAMES:
        weights[f"{name}.weight"] = (torch.randn(d_model, d_model, generator=g,
                                                 dtype=torch.float64) / math.sqrt(d_model))
        weights[f"{name}.bias"] = torch.randn(d_model, generator=g, dtype=torch.float64) * 0.1
    return m, inject(m, weights)


def _reference(w: dict, d_model: int, num_heads: int) -> nn.MultiheadAttention:
    """nn.MultiheadAttention holding the judge's weights ``w``."""
    ref = nn.MultiheadAttention(d_model, num_heads, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([w["W_Q.weight"], w["W_K.weight"], w["W_V.weight"]]))
        ref.in_proj_bias.copy_(torch.cat([w["W_Q.bias"], w["W_K.bias"], w["W_V.bias"]]))
        ref.out_proj.weight.copy_(w["W_O.weight"])
        ref.out_proj.bias.copy_(w["W_O.bias"])
    return ref


def _wrong(w, x, num_heads, mask=None, scale=None, split="ok", w_o=True, fill=float("-inf"),
           merge="ok"):
    """Multi-head attention on the judge's weights ``w`` with one classic mistake:
    (output, weights)."""
    B, T, C = x.shape
    d_k = C // num_heads

    def lin(name, t):
        return F.linear(t, w[f"{name}.weight"], w[f"{name}.bias"])

    with torch.no_grad():
        def heads(t):
            if split == "no-transpose":
                return t.reshape(B, num_heads, T, d_k)          # (B, H, T, d_k) scrambled
            return t.view(B, T, num_heads, d_k).transpose(1, 2)  # (B, H, T, d_k)
        q, k, v = heads(lin("W_Q", x)), heads(lin("W_K", x)), heads(lin("W_V", x))
        scores = q @ k.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)
        if mask is not None:
            scores = scores.masked_fill(~mask, fill)
        attn = torch.softmax(scores, dim=-1)                    # (B, H, T, T)
        if merge == "no-transpose":
            out = (attn @ v).reshape(B, T, C)                   # (B, H, T, d_k) read as (B, T, C)
        else:
            out = (attn @ v).transpose(1, 2).reshape(B, T, C)   # (B, T, C)
        return (lin("W_O", out) if w_o else out), attn


def _run(m, x, mask=None):
    out = call(m, x, mask, name="MultiHeadSelfAttention.forward(x, mask)") if mask is not None \
        else call(m, x, name="MultiHeadSelfAttention.forward(x)")
    return out, getattr(m, "attn_weights", None)


AFTER_SOFTMAX = ("after the softmax: in weights @ V, in merging the heads back (transpose(1, 2), "
                 "then reshape to (batch, seq_len, d_model)), or in the output projection "
                 "self.W_O")


def _weights_first(w, expected_w) -> list[Step]:
    """The per-head weights as the step before the output (see ``first_difference``)."""
    return [Step("attn_weights", w, expected_w, "before or in the softmax")]


@observed_check
def check_mha_init(MultiHeadSelfAttention) -> None:
    """At (128, 8): four nn.Linear(128, 128) with bias, 66,048 parameters, integer d_k = 16."""
    m = expect_module(MultiHeadSelfAttention, 128, 8, name="MultiHeadSelfAttention")
    for name in NAMES:
        lin = getattr(m, name, None)
        if not isinstance(lin, nn.Linear):
            raise CheckFailure(f"self.{name} should be nn.Linear(d_model, d_model), got "
                               f"{type(lin).__name__}.")
        if (lin.in_features, lin.out_features) != (128, 128) or lin.bias is None:
            raise CheckFailure(f"self.{name} should be nn.Linear(d_model, d_model) with a bias "
                               f"(128 -> 128), got {shown(lin)}.")
    n = sum(p.numel() for p in m.parameters())
    if n != 66_048:
        raise CheckFailure(f"MultiHeadSelfAttention(128, 8) has {n:,} parameters, expected "
                           "66,048 = 4 x 16,512 (W_Q, W_K, W_V, W_O, each 128 x 128 + 128).")
    d_k = getattr(m, "d_k", None)
    if type(d_k) is not int:
        raise CheckFailure("self.d_k should be the int d_model // num_heads = 16, got "
                           f"{shown(d_k)}. "
                           "Hint: use integer division `//`; `/` gives a float that view() "
                           "rejects.")
    if d_k != 16:
        raise CheckFailure(f"self.d_k should be d_model // num_heads = 128 // 8 = 16, got {d_k}.")


@observed_check
def check_mha_rejects_bad_heads(MultiHeadSelfAttention) -> None:
    """d_model=30 with 4 heads raises a ValueError that names both numbers."""
    try:
        with torch.no_grad():
            MultiHeadSelfAttention(30, 4)
    except ValueError as exc:
        text = str(exc)
        if "30" not in text or "4" not in text:
            raise CheckFailure("MultiHeadSelfAttention(30, 4) raised ValueError, but its "
                               f"message {shown(text)} should name both d_model=30 and "
                               "num_heads=4.") from None
        return
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
        raise CheckFailure(f"MultiHeadSelfAttention(30, 4) raised {type(exc).__name__}: {exc}; "
                           "raise a ValueError naming d_model and num_heads instead.") from None
    raise CheckFailure("MultiHeadSelfAttention(30, 4) should raise ValueError: 30 is not "
                       "divisible by 4, so the heads cannot share d_model equally.")


@observed_check
def check_mha_shapes(MultiHeadSelfAttention) -> None:
    """Output (B, T, C) and attn_weights (B, H, T, T) for (2, 5, 24) with 3 heads, and T = 1."""
    m, _ = _build(MultiHeadSelfAttention, 24, 3, seed=41)
    for B, T in ((2, 5), (1, 1)):
        x = torch.randn(B, T, 24, generator=rng(B * 10 + T), dtype=torch.float64)
        out, w = _run(m, x)
        expect_tensor(out, f"output for x of shape {(B, T, 24)}", shape=(B, T, 24),
                      dtype=torch.float64)
        expect_tensor(w, "self.attn_weights (batch, num_heads, seq_len, seq_len)",
                      shape=(B, 3, T, T), dtype=torch.float64)
        compare(w.sum(-1), torch.ones(B, 3, T, dtype=torch.float64), "attn_weights row sums",
                hint="softmax over the keys (dim=-1) so each query's weights sum to 1.")


@value_check
def check_mha_matches_torch(MultiHeadSelfAttention) -> None:
    """Equal to nn.MultiheadAttention given the same weights: d_model=24, 6 heads (d_k=4)."""
    m, kept = _build(MultiHeadSelfAttention, 24, 6, seed=42)
    ref = _reference(kept, 24, 6)
    x = torch.randn(3, 7, 24, generator=rng(43), dtype=torch.float64)
    out, w = _run(m, x)
    expected, expected_w = ref(x, x, x, need_weights=True, average_attn_weights=False)
    mistakes = {
        "you split the heads with view(batch, num_heads, seq_len, d_k): that scrambles tokens "
        "and features. View as (batch, seq_len, num_heads, d_k), then transpose(1, 2)":
            _wrong(kept, x, 6, split="no-transpose"),
        "you scaled by sqrt(d_model); scale by sqrt(d_k), the size of one head":
            _wrong(kept, x, 6, scale=math.sqrt(24)),
        "you did not scale the scores: divide by sqrt(d_k)": _wrong(kept, x, 6, scale=1.0),
        "the output projection W_O is missing: apply self.W_O after merging the heads":
            _wrong(kept, x, 6, w_o=False),
        "you merged the heads with reshape(batch, seq_len, d_model) straight from (batch, "
        "num_heads, seq_len, d_k): transpose(1, 2) back first, then reshape":
            _wrong(kept, x, 6, merge="no-transpose"),
    }
    compare(w, expected_w, "attn_weights", {k: v[1] for k, v in mistakes.items()
                                            if "merged the heads" not in k},
            rtol=1e-6, atol=1e-9)
    compare(out, expected, "output", {k: v[0] for k, v in mistakes.items()},
            rtol=1e-6, atol=1e-9, steps=_weights_first(w, expected_w), where=AFTER_SOFTMAX)
    expect_unchanged(m, kept)


@value_check
def check_mha_mask(MultiHeadSelfAttention) -> None:
    """A causal (T, T) mask and a (B, 1, 1, T) padding mask, True = may attend."""
    m, kept = _build(MultiHeadSelfAttention, 20, 4, seed=44)
    ref = _reference(kept, 20, 4)
    x = torch.randn(2, 6, 20, generator=rng(45), dtype=torch.float64)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    keep = torch.tensor([[True] * 4 + [False] * 2, [True] * 6])            # (B, T)
    for mask, torch_kwargs, label in (
        (causal, {"attn_mask": ~causal}, "a causal (seq_len, seq_len) mask"),
        (keep[:, None, None, :], {"key_padding_mask": ~keep}, "a (batch, 1, 1, seq_len) mask"),
    ):
        out, w = _run(m, x, mask)
        expected, expected_w = ref(x, x, x, average_attn_weights=False, **torch_kwargs)
        mistakes = {
            "masked positions still get weight: fill masked scores with float('-inf') before "
            "the softmax, not 0": _wrong(kept, x, 4, mask=mask, fill=0.0),
            "your mask is inverted: True means 'may attend', so fill where the mask is False":
                _wrong(kept, x, 4, mask=~mask),
        }
        compare(w, expected_w, f"attn_weights with {label}",
                {k: v[1] for k, v in mistakes.items()}, rtol=1e-6, atol=1e-9)
        compare(out, expected, f"output with {label}", {k: v[0] for k, v in mistakes.items()},
                rtol=1e-6, atol=1e-9, steps=_weights_first(w, expected_w), where=AFTER_SOFTMAX)


@observed_check
def check_mha_device(MultiHeadSelfAttention) -> None:
    """Runs on another device (a GPU, or PyTorch's meta device) with a causal mask."""
    manual_seed(46)
    m = expect_module(MultiHeadSelfAttention, 16, 4)

    def inputs():
        return (torch.randn(2, 5, 16, generator=rng(47)),
                torch.ones(5, 5, dtype=torch.bool).tril())

    check_runs_on_any_device(m, inputs, "MultiHeadSelfAttention")
