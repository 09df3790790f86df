"""The judge's own computations of Day 14's parts, from the weights it injects: RoPE (the
rotation of pairs (i, i + d/2) by position × base^(-2i/d)), causal attention with RoPE,
RMSNorm, and ModernGPT's logits. Every expected value of Day 14's checks is built here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _rope_reference(x: torch.Tensor, positions: torch.Tensor, base: float,
                    pairing: str = "half", sign: float = 1.0, exponent: str = "2i/d"
                    ) -> torch.Tensor:
    """RoPE via complex multiplication: (a + ib) * exp(i m theta_j) for each pair (a, b)."""
    d = x.size(-1)
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = base ** (-(2 * i) / d) if exponent == "2i/d" else base ** (-i / d)
    angle = positions.double()[:, None] * theta[None, :] * sign             # (T, d/2)
    rot = torch.polar(torch.ones_like(angle), angle)                          # (T, d/2)
    if pairing == "half":
        z = torch.complex(x[..., : d // 2], x[..., d // 2:]) * rot
        return torch.cat([z.real, z.imag], dim=-1)
    z = torch.complex(x[..., 0::2], x[..., 1::2]) * rot                       # interleaved
    return torch.stack([z.real, z.imag], dim=-1).flatten(-2)


def _reference_attention(x, w_qkv, w_proj, heads, base=10000.0, layout: str = ""):
    """Causal SDPA with RoPE (complex reference) over a whole sequence. ``layout`` computes
    a classic mistake instead: ``"no-head-transpose"`` splits the heads with view(B, H, T,
    d_k), ``"no-merge-transpose"`` merges them with reshape(B, T, D) from (B, H, T, d_k)."""
    b, n, d = x.shape
    dk = d // heads
    q, k, v = (x @ w_qkv.T).split(d, dim=2)                                   # 3 x (B, T, D)
    if layout == "no-head-transpose":
        q, k, v = (t.reshape(b, heads, n, dk) for t in (q, k, v))             # (B, H, T, d_k)
    else:
        q, k, v = (t.view(b, n, heads, dk).transpose(1, 2) for t in (q, k, v))  # (B, H, T, d_k)
    pos = torch.arange(n)
    q, k = _rope_reference(q, pos, base), _rope_reference(k, pos, base)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)               # (B, H, T, d_k)
    if layout == "no-merge-transpose":
        return y.reshape(b, n, d) @ w_proj.T                                  # (B, T, D)
    return y.transpose(1, 2).reshape(b, n, d) @ w_proj.T                      # (B, T, D)


SPLIT_WITHOUT_TRANSPOSE = (
    "the heads were split with view(B, H, T, d_k) straight from (B, T, D): view(B, T, H, d_k)"
    ".transpose(1, 2) keeps each token's features together")
MERGE_WITHOUT_TRANSPOSE = (
    "the heads were merged with view/reshape(B, T, D) straight from (B, H, T, d_k): "
    "transpose(1, 2) back to (B, T, H, d_k) first (then .contiguous().view(B, T, D)); "
    "without it, positions and heads mix")


def _rms(x: torch.Tensor, gain: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def _modern_gpt_ref(w: dict, idx: torch.Tensor, heads: int) -> torch.Tensor:
    """ModernGPT's logits (B, N, vocab) on the judge's weights: tok, per block RMSNorm ->
    causal attention with RoPE -> residual, RMSNorm -> SwiGLU -> residual, then norm_f and the
    head tied to tok."""
    # a tied matrix is listed once, under the module registered first: tok or head
    h = F.embedding(idx, w["tok.weight"] if "tok.weight" in w else w["head.weight"])  # (B, N, D)
    for i in range(len({k.split(".")[1] for k in w if k.startswith("blocks.")})):
        p = f"blocks.{i}."
        h = h + _reference_attention(_rms(h, w[p + "norm1.weight"]), w[p + "attn.qkv.weight"],
                                     w[p + "attn.proj.weight"], heads)
        z = _rms(h, w[p + "norm2.weight"])
        h = h + F.linear(F.silu(F.linear(z, w[p + "mlp.w_gate.weight"]))
                         * F.linear(z, w[p + "mlp.w_up.weight"]), w[p + "mlp.w_down.weight"])
    return F.linear(_rms(h, w["norm_f.weight"]),
                    w["head.weight"] if "head.weight" in w else w["tok.weight"])
