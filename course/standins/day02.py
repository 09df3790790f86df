"""Day 2's stand-in: ``scaled_dot_product_attention`` on PyTorch's own attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["scaled_dot_product_attention"]


def scaled_dot_product_attention(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Day 2's contract: (output (..., seq_q, d_v), attn_weights (..., seq_q, seq_k)).

    ``mask`` is boolean, broadcastable to (..., seq_q, seq_k), True = may attend. The weights
    are PyTorch's own attention applied to an identity matrix of values.
    """
    seq_k = K.size(-2)
    eye = torch.eye(seq_k, dtype=Q.dtype, device=Q.device)
    eye = eye.expand(*K.shape[:-2], seq_k, seq_k)                      # (..., seq_k, seq_k)
    weights = F.scaled_dot_product_attention(Q, K, eye, attn_mask=mask)  # (..., seq_q, seq_k)
    return weights @ V, weights
