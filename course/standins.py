"""Stand-ins for the classes learners build on earlier days, built on PyTorch's own functions.

:func:`course.previous.load_previous` returns one of these when a learner's earlier notebook is
missing, unfinished or wrong, and always while nbgrader grades a notebook, so that every day is
graded on that day's code alone. Each stand-in has the exact constructor signature, attribute
names and forward signature of the course's contract, so code written against the contract (and
the hidden tests, which read ``attn.W_Q`` or ``layer.norm1``) works with either. They are not
the from-scratch solutions: the arithmetic is delegated to ``F.multi_head_attention_forward``,
``F.scaled_dot_product_attention``, ``F.layer_norm``, ``F.gelu`` and ``torch.polar``.

Letters in shape comments: B batch, T sequence length, C = d_model, H heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "FeedForward",
    "LayerNorm",
    "LearnedPositionalEncoding",
    "MultiHeadSelfAttention",
    "SinusoidalPositionalEncoding",
    "TransformerEncoderLayer",
    "scaled_dot_product_attention",
    "STANDINS",
]


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


# Which stand-in replaces which learner object: {assignment: {name: object}}.
STANDINS: dict[str, dict[str, object]] = {
    "day02_queries_keys_values": {
        "scaled_dot_product_attention": scaled_dot_product_attention,
    },
    "day04_multi_head_attention": {"MultiHeadSelfAttention": MultiHeadSelfAttention},
    "day05_positional_encoding": {
        "SinusoidalPositionalEncoding": SinusoidalPositionalEncoding,
        "LearnedPositionalEncoding": LearnedPositionalEncoding,
    },
    "day06_encoder_layer": {
        "FeedForward": FeedForward,
        "LayerNorm": LayerNorm,
        "TransformerEncoderLayer": TransformerEncoderLayer,
        "MultiHeadSelfAttention": MultiHeadSelfAttention,
    },
}
