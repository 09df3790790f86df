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


def check_torch_encoder(to_key_padding_mask, to_torch_encoder_layer, TransformerEncoderLayer
                        ) -> None:
    """The mask for one padded sequence, and PyTorch's layer equal to your Day 6 layer."""
    keep = torch.tensor([[True, True, False]])
    mask = expect_tensor(call(to_key_padding_mask, keep, name="to_key_padding_mask"),
                         "to_key_padding_mask([[True, True, False]])", shape=(1, 4),
                         dtype=torch.bool, finite=False)
    if mask.tolist() != [[False, False, False, True]]:
        raise CheckFailure(f"to_key_padding_mask([[True, True, False]]) returned {mask.tolist()}, "
                           "expected [[False, False, False, True]]: CLS first (never ignored), "
                           "then True for the padding key only.")
    torch.manual_seed(0)
    layer = expect_module(TransformerEncoderLayer, 16, 4, 24).eval()
    torch_layer = call(to_torch_encoder_layer, layer, name="to_torch_encoder_layer(layer)")
    if not isinstance(torch_layer, nn.TransformerEncoderLayer):
        raise CheckFailure("to_torch_encoder_layer should return an nn.TransformerEncoderLayer, "
                           f"got {type(torch_layer).__name__}.")
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    with torch.no_grad():
        mine = call(layer, x, keep[:, None, None, :], name="your layer(x, mask)")
        theirs = call(torch_layer, x, src_key_padding_mask=~keep,
                      name="torch_layer(x, src_key_padding_mask=~keep)")
    assert_close(theirs, mine, "PyTorch's layer output", rtol=1e-4, atol=1e-5,
                 hint="check norm_first=True, activation='gelu', batch_first=True and the order "
                      "W_Q, W_K, W_V in in_proj_weight (and its bias).")
    passed("to_key_padding_mask and to_torch_encoder_layer: PyTorch's layer equals yours")
