"""Day 12's stand-in: ``TinyGPT`` built from ``nn.TransformerEncoderLayer`` with a causal mask.

Letters in shape comments: B batch, N sequence length, D = d_model, V vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["TinyGPT"]


class TinyGPT(nn.Module):
    """A GPT built from ``nn.TransformerEncoderLayer`` (Pre-LN, GELU, causal mask).

    The same constructor and ``forward`` as Day 12's ``TinyGPT``:
    ``TinyGPT(vocab_size, d_model=256, num_heads=4, num_layers=4, n_ctx=128)``,
    ``forward(idx)`` with idx (B, N) long -> logits (B, N, vocab_size). It differs in detail
    (PyTorch's attention has biases), so its parameter count is a little larger.
    """

    def __init__(self, vocab_size: int, d_model: int = 256, num_heads: int = 4,
                 num_layers: int = 4, n_ctx: int = 128) -> None:
        super().__init__()
        self.n_ctx = n_ctx
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(n_ctx, d_model)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, num_heads, dim_feedforward=4 * d_model,
                                       dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=True)
            for _ in range(num_layers)
        ])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        # float("-inf") above the diagonal: the additive form nn.TransformerEncoderLayer takes.
        upper = torch.triu(torch.ones(n_ctx, n_ctx, dtype=torch.bool), diagonal=1)
        self.register_buffer("attn_bias", torch.zeros(n_ctx, n_ctx).masked_fill(upper, -math.inf),
                             persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        _, n = idx.shape
        if n > self.n_ctx:
            raise ValueError(f"sequence length {n} exceeds n_ctx = {self.n_ctx}")
        x = self.tok(idx) + self.pos(torch.arange(n, device=idx.device))   # (B, N, D)
        bias = self.attn_bias[:n, :n].to(x.dtype)                            # (N, N)
        for block in self.blocks:
            x = block(x, src_mask=bias, is_causal=True)                      # (B, N, D)
        return self.head(self.ln_f(x))                                       # (B, N, V)
