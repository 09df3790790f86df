"""The judge's own reference computations, on weights the judge chose and kept.

Every function takes ``w``, a flat ``{state_dict name: tensor}`` dict as returned by
``autograder.judge.checks.inject`` / ``randomize``, and a ``prefix`` naming the submodule in it
(``"attn."``, ``"layers.0.ffn."``), so that a check computes what the learner's module must
return from the judge's copy of the weights, never from what the kernel reports. The layouts
are the course's contracts (``course/standins.py``): ``W_Q``/``W_K``/``W_V``/``W_O`` for
attention, ``linear1``/``linear2`` for the feed-forward block, ``weight``/``bias`` for a norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F


def linear(w: dict, prefix: str, x: torch.Tensor) -> torch.Tensor:
    """``x @ W^T + b`` with ``prefix + "weight"`` and (if present) ``prefix + "bias"``."""
    return F.linear(x, w[prefix + "weight"], w.get(prefix + "bias"))


def mha(w: dict, prefix: str, x: torch.Tensor, num_heads: int,
        mask: torch.Tensor | None = None, scale: float | None = None,
        fill: float = float("-inf")) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-head self-attention (Day 4's contract): (output (B, T, C), weights (B, H, T, T)).

    ``mask``: bool, broadcastable to (B, H, T, T), True = may attend. ``scale`` replaces
    sqrt(d_k) and ``fill`` the -inf of masked scores (to compute classic mistakes).
    """
    B, T, C = x.shape
    d_k = C // num_heads

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(B, T, num_heads, d_k).transpose(1, 2)        # (B, H, T, d_k)

    q = heads(linear(w, prefix + "W_Q.", x))
    k = heads(linear(w, prefix + "W_K.", x))
    v = heads(linear(w, prefix + "W_V.", x))
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_k) if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)                   # (B, H, T, T)
    attn = torch.softmax(scores, dim=-1)
    out = (attn @ v).transpose(1, 2).reshape(B, T, C)              # (B, T, C)
    return linear(w, prefix + "W_O.", out), attn


def layer_norm(w: dict, prefix: str, x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dimension with ``prefix + "weight"``/``"bias"``."""
    return F.layer_norm(x, (x.shape[-1],), w[prefix + "weight"], w[prefix + "bias"], eps)


def ffn(w: dict, prefix: str, x: torch.Tensor,
        activation: Callable[[torch.Tensor], torch.Tensor] = F.gelu) -> torch.Tensor:
    """Day 6's feed-forward block: linear2(activation(linear1(x)))."""
    return linear(w, prefix + "linear2.", activation(linear(w, prefix + "linear1.", x)))


def encoder_layer(w: dict, prefix: str, x: torch.Tensor, num_heads: int,
                  mask: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """Day 6's Pre-LN encoder layer: x + attn(norm1(x)), then + ffn(norm2(.))."""
    h = x + mha(w, prefix + "attn.", layer_norm(w, prefix + "norm1.", x, eps), num_heads,
                mask)[0]
    return h + ffn(w, prefix + "ffn.", layer_norm(w, prefix + "norm2.", h, eps))
