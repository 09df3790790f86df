"""Hidden tests of Day 2: a stable softmax and scaled dot-product attention."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    Step,
    call,
    compare,
    expect_tensor,
    rng,
    value_check,
)
from course.checking import forbid, in_kernel
from course.probes import GlobalSwapped, ReferenceSoftmax

SOFTMAX_NAMES = ("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax",
                 "torch.special.softmax")


def _softmax(fn, x, dim):
    with forbid(*SOFTMAX_NAMES):
        return call(fn, x, dim=dim, name=f"softmax(x, dim={dim})")


@value_check
def check_softmax_values(softmax) -> None:
    """Equal to torch.softmax along any dimension of a non-square 3-D tensor."""
    x = torch.randn(3, 5, 7, generator=rng(0), dtype=torch.float64)
    for dim in (-1, 1, 0):
        out = _softmax(softmax, x, dim)
        expect_tensor(out, f"softmax(x, dim={dim})", shape=tuple(x.shape))
        ones = {d: bool(torch.allclose(out.sum(d), torch.ones(()).double())) for d in range(3)}
        if not ones[dim % 3] and any(ones.values()):
            other = next(d for d, ok in ones.items() if ok)
            raise CheckFailure(
                f"softmax(x, dim={dim}) sums to 1 along dim={other}, not along dim={dim}: you "
                f"normalised over dim={other} instead of dim={dim}. Use the `dim` argument in "
                "both the max and the sum (keepdim=True)."
            )
        candidates = {"you returned exp(x) without dividing by the sum along dim": torch.exp(x)}
        compare(out, torch.softmax(x, dim=dim), f"softmax(x, dim={dim})", candidates,
                rtol=1e-6, atol=1e-9)
    sums = _softmax(softmax, x, -1).sum(-1)
    compare(sums, torch.ones(3, 5, dtype=torch.float64), "softmax rows' sums")


@value_check
def check_softmax_stable(softmax) -> None:
    """No NaN or inf for inputs of +-1000; -inf inputs get exactly zero weight.

    The values are these scales plus small offsets drawn per submission (``rng``)."""
    g = rng(1)
    big = torch.tensor([[1000.0, 1000.0, 999.0], [-1000.0, 0.0, 1000.0]]) \
        + 0.5 * torch.rand(2, 3, generator=g)
    out = _softmax(softmax, big, -1)
    expect_tensor(out, "softmax of inputs around 1000", shape=(2, 3))
    compare(out, torch.softmax(big, dim=-1), "softmax of inputs around 1000",
            hint="subtract the row maximum before exp(): softmax(x) == softmax(x - max(x)).")
    # Rows at very different scales: one maximum taken over the whole tensor makes every
    # exponent of the low rows underflow to 0, and 0 / 0 is NaN.
    scales = torch.tensor([[0.0, 1.0, 2.0, -1.0], [-1000.0, -999.0, -1001.0, -998.0],
                           [500.0, 499.5, 501.0, 498.0]]) + 0.5 * torch.rand(3, 4, generator=g)
    out = _softmax(softmax, scales, -1)
    expect_tensor(out, "softmax of rows at very different scales", shape=(3, 4), finite=False)
    shifted = torch.exp(scales - scales.max())
    global_max = shifted / shifted.sum(-1, keepdim=True)                 # NaN in rows 0, 1
    nan_rows = torch.isnan(out).any(-1)
    if bool(nan_rows.any()) and torch.equal(nan_rows, torch.isnan(global_max).any(-1)):
        raise CheckFailure(
            "softmax returned NaN for the rows whose values all lie far below the largest "
            "value of the whole tensor: you subtracted one maximum over the whole tensor "
            "(x.max()). Subtract each row's own maximum: x.amax(dim=dim, keepdim=True).")
    compare(out, torch.softmax(scales, dim=-1), "softmax of rows at very different scales",
            hint="subtract each row's own maximum (along dim), keepdim=True.")
    neg_inf = torch.tensor([[0.0, float("-inf"), 1.0, float("-inf")]]) \
        + torch.rand(1, 4, generator=g)
    out = _softmax(softmax, neg_inf, -1)
    compare(out, torch.softmax(neg_inf, dim=-1), "softmax with -inf entries",
            hint="a -inf score must get weight exactly 0: exp(-inf) = 0. Subtract the row "
                 "maximum (not the minimum) so the largest exponent is exp(0) = 1.")


def _reference(Q, K, V, mask=None, scale=None, fill=float("-inf"), dim=-1):
    scale = math.sqrt(Q.shape[-1]) if scale is None else scale
    scores = Q @ K.transpose(-2, -1) / scale
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    w = torch.softmax(scores, dim=dim)
    return w @ V, w


AFTER_SOFTMAX = ("after the softmax: the output is attn_weights @ V, each query's weights "
                 "times the values (shape (..., seq_q, d_v))")


def _weights_first(w, expected_w) -> list[Step]:
    """The weights as the step before the output (see ``first_difference``)."""
    return [Step("attn_weights", w, expected_w, "before or in the softmax")]


def _sdpa(fn, *args):
    # One mistake costs once: the attention is graded with the course's softmax in the place
    # of the learner's `softmax` (which day02_softmax_values grades on its own).
    swapped = in_kernel(GlobalSwapped, fn, "softmax", in_kernel(ReferenceSoftmax))
    with forbid("torch.nn.functional.scaled_dot_product_attention"):
        out = call(swapped, *args, name="scaled_dot_product_attention")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("scaled_dot_product_attention should return a tuple "
                           f"(output, attn_weights), got {type(out).__name__}.")
    return out


@value_check
def check_attention_values(scaled_dot_product_attention) -> None:
    """Equal to F.scaled_dot_product_attention with seq_q != seq_k != d_k != d_v, 4-D inputs."""
    g = rng(1)
    Q = torch.randn(2, 3, 4, 8, generator=g, dtype=torch.float64)   # (B, H, seq_q, d_k)
    K = torch.randn(2, 3, 6, 8, generator=g, dtype=torch.float64)   # (B, H, seq_k, d_k)
    V = torch.randn(2, 3, 6, 5, generator=g, dtype=torch.float64)   # (B, H, seq_k, d_v)
    out, w = _sdpa(scaled_dot_product_attention, Q, K, V)
    expected = F.scaled_dot_product_attention(Q, K, V)
    _, expected_w = _reference(Q, K, V)
    d_k, d_v = 8, 5
    scale_mistakes = {
        "you did not scale the scores: divide Q @ K^T by sqrt(d_k)": _reference(Q, K, V, scale=1.0),
        "you scaled by sqrt(d_v) (V's last dimension): scale by sqrt(d_k), the size of the "
        "query/key vectors": _reference(Q, K, V, scale=math.sqrt(d_v)),
        "you divided by d_k: divide by sqrt(d_k)": _reference(Q, K, V, scale=d_k),
        "you scaled by sqrt(seq_k): scale by sqrt(d_k), the last dimension of Q and K":
            _reference(Q, K, V, scale=math.sqrt(6)),
        "softmax over the wrong dimension: each query's weights over the keys (dim=-1) "
        "must sum to 1": _reference(Q, K, V, dim=-2),
    }
    compare(w, expected_w, "attn_weights", {k: v[1] for k, v in scale_mistakes.items()},
            rtol=1e-6, atol=1e-9)
    compare(out, expected, "output", {k: v[0] for k, v in scale_mistakes.items()},
            rtol=1e-6, atol=1e-9, steps=_weights_first(w, expected_w), where=AFTER_SOFTMAX)


@value_check
def check_attention_mask(scaled_dot_product_attention) -> None:
    """Boolean masks (True = may attend) of shapes (seq_q, seq_k) and (B, 1, 1, seq_k)."""
    g = rng(2)
    Q = torch.randn(2, 2, 3, 4, generator=g, dtype=torch.float64)
    K = torch.randn(2, 2, 5, 4, generator=g, dtype=torch.float64)
    V = torch.randn(2, 2, 5, 6, generator=g, dtype=torch.float64)
    causal_like = torch.ones(3, 5, dtype=torch.bool).tril(diagonal=1)   # (seq_q, seq_k)
    padding = torch.tensor([True, True, True, False, False]).repeat(2, 1)
    padding[1, 4] = True
    padding = padding[:, None, None, :]                                   # (B, 1, 1, seq_k)
    for mask, label in ((causal_like, "a (seq_q, seq_k) mask"),
                        (padding, "a (batch, 1, 1, seq_k) padding mask")):
        out, w = _sdpa(scaled_dot_product_attention, Q, K, V, mask)
        exp_out = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)
        _, exp_w = _reference(Q, K, V, mask)
        over_queries = torch.isnan(_reference(Q, K, V, mask, dim=-2)[1])     # fully masked keys
        if isinstance(w, torch.Tensor) and w.shape == exp_w.shape and bool(over_queries.any()) \
                and torch.equal(torch.isnan(w.detach()), over_queries):
            raise CheckFailure(f"attn_weights with {label} contain NaN exactly where a key is "
                               "masked for every query: your softmax runs over the queries "
                               "(dim=-2). Each query's weights over the keys (dim=-1) must sum "
                               "to 1.")
        mistakes = {
            "masked positions still get weight: fill the masked scores with float('-inf') "
            "before the softmax, not 0": _reference(Q, K, V, mask, fill=0.0),
            "your mask is inverted: True means 'may attend', so fill where the mask is False "
            "(scores.masked_fill(~mask, float('-inf')))": _reference(Q, K, V, ~mask),
        }
        compare(w, exp_w, f"attn_weights with {label}", {k: v[1] for k, v in mistakes.items()},
                rtol=1e-6, atol=1e-9)
        compare(out, exp_out, f"output with {label}", {k: v[0] for k, v in mistakes.items()},
                rtol=1e-6, atol=1e-9, steps=_weights_first(w, exp_w), where=AFTER_SOFTMAX)
    # Three dims (no head axis) and a single query: shapes the visible check never shows.
    q1, k1, v1 = Q[:, 0, :1], K[:, 0], V[:, 0]
    out, w = _sdpa(scaled_dot_product_attention, q1, k1, v1)
    compare(out, F.scaled_dot_product_attention(q1, k1, v1), "output for 3-D inputs, seq_q=1",
            rtol=1e-6, atol=1e-9, steps=_weights_first(w, _reference(q1, k1, v1)[1]),
            where=AFTER_SOFTMAX)
    compare(w.sum(-1), torch.ones(2, 1, dtype=torch.float64), "attn_weights row sums")
