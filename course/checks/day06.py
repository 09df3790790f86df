"""Visible checks for Day 6: feed-forward, LayerNorm and the Pre-LN encoder layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course.checking import CheckFailure, assert_close, call, expect_module, expect_tensor, passed


def _count(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def check_feed_forward(FeedForward) -> None:
    """(8, 32): linear1, linear2, values equal linear2(gelu(linear1(x)))."""
    ffn = expect_module(FeedForward, 8, 32)
    for name, shape in (("linear1", (32, 8)), ("linear2", (8, 32))):
        lin = getattr(ffn, name, None)
        if not isinstance(lin, nn.Linear) or tuple(lin.weight.shape) != shape:
            raise CheckFailure(f"self.{name} should be nn.Linear with weight shape {shape}, "
                               f"got {lin!r}.")
    x = torch.randn(2, 3, 8)
    out = expect_tensor(call(ffn, x, name="FeedForward.forward(x)"), "output", shape=(2, 3, 8))
    with torch.no_grad():
        expected = ffn.linear2(F.gelu(ffn.linear1(x)))
    assert_close(out, expected, "output", rtol=1e-5, atol=1e-6,
                 hint="linear1, then GELU (F.gelu), then linear2.")
    passed(f"FeedForward(8, 32): {_count(ffn)} parameters, linear2(gelu(linear1(x)))")


def check_layer_norm(LayerNorm) -> None:
    """LayerNorm(6): weight ones, bias zeros, equal to nn.LayerNorm on a small input."""
    ln = expect_module(LayerNorm, 6)
    for name, value in (("weight", 1.0), ("bias", 0.0)):
        p = getattr(ln, name, None)
        if not isinstance(p, nn.Parameter) or tuple(p.shape) != (6,):
            raise CheckFailure(f"self.{name} should be an nn.Parameter of shape (d_model,), got "
                               f"{type(p).__name__}.")
        assert_close(p.detach(), torch.full((6,), value), f"initial self.{name}")
    x = torch.randn(2, 4, 6) * 3 + 1
    out = expect_tensor(call(ln, x, name="LayerNorm.forward(x)"), "output", shape=(2, 4, 6))
    assert_close(out, F.layer_norm(x, (6,), eps=1e-5), "output", rtol=1e-4, atol=1e-5,
                 hint="normalise over the last dimension with the biased variance: "
                      "(x - mean) / sqrt(var + eps).")
    passed("LayerNorm(6) equals nn.LayerNorm(6): each vector has mean 0 and variance 1")


def check_encoder_layer(TransformerEncoderLayer) -> None:
    """(16, 4, 32): norm1, attn, norm2, ffn; output shape; equal to x + sublayers (Pre-LN)."""
    layer = expect_module(TransformerEncoderLayer, 16, 4, 32)
    for name in ("norm1", "attn", "norm2", "ffn"):
        if not isinstance(getattr(layer, name, None), nn.Module):
            raise CheckFailure(f"self.{name} should be a submodule of the layer.")
    x = torch.randn(2, 5, 16)
    out = expect_tensor(call(layer, x, name="TransformerEncoderLayer.forward(x)"), "output",
                        shape=(2, 5, 16))
    with torch.no_grad():
        h = x + layer.attn(layer.norm1(x))
        expected = h + layer.ffn(layer.norm2(h))
    assert_close(out, expected, "output", rtol=1e-4, atol=1e-5,
                 hint="Pre-LN: x = x + attn(norm1(x)); then x = x + ffn(norm2(x)).")
    passed(f"TransformerEncoderLayer(16, 4, 32): {_count(layer):,} parameters, Pre-LN wiring")
