"""Visible checks for Day 5: positional encodings."""

from __future__ import annotations

import torch
from torch import nn

from course.checking import CheckFailure, assert_close, call, expect_module, expect_tensor, passed


def check_sinusoidal(SinusoidalPositionalEncoding) -> None:
    """d_model=8, max_len=20: a (1, 20, 8) buffer, PE[0] = [0, 1, 0, 1, ...], x + pe[:, :T]."""
    pe_mod = expect_module(SinusoidalPositionalEncoding, 8, 20)
    buffers = dict(pe_mod.named_buffers())
    if "pe" not in buffers:
        raise CheckFailure("self.pe should be a registered buffer: "
                           "self.register_buffer('pe', table).")
    pe = expect_tensor(buffers["pe"], "self.pe", shape=(1, 20, 8))
    assert_close(pe[0, 0], torch.tensor([0.0, 1, 0, 1, 0, 1, 0, 1]), "PE at position 0",
                 hint="position 0 gives sin(0) = 0 on even columns and cos(0) = 1 on odd ones.")
    assert_close(pe[0, 1, 0], torch.tensor(0.8414710), "PE[pos=1, col=0] = sin(1)", rtol=1e-4,
                 atol=1e-5)
    x = torch.zeros(2, 5, 8)
    out = expect_tensor(call(pe_mod, x, name="forward(x)"), "forward(zeros(2, 5, 8))",
                        shape=(2, 5, 8))
    assert_close(out, pe[:, :5].expand(2, 5, 8), "forward(zeros)", rtol=1e-5, atol=1e-6)
    passed("pe is a (1, 20, 8) buffer, PE[0] = [0, 1, 0, 1, 0, 1, 0, 1], forward adds pe[:, :5]")


def check_learned(LearnedPositionalEncoding) -> None:
    """d_model=8, max_len=20: an nn.Embedding(20, 8) and forward = x + its first T rows."""
    mod = expect_module(LearnedPositionalEncoding, 8, 20)
    emb = getattr(mod, "embedding", None)
    if not isinstance(emb, nn.Embedding) or tuple(emb.weight.shape) != (20, 8):
        raise CheckFailure("self.embedding should be nn.Embedding(max_len, d_model) = "
                           f"nn.Embedding(20, 8), got {emb!r}.")
    x = torch.randn(2, 5, 8)
    out = expect_tensor(call(mod, x, name="forward(x)"), "forward(x)", shape=(2, 5, 8))
    assert_close(out, x + emb.weight[:5].detach(), "forward(x)", rtol=1e-5, atol=1e-6)
    passed("LearnedPositionalEncoding(8, 20): 160 trainable parameters, forward adds rows 0..4")
