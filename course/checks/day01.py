"""Visible checks for Day 1."""

from __future__ import annotations

import torch

from course.checking import CheckFailure, assert_close, call, expect_tensor, passed


def check_rnn_forward(rnn_forward) -> None:
    """Two steps by hand with h0 = 0: the first output is tanh(x_0 W_xh + b_h)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, generator=g)
    h0 = torch.zeros(2, 5)
    W_xh, W_hh, b_h = (torch.randn(4, 5, generator=g), torch.randn(5, 5, generator=g) * 0.5,
                       torch.randn(5, generator=g))
    out = call(rnn_forward, x, h0, W_xh, W_hh, b_h)
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("rnn_forward should return a tuple (outputs, h_last)")
    outputs, h_last = out
    expect_tensor(outputs, "outputs", shape=(2, 3, 5))
    expect_tensor(h_last, "h_last", shape=(2, 5))
    h1 = torch.tanh(x[:, 0] @ W_xh + b_h)
    assert_close(outputs[:, 0], h1, "outputs[:, 0]", rtol=1e-4, atol=1e-5)
    assert_close(outputs[:, 1], torch.tanh(x[:, 1] @ W_xh + h1 @ W_hh + b_h), "outputs[:, 1]",
                 rtol=1e-4, atol=1e-5, hint="h_1 = tanh(x_1 W_xh + h_0 W_hh + b_h)")
    assert_close(h_last, outputs[:, -1], "h_last", hint="h_last is outputs[:, -1]")
    passed("rnn_forward: shapes (2, 3, 5) and (2, 5); the first two steps match the formula")


def check_gradient_norms(gradient_norms_through_time) -> None:
    """Shape (seq_len,), non-negative, and larger for recent steps than for old ones."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 20, 3, generator=g)
    h0 = torch.zeros(1, 8)
    W_xh, W_hh, b_h = (torch.randn(3, 8, generator=g) * 0.5,
                       torch.randn(8, 8, generator=g) * 0.3, torch.zeros(8))
    norms = expect_tensor(call(gradient_norms_through_time, x, h0, W_xh, W_hh, b_h),
                          "gradient norms", shape=(20,))
    if bool((norms < 0).any()):
        raise CheckFailure("a norm cannot be negative")
    if not bool(norms[-1] > norms[0]):
        raise CheckFailure("the gradient should be largest for the most recent input step "
                           f"(t=19) and smallest for t=0; got {norms[0]:.3g} at t=0 and "
                           f"{norms[-1]:.3g} at t=19")
    passed(f"gradient norms: t=19 gets {float(norms[-1]):.2e}, t=0 only {float(norms[0]):.2e}")
