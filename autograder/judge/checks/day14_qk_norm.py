"""Hidden tests of Day 14's QK-norm: ``CachedCausalSelfAttention(..., qk_norm=True)``.

The reference normalises each head's queries and keys with the RMSNorm formula written here
(gains injected), rotates them with the complex-number RoPE of ``autograder.judge.checks.day14`` and
attends with ``F.scaled_dot_product_attention``; nothing of the learner's is used to compute it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    call,
    compare,
    expect_module,
    rng,
    upstream,
    value_check,
)
from autograder.judge.checks.day14 import _cache_len, _rope_first
from autograder.judge.checks.day14_reference import _rope_reference
from course.checking import matches

EPS = 1e-6      # RMSNorm's default eps in the notebook's constructor


def _rms(t: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + EPS) * gain


def _reference(x, w_qkv, w_proj, heads, g_q, g_k, *, norm_q=True, norm_k=True,
               after_rope=False) -> torch.Tensor:
    """Causal attention over x (B, T, D) with QK-norm (and the classic misplacements)."""
    b, n, d = x.shape
    q, k, v = (x @ w_qkv.T).split(d, dim=2)                                  # (B, T, D) each
    q, k, v = (t.view(b, n, heads, d // heads).transpose(1, 2) for t in (q, k, v))
    pos = torch.arange(n)

    def norms(q, k):
        return (_rms(q, g_q) if norm_q else q), (_rms(k, g_k) if norm_k else k)

    if after_rope:
        q, k = norms(_rope_reference(q, pos, 10000.0), _rope_reference(k, pos, 10000.0))
    else:
        q, k = norms(q, k)
        q, k = _rope_reference(q, pos, 10000.0), _rope_reference(k, pos, 10000.0)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)             # (B, H, T, d_k)
    return y.transpose(1, 2).reshape(b, n, d) @ w_proj.T                     # (B, T, D)


def _rmsnorm_right(norm, width: int) -> bool:
    """Whether the learner's RMSNorm inside the attention computes x / rms(x) * weight."""
    x = torch.randn(3, width, generator=rng(62), dtype=torch.float64)
    gain = norm.weight.detach().double()
    return matches(norm(x.to(norm.weight.dtype)), _rms(x, gain), rtol=1e-4, atol=1e-5)


@value_check
def check_qk_norm_values(CachedCausalSelfAttention) -> None:
    """qk_norm=True: q_norm/k_norm of width d_k, applied before RoPE; the cache still agrees."""
    d, heads, max_len = 24, 3, 16
    dk = d // heads
    attn = expect_module(CachedCausalSelfAttention, d, heads, max_len, qk_norm=True,
                         name=f"CachedCausalSelfAttention({d}, {heads}, {max_len}, "
                              "qk_norm=True)").double().eval()
    for name in ("q_norm", "k_norm"):
        weight = getattr(getattr(attn, name, None), "weight", None)
        if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (dk,):
            raise CheckFailure(
                f"with qk_norm=True, self.{name} should be RMSNorm(d_k) = RMSNorm({dk}) with a "
                f"weight of shape ({dk},): one norm over each head's width, shared by the heads.")
    g = rng(63)
    w_qkv = torch.randn(3 * d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    w_proj = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    g_q = 1 + 0.5 * torch.randn(dk, generator=g, dtype=torch.float64)
    g_k = 1 + 0.5 * torch.randn(dk, generator=g, dtype=torch.float64)
    with torch.no_grad():
        attn.qkv.weight.copy_(w_qkv)
        attn.proj.weight.copy_(w_proj)
        attn.q_norm.weight.copy_(g_q)
        attn.k_norm.weight.copy_(g_k)
    x = torch.randn(2, 7, d, generator=g, dtype=torch.float64)
    # Decoding reads tokens of its own: on the full pass's tokens it could replay that pass's
    # outputs from memory instead of attending over the cache.
    x_dec = torch.randn(2, 7, d, generator=g, dtype=torch.float64)
    rmsnorm = ("your RMSNorm fails day14_rmsnorm_matches_torch",
               lambda: _rmsnorm_right(attn.q_norm, dk))
    with upstream(_rope_first([attn], dk), rmsnorm):
        _values(attn, x, w_qkv, w_proj, heads, g_q, g_k, x_dec)


def _values(attn, x, w_qkv, w_proj, heads, g_q, g_k, x_dec) -> None:
    expected = _reference(x, w_qkv, w_proj, heads, g_q, g_k)

    def variant(**kwargs) -> torch.Tensor:
        return _reference(x, w_qkv, w_proj, heads, g_q, g_k, **kwargs)

    with torch.no_grad():
        out = call(attn, x, name="attention with qk_norm=True over 7 tokens")
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailure("forward should return a tuple (y, (k, v)).")
        compare(out[0], expected, "output with qk_norm=True over 7 tokens",
                {"q_norm and k_norm are never applied: after the head split, "
                 "q, k = self.q_norm(q), self.k_norm(k)": variant(norm_q=False, norm_k=False),
                 "only the queries are normalised: apply self.k_norm to k too":
                     variant(norm_k=False),
                 "only the keys are normalised: apply self.q_norm to q too":
                     variant(norm_q=False),
                 "q and k are normalised after RoPE: normalise the head vectors first, then "
                 "rotate them": variant(after_rope=True)},
                rtol=1e-5, atol=1e-6)
        y1, c1 = call(attn, x_dec[:, :5], name="prefill of 5 tokens with qk_norm=True")
        y2, c2 = call(attn, x_dec[:, 5:6], c1, name="decoding token 6 with qk_norm=True")
        y3, c3 = call(attn, x_dec[:, 6:7], c2, name="decoding token 7 with qk_norm=True")
    for label, cache, n in (("prefill", c1, 5), ("token 6", c2, 6), ("token 7", c3, 7)):
        if _cache_len(cache, f"qk_norm=True, after {label}") != n:
            raise CheckFailure(f"with qk_norm=True the cache should hold {n} keys after "
                               f"{label}.")
    compare(torch.cat([y1, y2, y3], dim=1), _reference(x_dec, w_qkv, w_proj, heads, g_q, g_k),
            "outputs of prefill + cached decoding with qk_norm=True", rtol=1e-5, atol=1e-6,
            hint="normalise this step's keys once, before RoPE and before they are appended to "
                 "the cache: the cached keys are already normalised and rotated.")
