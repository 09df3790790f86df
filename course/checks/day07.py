"""Visible checks for Day 7: the Transformer classifier."""

from __future__ import annotations

import torch
from torch import nn

from course.checking import CheckFailure, assert_close, call, expect_module, expect_tensor, passed


def check_classifier(TransformerClassifier) -> None:
    """A small model: attribute names, logits (batch, num_classes), padding leaves logits alone."""
    torch.manual_seed(0)
    model = expect_module(TransformerClassifier, 10, 3, d_model=16, num_heads=2, d_ff=32,
                          num_layers=1, max_len=12).eval()
    for name, kind in (("embedding", nn.Embedding), ("cls_token", nn.Parameter),
                       ("layers", nn.ModuleList), ("head", nn.Linear)):
        if not isinstance(getattr(model, name, None), kind):
            raise CheckFailure(f"self.{name} should be a {kind.__name__}, got "
                               f"{type(getattr(model, name, None)).__name__}.")
    expect_tensor(model.cls_token, "self.cls_token", shape=(1, 1, 16))
    tokens = torch.randint(1, 10, (2, 5))
    logits = expect_tensor(call(model, tokens, name="forward(tokens)"), "logits", shape=(2, 3))
    padded = torch.cat([tokens, torch.zeros(2, 3, dtype=torch.long)], dim=1)     # (2, 8)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[:, 5:] = False
    with torch.no_grad():
        again = call(model, padded, mask, name="forward(tokens, padding_mask)")
    assert_close(again, logits, "logits after appending 3 padding tokens", rtol=1e-4, atol=1e-5,
                 hint="padding must not change the logits: read the CLS output at position 0 "
                      "and mask padding keys (padding_mask is True for real tokens).")
    passed("TransformerClassifier: logits (2, 3); appending padding leaves them unchanged")
