"""Day 6's stand-ins: ``FeedForward``, ``LayerNorm`` (on ``F.layer_norm``) and the Pre-LN
``TransformerEncoderLayer`` built on Day 4's stand-in attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course.standins.day04 import MultiHeadSelfAttention

__all__ = ["FeedForward", "LayerNorm", "MultiHeadSelfAttention", "TransformerEncoderLayer"]


class FeedForward(nn.Module):
    """Day 6's contract: ``linear1`` (C -> d_ff), GELU, ``linear2`` (d_ff -> C)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(F.gelu(self.linear1(x))))


class LayerNorm(nn.Module):
    """Day 6's contract: parameters ``weight`` (ones) and ``bias`` (zeros) of shape (C,)."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class TransformerEncoderLayer(nn.Module):
    """Day 6's contract: Pre-LN, ``norm1``, ``attn``, ``norm2``, ``ffn``.

    ``forward(x, mask=None)``: x + attn(norm1(x)), then + ffn(norm2(.)); shapes as the
    attention's. Equal to ``nn.TransformerEncoderLayer(..., activation="gelu",
    batch_first=True, norm_first=True)`` given the same weights.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.attn = MultiHeadSelfAttention(d_model, num_heads)
        self.norm2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.dropout(self.attn(self.norm1(x), mask))
        return x + self.dropout(self.ffn(self.norm2(x)))
