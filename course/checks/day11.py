"""Visible checks for Day 11."""

from __future__ import annotations

import torch

from course.checking import CheckFailure, assert_close, call, expect_module, expect_tensor, passed


def check_patchify(patchify) -> None:
    """A 4 x 4 image of numbers 0..15 cut into four 2 x 2 patches."""
    image = torch.arange(16.0).reshape(1, 1, 4, 4)
    out = expect_tensor(call(patchify, image, 2), "patchify(image, 2)", shape=(1, 4, 4))
    expected = torch.tensor([[[0.0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]])
    if torch.equal(out, expected[:, [0, 2, 1, 3]]):
        raise CheckFailure("your patches are in column-major order: the second patch should be "
                           "the top-right one, [2, 3, 6, 7]")
    assert_close(out, expected, "patches of a 4 x 4 image", rtol=0, atol=0)
    passed("4 x 4 image -> 4 patches [0 1 4 5], [2 3 6 7], [8 9 12 13], [10 11 14 15]")


def check_patch_embedding(PatchEmbedding) -> None:
    """Shapes on MNIST-sized images."""
    embed = expect_module(PatchEmbedding, 1, 7, 32)
    out = expect_tensor(call(embed, torch.randn(2, 1, 28, 28)), "PatchEmbedding(images)",
                        shape=(2, 16, 32))
    del out
    passed("(2, 1, 28, 28) -> (2, 16, 32): 16 patches of width d_model = 32")


def check_vision_transformer(VisionTransformer) -> None:
    """Default sizes: logits (B, 10); positions for 16 patches + CLS."""
    model = expect_module(VisionTransformer)
    out = expect_tensor(call(model, torch.randn(3, 1, 28, 28)), "ViT logits", shape=(3, 10))
    pos = getattr(model, "pos_embedding", None)
    if not isinstance(pos, torch.nn.Parameter) or tuple(pos.shape) != (1, 17, 64):
        raise CheckFailure("pos_embedding should be an nn.Parameter of shape (1, 17, 64)")
    del out
    passed("default ViT: (3, 1, 28, 28) -> logits (3, 10); pos_embedding (1, 17, 64)")
