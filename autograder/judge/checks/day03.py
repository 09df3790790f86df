"""Hidden tests of Day 3: a single-head SelfAttention module."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    Step,
    call,
    compare,
    expect_module,
    expect_tensor,
    expect_unchanged,
    inject,
    observed_check,
    rng,
    value_check,
)
from course.device import check_runs_on_any_device


def _linear_attrs(module, d_model):
    for name in ("W_Q", "W_K", "W_V"):
        layer = getattr(module, name, None)
        if not isinstance(layer, torch.nn.Linear):
            raise CheckFailure(f"self.{name} should be an nn.Linear(d_model, d_model), got "
                               f"{type(layer).__name__}")
        if (layer.in_features, layer.out_features) != (d_model, d_model) or layer.bias is None:
            raise CheckFailure(f"self.{name} should be nn.Linear({d_model}, {d_model}) with a bias"
                               f", got in={layer.in_features}, out={layer.out_features}, "
                               f"bias={layer.bias is not None}")


@observed_check
def check_parameters(SelfAttention) -> None:
    """Three nn.Linear(d_model, d_model) with bias: 49,536 parameters at d_model = 128."""
    for d_model, expected in ((128, 49_536), (20, 3 * (20 * 20 + 20))):
        module = expect_module(SelfAttention, d_model)
        _linear_attrs(module, d_model)
        n = sum(p.numel() for p in module.parameters())
        if n != expected:
            raise CheckFailure(f"SelfAttention({d_model}) has {n:,} parameters, expected "
                               f"{expected:,} (3 x (d_model^2 + d_model)); no other parameters.")


def _setup(SelfAttention, d_model=12, batch=2, seq_len=5, seed=30):
    """The learner's module in float64 with the judge's weights injected, the judge's copy
    of those weights ({"W_Q": (weight, bias), ...}) and an input x (batch, seq_len, d_model)."""
    module = expect_module(SelfAttention, d_model)
    _linear_attrs(module, d_model)
    module = module.double()
    g = rng(seed)
    weights = {}   # distinct weights so that W_K used for V cannot go unnoticed
    for name in ("W_Q", "W_K", "W_V"):
        weights[f"{name}.weight"] = (torch.randn(d_model, d_model, generator=g,
                                                 dtype=torch.float64) / math.sqrt(d_model))
        weights[f"{name}.bias"] = torch.randn(d_model, generator=g, dtype=torch.float64) * 0.1
    kept = inject(module, weights)
    x = torch.randn(batch, seq_len, d_model, generator=g, dtype=torch.float64)
    return module, x, {n: (kept[f"{n}.weight"], kept[f"{n}.bias"]) for n in ("W_Q", "W_K", "W_V")}


def _expected(w, x, mask=None, v_from="W_V", scale=None, dim=-1, fill=float("-inf")):
    """(output, attn_weights) from the judge's weights ``w``, with one mistake at most."""
    q = F.linear(x, *w["W_Q"])                             # (B, T, d_model)
    k = F.linear(x, *w["W_K"])
    v = F.linear(x, *w[v_from])
    scale = math.sqrt(x.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) / scale               # (B, T, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    attn = torch.softmax(scores, dim=dim)
    return attn @ v, attn


def _weights_step(module, expected_w) -> list[Step]:
    """self.attn_weights as the step before the output (see ``first_difference``)."""
    return [Step("self.attn_weights", lambda: module.attn_weights, expected_w,
                 "before or in the softmax: Q = self.W_Q(x), K = self.W_K(x), the scores "
                 "Q @ K^T / sqrt(d_k), or the softmax's dimension (the keys, dim=-1)")]


AFTER_SOFTMAX = "after the softmax: the output is attn_weights @ V, with V = self.W_V(x)"


@value_check
def check_matches_torch(SelfAttention) -> None:
    """Output and attn_weights equal F.scaled_dot_product_attention on the judge's weights."""
    module, x, w = _setup(SelfAttention)
    with torch.no_grad():
        out = call(module, x, name="SelfAttention.forward")
        q, k, v = (F.linear(x, *w[n]) for n in ("W_Q", "W_K", "W_V"))
        expected = F.scaled_dot_product_attention(q, k, v)
        _, expected_w = _expected(w, x)
        mistakes = {
            "V is computed with W_K: values need their own projection, V = self.W_V(x)":
                _expected(w, x, v_from="W_K"),
            "V is computed with W_Q: values need their own projection, V = self.W_V(x)":
                _expected(w, x, v_from="W_Q"),
            "you did not scale the scores by 1/sqrt(d_k)": _expected(w, x, scale=1.0),
            "you divided by d_k instead of sqrt(d_k)": _expected(w, x, scale=12.0),
            "softmax over the wrong dimension: normalise over the keys (dim=-1)":
                _expected(w, x, dim=-2),
        }
    expect_tensor(out, "SelfAttention output", shape=(2, 5, 12))
    compare(out, expected, "SelfAttention output", {k: v[0] for k, v in mistakes.items()},
            rtol=1e-6, atol=1e-9, steps=_weights_step(module, expected_w), where=AFTER_SOFTMAX)
    attn = getattr(module, "attn_weights", None)
    expect_tensor(attn, "self.attn_weights", shape=(2, 5, 5))
    compare(attn, expected_w, "self.attn_weights", {k: v[1] for k, v in mistakes.items()},
            rtol=1e-6, atol=1e-9, hint="store the softmax weights of the last forward in "
            "self.attn_weights")
    expect_unchanged(module, _flat(w))


def _flat(w) -> dict:
    """{"W_Q.weight": ..., "W_Q.bias": ...} from {"W_Q": (weight, bias), ...}."""
    return {f"{n}.{part}": t for n, pair in w.items()
            for part, t in zip(("weight", "bias"), pair, strict=True)}


@value_check
def check_mask(SelfAttention) -> None:
    """A causal (seq, seq) mask and a (batch, 1, seq) padding mask, True = may attend."""
    module, x, w = _setup(SelfAttention, d_model=8, batch=2, seq_len=6, seed=31)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, :]   # (B, 1, T)
    for mask, label in ((causal, "a causal mask"), (padding, "a padding mask")):
        with torch.no_grad():
            out = call(module, x, mask, name="SelfAttention.forward(x, mask)")
            exp_out, exp_w = _expected(w, x, mask)
        mistakes = {"masked positions still get weight: fill with float('-inf') before the "
                    "softmax, not 0": _expected(w, x, mask, fill=0.0)[0],
                    "your mask is inverted: True means 'may attend'":
                        _expected(w, x, ~mask)[0]}
        compare(out, exp_out, f"output with {label}", mistakes, rtol=1e-6, atol=1e-9,
                steps=_weights_step(module, exp_w), where=AFTER_SOFTMAX)
        compare(module.attn_weights, exp_w, f"attn_weights with {label}", rtol=1e-6, atol=1e-9)
    expect_unchanged(module, _flat(w))


@observed_check
def check_device(SelfAttention) -> None:
    """Runs on a GPU (or, without one, creates no tensor off the input's device)."""
    module = expect_module(SelfAttention, 16)
    g = rng(32)
    check_runs_on_any_device(module, lambda: (torch.randn(2, 7, 16, generator=g),),
                             name="SelfAttention")


# Exercise 1: from averaging to attention. Three ways to average each token with its past;
# the judge draws the input and computes the running mean itself (cumsum / count).

def _bridge_input(seed: int) -> torch.Tensor:
    """x (B, T, C) float64 of drawn sizes: B 1-3, T 4-9, C 2-5."""
    g = rng(seed)
    B, T, C = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((1, 4), (4, 10),
                                                                             (2, 6)))
    return torch.randn(B, T, C, generator=g, dtype=torch.float64)


def _bridge_mistakes(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Classic mistakes of the three averages, each computed from the judge's input."""
    T = x.shape[1]
    past = torch.cumsum(x, dim=1)                                           # (B, T, C)
    future = torch.flip(torch.cumsum(torch.flip(x, [1]), dim=1), [1])       # sums of x[t:]
    tril = torch.ones(T, T, dtype=x.dtype).tril()
    return {
        "every position got the mean of the whole sequence: token t may only average "
        "positions 0..t (a causal, lower-triangular weight matrix)":
            x.mean(dim=1, keepdim=True).expand_as(x),
        "you summed instead of averaging: divide row t by its t + 1 terms (the rows of the "
        "weights must sum to 1)": past,
        "each token averaged itself and the tokens AFTER it: the past is below the diagonal, "
        "use torch.tril, not torch.triu": future / torch.arange(T, 0, -1, dtype=x.dtype)[:, None],
        "the weights are normalised along the wrong dimension: each ROW t must sum to 1 "
        "(W.sum(dim=1, keepdim=True), softmax over the last dimension)":
            (tril / tril.sum(dim=0, keepdim=True)) @ x,
        "every position was divided by the full length T: row t has only t + 1 terms":
            past / T,
    }


def _check_average(fn, name: str, seed: int) -> None:
    x = _bridge_input(seed)
    out = call(fn, x.clone(), name=f"{name}(x)")
    expect_tensor(out, f"{name}(x)", shape=tuple(x.shape), dtype=torch.float64)
    count = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]       # (T, 1)
    expected = torch.cumsum(x, dim=1) / count                              # (B, T, C)
    compare(out, expected, f"{name}(x)", _bridge_mistakes(x), rtol=1e-9, atol=1e-12,
            hint="out[b, t] must be the mean of x[b, 0], ..., x[b, t], token t included")


@value_check
def check_average_past_loop(average_past_loop) -> None:
    """The running mean over positions 0..t, on drawn sizes (float64)."""
    _check_average(average_past_loop, "average_past_loop", 301)


@value_check
def check_average_past_matmul(average_past_matmul) -> None:
    """The same running mean as one (T, T) @ (B, T, C) product, on drawn sizes."""
    _check_average(average_past_matmul, "average_past_matmul", 302)


@value_check
def check_average_past_softmax(average_past_softmax) -> None:
    """The same running mean from a softmax of masked zeros, on drawn sizes."""
    _check_average(average_past_softmax, "average_past_softmax", 303)
