"""Day 5's stand-ins: the sinusoidal (a buffer) and the learned positional encoding."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["LearnedPositionalEncoding", "SinusoidalPositionalEncoding"]


class SinusoidalPositionalEncoding(nn.Module):
    """Day 5's contract: a buffer ``pe`` (1, max_len, d_model); ``forward(x) = x + pe[:, :T]``.

    PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), computed here as the
    angle of a unit complex number. An odd d_model keeps the first d_model columns.
    """

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        pairs = (d_model + 1) // 2
        freqs = torch.pow(10000.0, -torch.arange(pairs, dtype=torch.float64) * 2 / d_model)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), freqs)  # (max_len, pairs)
        unit = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))  # (.., pairs, 2)
        table = unit.flip(-1).reshape(max_len, 2 * pairs)[:, :d_model]          # sin, cos, ...
        self.register_buffer("pe", table.to(torch.get_default_dtype()).unsqueeze(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} is longer than max_len={self.max_len}")
        return x + self.pe[:, :T]


class LearnedPositionalEncoding(nn.Module):
    """Day 5's learned variant: ``embedding`` = nn.Embedding(max_len, d_model)."""

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"sequence length {T} is longer than max_len={self.max_len}")
        return x + self.embedding(torch.arange(T, device=x.device))
