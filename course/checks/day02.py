"""Visible checks for Day 2."""

from __future__ import annotations

import torch

from course.checking import CheckFailure, assert_close, call, expect_tensor, passed


def check_softmax(softmax) -> None:
    """A 2 x 3 example along the last dimension; rows must sum to 1."""
    x = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    out = expect_tensor(call(softmax, x), "softmax(x)", shape=(2, 3))
    assert_close(out, torch.softmax(x, dim=-1), "softmax(x)", rtol=1e-5, atol=1e-6)
    passed("softmax matches torch.softmax on a 2 x 3 example; rows sum to 1")


def check_attention(scaled_dot_product_attention) -> None:
    """Square shapes, no mask: output and weights equal PyTorch's."""
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(1, 3, 4, generator=g) for _ in range(3))
    out = call(scaled_dot_product_attention, Q, K, V)
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("return a tuple (output, attn_weights)")
    output, weights = out
    expect_tensor(weights, "attn_weights", shape=(1, 3, 3))
    assert_close(weights.sum(-1), torch.ones(1, 3), "attn_weights row sums")
    expected = torch.nn.functional.scaled_dot_product_attention(Q, K, V)
    assert_close(output, expected, "output", rtol=1e-4, atol=1e-5)
    passed("attention output (1, 3, 4) matches F.scaled_dot_product_attention; rows sum to 1")
