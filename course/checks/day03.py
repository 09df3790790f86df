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


def check_averages(average_past_loop, average_past_matmul, average_past_softmax) -> None:
    """The three running means agree with each other and with a small worked example."""
    x = torch.tensor([[[1.0, 10.0], [3.0, 20.0], [5.0, 60.0]]])          # (1, 3, 2)
    want = torch.tensor([[[1.0, 10.0], [2.0, 15.0], [3.0, 30.0]]])
    for fn in (average_past_loop, average_past_matmul, average_past_softmax):
        name = fn.__name__
        out = expect_tensor(call(fn, x.clone(), name=name), f"{name}(x)", shape=(1, 3, 2))
        assert_close(out, want, f"{name} on [[1, 10], [3, 20], [5, 60]]", rtol=1e-5, atol=1e-6,
                     hint="row t is the mean of rows 0..t: [1, 10], then [2, 15], then [3, 30]")
    torch.manual_seed(0)
    x = torch.randn(2, 7, 5)
    loop = call(average_past_loop, x, name="average_past_loop")
    for fn in (average_past_matmul, average_past_softmax):
        assert_close(call(fn, x, name=fn.__name__), loop, f"{fn.__name__} vs the loop",
                     rtol=1e-5, atol=1e-6)
    passed("the loop, the triangular matrix and the masked softmax give the same averages")
