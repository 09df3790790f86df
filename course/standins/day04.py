"""Day 4's stand-in: ``MultiHeadSelfAttention`` on ``F.multi_head_attention_forward``.

Letters in shape comments: B batch, T sequence length, C = d_model, H heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MultiHeadSelfAttention"]


class MultiHeadSelfAttention(nn.Module):
    """Day 4's contract: ``W_Q``, ``W_K``, ``W_V``, ``W_O`` (nn.Linear(C, C), bias on).

    ``forward(x, mask=None)``: x (B, T, C), mask bool broadcastable to (B, H, T, T) with
    True = may attend -> (B, T, C); keeps ``self.attn_weights`` (B, H, T, T).
    """

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: each head "
                "needs d_model // num_heads dimensions"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.W_O = nn.Linear(d_model, d_model)
        self.attn_weights: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.shape
        H = self.num_heads
        attn_mask = None
        if mask is not None:
            allowed = mask.to(torch.bool).expand(B, H, T, T).reshape(B * H, T, T)
            attn_mask = ~allowed                       # PyTorch: True = may NOT attend
        xt = x.transpose(0, 1)                         # (T, B, C): the functional API is seq-first
        out, weights = F.multi_head_attention_forward(
            xt, xt, xt, C, H,
            in_proj_weight=None,
            in_proj_bias=torch.cat([self.W_Q.bias, self.W_K.bias, self.W_V.bias]),
            bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
            out_proj_weight=self.W_O.weight, out_proj_bias=self.W_O.bias,
            training=self.training, need_weights=True, attn_mask=attn_mask,
            use_separate_proj_weight=True, q_proj_weight=self.W_Q.weight,
            k_proj_weight=self.W_K.weight, v_proj_weight=self.W_V.weight,
            average_attn_weights=False,
        )
        self.attn_weights = weights                    # (B, H, T, T)
        return out.transpose(0, 1)                     # (B, T, C)
