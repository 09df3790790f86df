"""Hidden tests of Day 14's grouped-query attention: ``GroupedQueryAttention``.

The reference projects with the judge's injected weights, rotates with the complex-number RoPE
of ``autograder.judge.checks.day14``, gives query head h the key/value head h // (H / G) by indexing
(not by the learner's repeat), and attends with ``F.scaled_dot_product_attention``; nothing of
the learner's is used to compute it. The number of heads and of shared heads is drawn per
submission from a few valid pairs, and multi-query (G = 1) and multi-head (G = H) attention are
checked too.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    call,
    compare,
    expect_module,
    inject,
    rng,
    upstream,
    value_check,
)
from autograder.judge.checks.day14 import _rope_first
from autograder.judge.checks.day14_reference import (
    MERGE_WITHOUT_TRANSPOSE,
    SPLIT_WITHOUT_TRANSPOSE,
    _rope_reference,
)
from course.checking import expect_tensor

# (num_heads, num_kv_heads) pairs with a group of 2 or more and more than one shared head:
# one is drawn per submission, so no learner knows in advance which heads share.
PAIRS = ((6, 2), (6, 3), (8, 2), (8, 4), (4, 2))
D_K = 4


def reference(x: torch.Tensor, w: dict[str, torch.Tensor], heads: int, kv_heads: int, *,
              head_of=None, values_first: bool = False, layout: str = "") -> torch.Tensor:
    """Causal GQA over x (B, T, D) with the injected weights ``w``.

    ``head_of(h, heads, kv_heads)`` maps query head h to its key/value head (h // group, the
    convention); ``values_first`` reads kv_proj's rows as values then keys, ``layout``
    ``"no-head-transpose"`` splits every head with view(B, heads, T, d_k) and
    ``"no-merge-transpose"`` merges with reshape(B, T, D) from (B, H, T, d_k) (classic
    mistakes).
    """
    b, n, d = x.shape
    dk = d // heads
    head_of = head_of or (lambda h, heads, kv: h // (heads // kv))

    def split(t: torch.Tensor, h: int) -> torch.Tensor:                   # (B, T, h d_k) ->
        if layout == "no-head-transpose":
            return t.reshape(b, h, n, dk)                                    # (B, h, T, d_k)
        return t.view(b, n, h, dk).transpose(1, 2)                           # (B, h, T, d_k)

    q = split(x @ w["q_proj.weight"].T, heads)                               # (B, H, T, d_k)
    k, v = (x @ w["kv_proj.weight"].T).split(kv_heads * dk, dim=2)          # (B, T, G d_k) x 2
    if values_first:
        k, v = v, k
    k, v = split(k, kv_heads), split(v, kv_heads)                           # (B, G, T, d_k)
    pos = torch.arange(n)
    q, k = _rope_reference(q, pos, 10000.0), _rope_reference(k, pos, 10000.0)
    index = torch.tensor([head_of(h, heads, kv_heads) for h in range(heads)])   # (H,)
    y = F.scaled_dot_product_attention(q, k[:, index], v[:, index], is_causal=True)
    if layout != "no-merge-transpose":
        y = y.transpose(1, 2)                                               # (B, T, H, d_k)
    return y.reshape(b, n, d) @ w["proj.weight"].T                           # (B, T, D)


def _build(GroupedQueryAttention, heads: int, kv_heads: int, seed: int):
    """The learner's module with the judge's weights; returns (module, weights, d_model)."""
    d = heads * D_K
    name = f"GroupedQueryAttention({d}, {heads}, {kv_heads}, 16)"
    attn = expect_module(GroupedQueryAttention, d, heads, kv_heads, 16, name=name).double().eval()
    shapes = {"q_proj": (d, d), "kv_proj": (2 * kv_heads * D_K, d), "proj": (d, d)}
    for layer, shape in shapes.items():
        module = getattr(attn, layer, None)
        if not isinstance(module, nn.Linear) or tuple(module.weight.shape) != shape:
            raise CheckFailure(
                f"{name} needs `self.{layer}` = nn.Linear with weight {shape} and no bias "
                f"(kv_proj: D -> 2 * num_kv_heads * d_k = {shape[0]}, keys first).")
    g = rng(seed)
    weights = {f"{layer}.weight": torch.randn(shape, generator=g, dtype=torch.float64)
               / math.sqrt(d) for layer, shape in shapes.items()}
    return attn, inject(attn, weights), d


def _cache_shape(cache, label: str, shape: tuple[int, ...], heads: int) -> None:
    if not isinstance(cache, tuple | list) or len(cache) != 2:
        raise CheckFailure(f"{label}: the cache should be a tuple (k, v), got "
                           f"{type(cache).__name__}.")
    for part, t in zip("kv", cache, strict=True):
        t = expect_tensor(t, f"{label}: cached {part}")
        if tuple(t.shape) == shape:
            continue
        if t.dim() == 4 and t.size(1) == heads and heads != shape[1]:
            raise CheckFailure(
                f"{label}: cached {part} has shape {tuple(t.shape)}, one row per query head; "
                f"expected {shape}: cache the num_kv_heads = {shape[1]} shared heads, before "
                "they are repeated for the queries. The smaller cache is what GQA is for.")
        raise CheckFailure(f"{label}: cached {part} has shape {tuple(t.shape)}, expected {shape} "
                           "(B, num_kv_heads, past + T, d_k).")


def _values(attn, w, d: int, heads: int, kv_heads: int, seed: int, decode: bool) -> None:
    g = rng(seed)
    x = torch.randn(2, 7, d, generator=g, dtype=torch.float64)
    # Decoding reads tokens of its own: on the full pass's tokens it could replay that pass's
    # outputs from memory instead of attending over the cache.
    x_dec = torch.randn(2, 7, d, generator=g, dtype=torch.float64)
    expected = reference(x, w, heads, kv_heads)
    candidates = {}
    if 1 < kv_heads < heads:
        candidates["query head h read key/value head h % num_kv_heads (the heads were tiled "
                   "with .repeat or .expand in the wrong order): query head h shares key/value "
                   "head h // (num_heads // num_kv_heads), k.repeat_interleave(group, dim=1)"] = \
            reference(x, w, heads, kv_heads, head_of=lambda h, hs, kv: h % kv)
    candidates["kv_proj's outputs were read as values, then keys: the first num_kv_heads * d_k "
               "outputs are the keys"] = reference(x, w, heads, kv_heads, values_first=True)
    candidates[MERGE_WITHOUT_TRANSPOSE] = reference(x, w, heads, kv_heads,
                                                    layout="no-merge-transpose")
    candidates[SPLIT_WITHOUT_TRANSPOSE] = reference(x, w, heads, kv_heads,
                                                    layout="no-head-transpose")
    label = f"GroupedQueryAttention({d}, {heads}, {kv_heads}, 16)"
    with torch.no_grad():
        out = call(attn, x, name=f"{label} over 7 tokens without a cache")
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailure("forward should return a tuple (y, (k, v)).")
        compare(out[0], expected, f"{label}: output over 7 tokens", candidates,
                rtol=1e-5, atol=1e-6,
                hint="project q with q_proj into num_heads heads and k, v with kv_proj into "
                     "num_kv_heads heads; rotate q and k; give each group of num_heads // "
                     "num_kv_heads query heads one key/value head.")
        _cache_shape(out[1], f"{label} without a cache", (2, kv_heads, 7, D_K), heads)
        if not decode:
            return
        y1, c1 = call(attn, x_dec[:, :5], name=f"{label}: prefill of 5 tokens")
        _cache_shape(c1, f"{label} after a prefill of 5 tokens", (2, kv_heads, 5, D_K), heads)
        y2, c2 = call(attn, x_dec[:, 5:6], c1, name=f"{label}: decoding token 6 with the cache")
        _cache_shape(c2, f"{label} after decoding token 6", (2, kv_heads, 6, D_K), heads)
        y3, c3 = call(attn, x_dec[:, 6:7], c2, name=f"{label}: decoding token 7 with the cache")
        _cache_shape(c3, f"{label} after decoding token 7", (2, kv_heads, 7, D_K), heads)
    compare(torch.cat([y1, y2, y3], dim=1), reference(x_dec, w, heads, kv_heads),
            f"{label}: prefill + cached decoding",
            rtol=1e-5, atol=1e-6,
            hint="rotate the new token for position past, append its (shared) keys and values "
                 "to the cache once, then repeat them for the queries.")


@value_check
def check_gqa_values(GroupedQueryAttention) -> None:
    """A drawn (num_heads, num_kv_heads) pair, then multi-query (G = 1) and multi-head (G = H):
    outputs equal the reference over 7 tokens and the cache holds (B, num_kv_heads, S, d_k);
    for the drawn pair, prefill + decoding equals the full pass too."""
    heads, kv_heads = PAIRS[int(torch.randint(len(PAIRS), (1,), generator=rng(70)))]
    cases = [(heads, kv_heads, 71), (heads, 1, 72), (heads, heads, 73)]
    for case_heads, case_kv, seed in cases:
        attn, w, d = _build(GroupedQueryAttention, case_heads, case_kv, seed)
        with upstream(_rope_first([attn], D_K)):
            # decoding with the cache once, on the drawn pair; the other two a full pass each
            _values(attn, w, d, case_heads, case_kv, seed + 100, decode=seed == 71)
