"""Stand-ins for the classes learners build on earlier days, built on PyTorch's own functions.

:func:`course.previous.load_previous` returns one of these when a learner's earlier notebook is
missing, unfinished or wrong, and always while nbgrader grades a notebook, so that every day is
graded on that day's code alone. Each stand-in has the exact constructor signature, attribute
names and forward signature of the course's contract, so code written against the contract (and
the hidden tests, which read ``attn.W_Q`` or ``layer.norm1``) works with either. They are not
the from-scratch solutions: the arithmetic is delegated to ``F.multi_head_attention_forward``,
``F.scaled_dot_product_attention``, ``F.layer_norm``, ``F.gelu`` and ``torch.polar``. Day 8's
``SequenceClassifier`` is assembled from those, and Day 9's training functions are the plain
loops any correct answer computes (there is no built-in to delegate them to).

Letters in shape comments: B batch, T sequence length, C = d_model, H heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "FeedForward",
    "LayerNorm",
    "LearnedPositionalEncoding",
    "MultiHeadSelfAttention",
    "SequenceClassifier",
    "SinusoidalPositionalEncoding",
    "TinyGPT",
    "TransformerEncoderLayer",
    "evaluate",
    "scaled_dot_product_attention",
    "train_one_epoch",
    "warmup_cosine_schedule",
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


class SequenceClassifier(nn.Module):
    """Day 8's contract, built on the stand-ins above.

    ``input_proj`` (Linear input_dim -> d_model), ``cls_token`` (1, 1, d_model),
    ``pos_encoding`` (sinusoidal, for max_len + 1 positions), ``layers`` (ModuleList of Pre-LN
    encoder layers), ``norm`` (final LayerNorm), ``head`` (Linear d_model -> num_classes).
    ``forward(x)``: (B, T, input_dim) -> logits (B, num_classes), read at the CLS position 0.
    """

    def __init__(self, input_dim: int, num_classes: int, d_model: int, num_heads: int,
                 d_ff: int, num_layers: int, max_len: int) -> None:
        super().__init__()
        self.input_proj = nn.Linear(input_dim, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_encoding = SinusoidalPositionalEncoding(d_model, max_len + 1)
        self.layers = nn.ModuleList(TransformerEncoderLayer(d_model, num_heads, d_ff)
                                    for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.input_proj(x)                                       # (B, T, C)
        h = torch.cat([self.cls_token.expand(len(h), -1, -1), h], 1)  # (B, T + 1, C)
        h = self.pos_encoding(h)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h)[:, 0])                         # (B, classes)


def train_one_epoch(model: nn.Module, loader, optimizer: torch.optim.Optimizer,
                    scheduler=None, max_grad_norm: float | None = 1.0) -> float:
    """Day 9's contract: one pass over ``loader``; the example-weighted mean training loss."""
    model.train()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        loss = F.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        total += loss.item() * len(labels)
        count += len(labels)
    return total / max(count, 1)


@torch.no_grad()
def evaluate(model: nn.Module, loader) -> tuple[float, float]:
    """Day 9's contract: (mean loss, accuracy in [0, 1]) in eval mode, without gradients."""
    model.eval()
    device = next(model.parameters()).device
    total, correct, count = 0.0, 0, 0
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        logits = model(inputs)
        total += float(F.cross_entropy(logits, labels, reduction="sum"))
        correct += int((logits.argmax(-1) == labels).sum())
        count += len(labels)
    return total / max(count, 1), correct / max(count, 1)


def warmup_cosine_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int,
                           total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Day 9's contract: linear warm-up from 0, then cosine decay to 0 at ``total_steps``."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


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
    "day08_mnist_as_sequences": {"SequenceClassifier": SequenceClassifier},
    "day09_training_loop": {
        "train_one_epoch": train_one_epoch,
        "evaluate": evaluate,
        "warmup_cosine_schedule": warmup_cosine_schedule,
    },
    "day12_causal_attention_tinygpt": {"TinyGPT": TinyGPT},
}
