"""Visible checks for Day 3."""

from __future__ import annotations

import torch

from course.checking import CheckFailure, assert_close, call, expect_module, expect_tensor, passed


def check_self_attention(SelfAttention) -> None:
    """Parameter count at d_model = 128, output shape, and weights that sum to 1."""
    module = expect_module(SelfAttention, 128)
    n = sum(p.numel() for p in module.parameters())
    if n != 49_536:
        raise CheckFailure(f"SelfAttention(128) has {n:,} parameters; expected 49,536 "
                           "(3 nn.Linear(128, 128) with bias: 3 x 16,512)")
    x = torch.randn(2, 10, 128)
    out = expect_tensor(call(module, x, name="SelfAttention.forward"), "output",
                        shape=(2, 10, 128))
    w = expect_tensor(getattr(module, "attn_weights", None), "self.attn_weights",
                      shape=(2, 10, 10))
    assert_close(w.sum(-1), torch.ones(2, 10), "attn_weights row sums", rtol=1e-4, atol=1e-5)
    passed(f"SelfAttention(128): 49,536 parameters, output {tuple(out.shape)}, "
           "weights (2, 10, 10) with rows summing to 1")
