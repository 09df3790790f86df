"""Hidden tests of Day 8: normalization, images as row sequences, SequenceClassifier, health checks.

Expected values come from invariants (the pixel statistics, the row layout), from the learner's
own submodules recombined by the contract (input_proj -> CLS -> positions -> layers -> norm ->
head at position 0), and from PyTorch's cross-entropy; never from a solutions module.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    call,
    compare,
    derive,
    expect_module,
    expect_tensor,
    expect_unchanged,
    inject,
    leans_on,
    manual_seed,
    observed_check,
    permutation,
    randomize,
    rng,
    trusted,
    trusted_mnist,
    value_check,
)
from autograder.judge.checks import reference as ref
from course.checking import in_kernel, note_value_checked, twin
from course.device import check_runs_on_any_device
from course.probes import seeded

ATTRIBUTES = ("input_proj", "cls_token", "pos_encoding", "layers", "norm", "head")


def _stats(images: torch.Tensor) -> tuple[float, float]:
    x = images.double() / 255.0
    return float(x.mean()), float(x.std())


def _as_float(value, name: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = float(value)
    if not isinstance(value, int | float):
        raise CheckFailure(f"{name} should be a Python float, got {type(value).__name__}.")
    return float(value)


@value_check
def check_normalization(normalization_stats, MEAN, STD, mnist) -> None:
    """normalization_stats on synthetic images; MEAN, STD from the training split.

    The digits are the judge's own copy (``trusted_mnist``), not the notebook's ``mnist``."""
    mnist = trusted_mnist()
    g = rng(80)
    for shape in ((5, 28, 28), (3, 4, 6)):
        images = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        out = call(normalization_stats, images, name=f"normalization_stats(images {shape})")
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailure("normalization_stats should return a tuple (mean, std), got "
                               f"{type(out).__name__}.")
        mean, std = (_as_float(v, f"normalization_stats(...)[{i}]") for i, v in enumerate(out))
        exp_mean, exp_std = _stats(images)
        population = float((images.double() / 255.0).std(correction=0))
        if abs(std - population) <= 1e-6 + 2e-3 * population:
            exp_std = population   # both conventions are fine: they differ by sqrt(N/(N-1))
        got = torch.tensor([mean, std], dtype=torch.float64)
        raw = images.double()
        compare(got, torch.tensor([exp_mean, exp_std], dtype=torch.float64),
                f"(mean, std) of uint8 images {shape}",
                {"you did not scale to [0, 1]: divide the pixels by 255 before the mean and "
                 "std": torch.tensor([float(raw.mean()), float(raw.std())], dtype=torch.float64),
                 "mean and std are swapped: return (mean, std)":
                     torch.tensor([exp_std, exp_mean], dtype=torch.float64)},
                rtol=2e-3, atol=1e-6)
    got = torch.tensor([_as_float(MEAN, "MEAN"), _as_float(STD, "STD")], dtype=torch.float64)
    train = torch.tensor(_stats(mnist.train_images), dtype=torch.float64)
    heldout = torch.tensor(_stats(mnist.heldout_images), dtype=torch.float64)
    everything = torch.tensor(_stats(torch.cat([mnist.train_images, mnist.heldout_images])),
                              dtype=torch.float64)
    compare(got, train, "(MEAN, STD)",
            {"you computed MEAN, STD on the held-out digits: statistics must come from the "
             "training split only (mnist.train_images)": heldout,
             "you computed MEAN, STD on all 10,000 digits, held-out ones included: use the "
             "training split only (mnist.train_images)": everything},
            rtol=2e-4, atol=1e-7)


@value_check
def check_images_to_rows(images_to_rows) -> None:
    """Asymmetric images in both layouts, odd batch sizes, other statistics."""
    g = rng(81)
    mean, std = 0.21, 0.37
    for shape in ((3, 28, 28), (5, 1, 28, 28), (1, 28, 28)):
        images = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
        images[..., 0, :] = 255          # a bright top row: rows and columns now differ
        out = call(images_to_rows, images, mean, std, name=f"images_to_rows(images {shape})")
        B = shape[0]
        expect_tensor(out, f"images_to_rows(images {shape})", shape=(B, 28, 28),
                      dtype=torch.float32)
        x = images.reshape(B, 28, 28).double() / 255.0
        expected = (x - mean) / std
        compare(out, expected, f"images_to_rows(images {shape})",
                {"you transposed rows and columns: token t must be image ROW t (a (B, 28, 28) "
                 "batch is already (batch, tokens, features); do not transpose)":
                     expected.transpose(-2, -1),
                 "you did not divide the pixels by 255 before normalizing":
                     (x * 255 - mean) / std,
                 "you divided by the std before subtracting the mean: compute (x - mean) / std":
                     x / std - mean,
                 "you did not normalize: subtract mean, then divide by std": x},
                rtol=1e-5, atol=1e-5)


def _build(SequenceClassifier, *args, name="SequenceClassifier", seed=None):
    """The learner's model; with ``seed``, built under that seed where the learner's code runs."""
    if seed is None:
        model = expect_module(SequenceClassifier, *args, name=name)
    else:
        model = call(in_kernel, seeded, derive(seed), SequenceClassifier, *args,
                     name=f"{name}{args}")
    missing = [a for a in ATTRIBUTES if not hasattr(model, a)]
    if missing:
        raise CheckFailure(f"SequenceClassifier has no attribute(s) {missing}: name the parts "
                           f"exactly {', '.join(ATTRIBUTES)} (the tests read them).")
    if not isinstance(model.cls_token, torch.nn.Parameter):
        raise CheckFailure("cls_token should be an nn.Parameter (learned), got "
                           f"{type(model.cls_token).__name__}.")
    return model


def _forward_variants(w: dict, x: torch.Tensor, num_heads: int):
    """The contract's forward and classic mistakes, on the judge's weights ``w`` (injected
    into the learner's model, ``pos_encoding.pe`` included)."""
    B = x.size(0)
    n_layers = len({k.split(".")[1] for k in w if k.startswith("layers.")})
    pe = w["pos_encoding.pe"]                                    # (1, max_len + 1, C)
    with torch.no_grad():
        cls = w["cls_token"].expand(B, -1, -1)                   # (B, 1, C)
        proj = ref.linear(w, "input_proj.", x)                   # (B, T, C)

        def pos(h):
            return h + pe[:, :h.shape[1]]

        def head(h):
            return ref.linear(w, "head.", h)

        def run(h, final_norm=True):
            for i in range(n_layers):
                h = ref.encoder_layer(w, f"layers.{i}.", h, num_heads)
            return ref.layer_norm(w, "norm.", h) if final_norm else h

        h = run(pos(torch.cat([cls, proj], 1)))                 # (B, T + 1, C)
        right = head(h[:, 0])
        variants = {
            "you read the last position: the CLS token is at position 0 (h[:, 0])":
                head(h[:, -1]),
            "you read position 1 (the first image row): the CLS token is at position 0":
                head(h[:, 1]),
            "you averaged over the tokens: classify the CLS token's state h[:, 0]":
                head(h.mean(1)),
            "no positional encoding is added: apply self.pos_encoding to the T + 1 tokens "
            "(CLS included) before the layers": head(run(torch.cat([cls, proj], 1))[:, 0]),
            "you added the positional encoding before prepending the CLS token: prepend CLS "
            "first, then add positions to all T + 1 tokens":
                head(run(torch.cat([cls, pos(proj)], 1))[:, 0]),
            "the final LayerNorm is missing: apply self.norm after the last layer":
                head(run(pos(torch.cat([cls, proj], 1)), False)[:, 0]),
            "you appended the CLS token at the end: prepend it at position 0":
                head(run(pos(torch.cat([proj, cls], 1)))[:, -1]),
        }
    return right, variants


@value_check
def check_classifier_forward(SequenceClassifier) -> None:
    """Forward pass = the contract on the judge's weights; CLS at position 0."""
    model = _build(SequenceClassifier, 5, 7, 16, 2, 24, 2, 9,
                   name="SequenceClassifier(input_dim=5, num_classes=7, d_model=16, "
                        "num_heads=2, d_ff=24, num_layers=2, max_len=9)")
    model = model.double().eval()
    n_layers = len(model.layers)
    if n_layers != 2:
        raise CheckFailure(f"num_layers=2 but model.layers has {n_layers} layers.")
    w = randomize(model, 82)      # a distinctive CLS token and head, so every mistake shows
    pe_shape = tuple(model.state_dict().get("pos_encoding.pe", torch.empty(0)).shape)
    if len(pe_shape) != 3 or pe_shape[0] != 1 or pe_shape[1] < 6 or pe_shape[2] != 16:
        raise CheckFailure("model.pos_encoding should hold its table as the buffer pe of shape "
                           f"(1, max_len + 1, d_model) (Day 5's contract), got {pe_shape}.")
    w.update(inject(model, {"pos_encoding.pe": torch.randn(pe_shape, generator=rng(83),
                                                           dtype=torch.float64)}))
    x = torch.randn(3, 5, 5, generator=rng(84), dtype=torch.float64)   # (B=3, T=5, F=5)
    out = call(model, x, name="SequenceClassifier.forward(x of shape (3, 5, 5))")
    expect_tensor(out, "logits for x of shape (3, 5, 5)", shape=(3, 7))
    right, variants = _forward_variants(w, x, num_heads=2)
    compare(out, right, "logits", variants, rtol=1e-6, atol=1e-8,
            hint="the contract: input_proj -> prepend cls_token -> pos_encoding -> layers -> "
                 "norm -> head on position 0.")
    flipped = call(model, x.flip(1), name="SequenceClassifier.forward(rows reversed)")
    expected_flipped, _ = _forward_variants(w, x.flip(1), num_heads=2)
    compare(flipped, expected_flipped, "logits for the rows reversed", rtol=1e-6, atol=1e-8,
            hint="the model must use token order: add the positional encoding.")
    one = call(model, x[:1, :1], name="SequenceClassifier.forward(x of shape (1, 1, 5))")
    expect_tensor(one, "logits for a single one-token sequence", shape=(1, 7))
    expect_unchanged(model, w)


@observed_check
@leans_on("check_classifier_forward")
def check_classifier_device(SequenceClassifier) -> None:
    """No tensor created on the wrong device (GPU when present, else PyTorch's meta device).

    Paid when the forward pass is right (``check_classifier_forward``), whatever
    ``overfit_one_batch``, another exercise, does."""
    model = _build(SequenceClassifier, 6, 4, 16, 4, 32, 1, 12)
    check_runs_on_any_device(model.eval(), lambda: (torch.randn(2, 7, 6, generator=rng(85)),),
                             "SequenceClassifier")


def _normalize(images: torch.Tensor, mnist) -> torch.Tensor:
    mean, std = _stats(mnist.train_images)
    return ((images.float() / 255.0 - mean) / std).reshape(len(images), 28, 28)


@observed_check
@leans_on("check_classifier_forward")
def check_init_loss(SequenceClassifier, images_to_rows, mnist, MEAN, STD) -> None:
    """A fresh model (another size) gives a loss within 0.1 of ln(10) on real digits.

    A model that outputs zeros has that loss too: observed, paid when the forward pass is
    right (``check_classifier_forward``)."""
    mnist = trusted_mnist()
    pick = permutation(len(mnist.heldout_labels), 86)[:300]   # 300 digits drawn per submission
    rows = _normalize(mnist.heldout_images[pick], mnist)
    labels = mnist.heldout_labels[pick]
    with torch.random.fork_rng():
        manual_seed(8)
        model = _build(SequenceClassifier, 28, 10, 48, 4, 96, 3, 28)
    model.eval()
    with torch.no_grad():
        logits = call(model, rows, name="SequenceClassifier(... d_model=48 ...)(300 digits)")
    expect_tensor(logits, "logits of 300 digits", shape=(300, 10))
    loss = float(F.cross_entropy(logits.float(), labels))
    if abs(loss - math.log(10)) > 0.1:
        raise CheckFailure(
            f"the loss of a freshly built model is {loss:.3f}, expected within 0.1 of ln(10) = "
            f"{math.log(10):.3f}. Initialize the head with small weights "
            "(nn.init.normal_(self.head.weight, std=0.02), zero bias) so the logits start near 0.")


@value_check
def check_overfit(overfit_one_batch, SequenceClassifier, images_to_rows, mnist, MEAN,
                  STD) -> None:
    """The learner's loop memorises 16 digits with a reference model, and vice versa."""
    # Day 8's stand-in is not in Day 8's kernel: the judge makes the probe it is built on.
    from course.probes import RepeatedBatch
    from course.references import ReferenceSequenceClassifier as Reference
    from course.references import reference_fit

    mnist = trusted_mnist()
    pick = permutation(len(mnist.train_labels), 87)[:16]      # 16 digits drawn per submission
    rows = _normalize(mnist.train_images[pick], mnist)
    labels = mnist.train_labels[pick]
    with torch.random.fork_rng():
        manual_seed(81)
        before = Reference(28, 10, 32, 4, 64, 1, 28)
    reference = twin(before, 28, 10, 32, 4, 64, 1, 28)
    steps = 100
    losses = call(in_kernel, seeded, derive(81), overfit_one_batch, reference, rows, labels,
                  steps=steps, lr=3e-3,
                  name="overfit_one_batch(model, 16 digits, steps=100, lr=3e-3)")
    if not isinstance(losses, list) or len(losses) != steps:
        raise CheckFailure(f"overfit_one_batch should return a list of {steps} losses (one per "
                           f"step), got {type(losses).__name__}"
                           + (f" of length {len(losses)}" if hasattr(losses, "__len__") else ""))
    if not all(type(v) is float for v in losses):
        raise CheckFailure("overfit_one_batch should return Python floats (loss.item()), got "
                           f"{type(losses[0]).__name__}.")
    with torch.no_grad():
        first = float(F.cross_entropy(before.train()(rows), labels))
    if abs(losses[0] - first) > 1e-4:
        raise CheckFailure(f"the first recorded loss is {losses[0]:.4f}, but the model's loss on "
                           f"the batch before training is {first:.4f}: record the "
                           "cross-entropy of the batch, computed before each step.")
    # The trained weights, judged here: the reference model loaded with them must fit the batch.
    trained = copy.deepcopy(before)
    with torch.no_grad():
        # The kernel's trained weights, judged by the judge's own model: what is scored.
        trained.load_state_dict({k: trusted(v.detach())
                                 for k, v in reference.state_dict().items()})
        final = float(F.cross_entropy(trained.train()(rows), labels))
    if not (losses[-1] < 0.05 and final < 0.1):
        raise CheckFailure(
            f"after {steps} steps on the same 16 digits the loss is {losses[-1]:.3f} (first "
            f"{losses[0]:.3f}; the returned weights give {final:.3f}); a working loop reaches "
            "< 0.05. Check that you call optimizer.zero_grad() every step, loss.backward(), "
            "then optimizer.step(), with Adam(model.parameters(), lr=lr).")
    note_value_checked()

    # The learner's model, trained by the course's loop (in the kernel: it needs autograd).
    model = _build(SequenceClassifier, 28, 10, 32, 4, 64, 1, 28, seed=82)
    optimizer = in_kernel(torch.optim.Adam, model.parameters(), lr=3e-3)
    call(in_kernel, reference_fit, model, in_kernel(RepeatedBatch, rows, labels, steps),
         optimizer, name="training SequenceClassifier with the course's loop")
    model.train()
    with torch.no_grad():
        final = float(F.cross_entropy(call(model, rows, name="SequenceClassifier.forward"),
                                      labels))
    if not final < 0.05:
        raise CheckFailure(
            f"your SequenceClassifier (d_model=32, 1 layer) trained by a reference loop for "
            f"{steps} Adam steps on 16 digits still has loss {final:.3f} (a working model "
            "reaches < 0.05). Check that the head reads the CLS state after the layers and that "
            "nothing in forward is detached or re-created on every call.")
