"""Visible checks for Day 8."""

from __future__ import annotations

import torch

from course.checking import CheckFailure, assert_close, call, expect_module, expect_tensor, passed


def check_normalization_stats(normalization_stats) -> None:
    """Two images, half black and half white: mean 0.5 on the [0, 1] scale."""
    images = torch.zeros(2, 28, 28, dtype=torch.uint8)
    images[:, :14] = 255
    out = call(normalization_stats, images)
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("return a tuple (mean, std)")
    mean, std = (float(v) for v in out)
    if abs(mean - 127.5) < 1:
        raise CheckFailure(f"mean is {mean:.1f}: divide the pixels by 255 first (expected 0.5).")
    assert_close(torch.tensor([mean, std]), torch.tensor([0.5, 0.5]), "(mean, std)",
                 rtol=1e-3, atol=1e-3)
    passed("half-white images give mean 0.5, std 0.5 on the [0, 1] scale")


def check_images_to_rows(images_to_rows) -> None:
    """A digit-like image with one bright row: that row must become one token."""
    image = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    image[0, 0, 3, :] = 255                                   # row 3 is white
    rows = expect_tensor(call(images_to_rows, image, 0.0, 1.0), "images_to_rows(image)",
                         shape=(1, 28, 28), dtype=torch.float32)
    if float(rows[0, 3].sum()) != 28.0:
        raise CheckFailure("row 3 of the image is white, so token 3 should be 28 ones (with "
                           "mean 0, std 1); got a different token 3. Did you transpose rows and "
                           "columns, or forget to divide by 255?")
    passed("(1, 1, 28, 28) -> (1, 28, 28); image row 3 is token 3")


def check_classifier(SequenceClassifier) -> None:
    """Shapes and attribute names of a small model."""
    model = expect_module(SequenceClassifier, 28, 10, 32, 4, 64, 2, 28)
    for name in ("input_proj", "cls_token", "pos_encoding", "layers", "norm", "head"):
        if not hasattr(model, name):
            raise CheckFailure(f"the model has no attribute {name!r}")
    x = torch.randn(4, 28, 28)
    out = expect_tensor(call(model, x, name="SequenceClassifier.forward"), "logits",
                        shape=(4, 10))
    if len(model.layers) != 2:
        raise CheckFailure(f"num_layers=2 but model.layers holds {len(model.layers)} layers")
    del out
    passed("SequenceClassifier maps (4, 28, 28) to logits (4, 10)")
