"""Visible checks for Day 4: multi-head self-attention."""

from __future__ import annotations

import torch
from torch import nn

from course.checking import CheckFailure, assert_close, call, expect_module, expect_tensor, passed


def _torch_copy(mha: nn.Module, d_model: int, num_heads: int) -> nn.MultiheadAttention:
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        if not isinstance(getattr(mha, name, None), nn.Linear):
            raise CheckFailure(f"self.{name} should be nn.Linear(d_model, d_model), got "
                               f"{type(getattr(mha, name, None)).__name__}.")
    ref = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.W_Q.weight, mha.W_K.weight, mha.W_V.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.W_Q.bias, mha.W_K.bias, mha.W_V.bias]))
        ref.out_proj.weight.copy_(mha.W_O.weight)
        ref.out_proj.bias.copy_(mha.W_O.bias)
    return ref


def check_mha(MultiHeadSelfAttention) -> None:
    """d_model=8, 2 heads, no mask: shapes, parameter count and values equal PyTorch's."""
    torch.manual_seed(0)
    mha = expect_module(MultiHeadSelfAttention, 8, 2)
    n = sum(p.numel() for p in mha.parameters())
    if n != 4 * (8 * 8 + 8):
        raise CheckFailure(f"MultiHeadSelfAttention(8, 2) has {n} parameters, expected "
                           f"{4 * 72} (four nn.Linear(8, 8) with bias: W_Q, W_K, W_V, W_O).")
    x = torch.randn(2, 3, 8)
    out = expect_tensor(call(mha, x, name="forward(x)"), "output", shape=(2, 3, 8))
    expect_tensor(getattr(mha, "attn_weights", None), "self.attn_weights", shape=(2, 2, 3, 3))
    ref = _torch_copy(mha, 8, 2)
    expected, _ = ref(x, x, x)
    assert_close(out, expected, "output", rtol=1e-4, atol=1e-5,
                 hint="compare with the shape flow above: split heads with view then "
                      "transpose(1, 2), scale by sqrt(d_k), merge, then apply W_O.")
    passed("MultiHeadSelfAttention(8, 2): 288 parameters, output (2, 3, 8), weights (2, 2, 3, 3), "
           "equal to nn.MultiheadAttention")
