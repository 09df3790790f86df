"""Hidden tests of Day 1: an RNN by hand, and the gradient that vanishes through time."""

from __future__ import annotations

import torch

from autograder.judge.checks import CheckFailure, call, compare, expect_tensor, rng, value_check
from course.checking import in_kernel
from course.probes import GlobalSwapped, ReferenceRNNForward


def _inputs(batch=3, seq_len=5, d_in=4, d_h=6, seed=10, w_scale=0.5):
    g = rng(seed)
    x = torch.randn(batch, seq_len, d_in, generator=g, dtype=torch.float64)
    h0 = torch.randn(batch, d_h, generator=g, dtype=torch.float64)
    W_xh = torch.randn(d_in, d_h, generator=g, dtype=torch.float64) * w_scale
    W_hh = torch.randn(d_h, d_h, generator=g, dtype=torch.float64) * w_scale
    b_h = torch.randn(d_h, generator=g, dtype=torch.float64) * 0.1
    return x, h0, W_xh, W_hh, b_h


def _torch_rnn(x, h0, W_xh, W_hh, b_h):
    """nn.RNN with the same weights (it stores them transposed: weight_ih is (d_h, d_in))."""
    d_in, d_h = W_xh.shape
    rnn = torch.nn.RNN(d_in, d_h, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b_h)
        rnn.bias_hh_l0.zero_()
    out, h_n = rnn(x, h0.unsqueeze(0))          # out (B, T, d_h), h_n (1, B, d_h)
    return out, h_n.squeeze(0)


def _manual(x, h0, W_xh, W_hh, b_h, recur=True, act=torch.tanh, start=None):
    h = h0 if start is None else start
    outs = []
    for t in range(x.shape[1]):
        pre = x[:, t] @ W_xh + b_h
        if recur:
            pre = pre + h @ W_hh
        h = act(pre)
        outs.append(h)
    return torch.stack(outs, dim=1), h         # (B, T, d_h), (B, d_h)


def _run(rnn_forward, *args):
    out = call(rnn_forward, *args, name="rnn_forward")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure(f"rnn_forward should return (outputs, h_last), got {type(out).__name__}")
    return out


@value_check
def check_rnn_forward(rnn_forward) -> None:
    """Equal to nn.RNN with copied weights; d_in != d_h != seq_len; h0 not zero."""
    x, h0, W_xh, W_hh, b_h = _inputs()
    outputs, h_last = _run(rnn_forward, x, h0, W_xh, W_hh, b_h)
    expected, expected_last = _torch_rnn(x, h0, W_xh, W_hh, b_h)
    expect_tensor(outputs, "outputs", shape=(3, 5, 6))
    expect_tensor(h_last, "h_last", shape=(3, 6))
    mistakes = {
        "your h_t ignores h_{t-1}: the recurrence is h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h), "
        "and it is the h_{t-1} W_hh term that carries memory":
            _manual(x, h0, W_xh, W_hh, b_h, recur=False)[0],
        "you started from zeros instead of h0": _manual(x, h0, W_xh, W_hh, b_h,
                                                        start=torch.zeros_like(h0))[0],
        "you forgot the tanh non-linearity": _manual(x, h0, W_xh, W_hh, b_h,
                                                     act=lambda z: z)[0],
    }
    compare(outputs, expected, "outputs", mistakes, rtol=1e-6, atol=1e-9)
    compare(h_last, expected_last, "h_last", hint="h_last is the hidden state after the "
            "last step: outputs[:, -1]")


@value_check
def check_rnn_single_step(rnn_forward) -> None:
    """seq_len = 1 and batch = 1: the shapes the visible check never shows."""
    x, h0, W_xh, W_hh, b_h = _inputs(batch=1, seq_len=1, d_in=2, d_h=3, seed=11)
    outputs, h_last = _run(rnn_forward, x, h0, W_xh, W_hh, b_h)
    expected, expected_last = _torch_rnn(x, h0, W_xh, W_hh, b_h)
    compare(outputs, expected, "outputs for seq_len=1", rtol=1e-6, atol=1e-9)
    compare(h_last, expected_last, "h_last for seq_len=1", rtol=1e-6, atol=1e-9)


def _expected_grad_norms(x, h0, W_xh, W_hh, b_h, wrt_all=False):
    x = x.clone().requires_grad_(True)
    out, h_last = _torch_rnn(x, h0, W_xh, W_hh, b_h)
    (out.sum() if wrt_all else h_last.sum()).backward()
    return x.grad.pow(2).sum(dim=(0, 2)).sqrt()   # (seq_len,): norm over batch and features


@value_check
def check_gradient_norms(gradient_norms_through_time) -> None:
    """Norms of d(h_last.sum())/d x_t for every t, compared with autograd through nn.RNN."""
    x, h0, W_xh, W_hh, b_h = _inputs(batch=2, seq_len=9, d_in=3, d_h=5, seed=12, w_scale=0.4)
    # One mistake costs once: the learner's rnn_forward (graded on its own) is swapped for
    # nn.RNN with the same weights while this runs.
    swapped = in_kernel(GlobalSwapped, gradient_norms_through_time, "rnn_forward",
                        in_kernel(ReferenceRNNForward))
    norms = call(swapped, x, h0, W_xh, W_hh, b_h, name="gradient_norms_through_time")
    expect_tensor(norms, "gradient norms", shape=(9,))
    expected = _expected_grad_norms(x, h0, W_xh, W_hh, b_h)
    mistakes = {
        "you differentiated the sum of all outputs; differentiate the last hidden state only "
        "(h_last.sum().backward())": _expected_grad_norms(x, h0, W_xh, W_hh, b_h, wrt_all=True),
        "the norms are in reverse order: entry t is for the input at step t":
            expected.flip(0),
    }
    compare(norms, expected, "gradient norms", mistakes, rtol=1e-5, atol=1e-10)
