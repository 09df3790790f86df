"""Visible checks for Day 9."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from course.checking import CheckFailure, assert_close, call, passed


def check_warmup_cosine_schedule(warmup_cosine_schedule) -> None:
    """Warm-up of 4 steps, cosine to 0 at step 12: a few key values."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = call(warmup_cosine_schedule, optimizer, 4, 12)
    if not isinstance(sched, torch.optim.lr_scheduler.LambdaLR):
        raise CheckFailure("return a torch.optim.lr_scheduler.LambdaLR")
    lrs = []
    for _ in range(13):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        sched.step()
    expected = [0.0, 0.25, 0.5, 0.75, 1.0] + [0.5 * (1 + math.cos(math.pi * k / 8))
                                               for k in range(1, 9)]
    assert_close(torch.tensor(lrs), torch.tensor(expected), "learning rates at steps 0..12",
                 rtol=1e-5, atol=1e-6)
    passed("0 -> 1 over 4 warm-up steps, then half a cosine down to 0 at step 12")


def check_train_one_epoch(train_one_epoch) -> None:
    """Two batches of a linear model: the loss goes down and a float comes back."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 5, generator=g), torch.randint(0, 3, (16,), generator=g)
    model = nn.Linear(5, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    with torch.no_grad():
        before = float(F.cross_entropy(model(x), y))
    loader = [(x[:8], y[:8]), (x[8:], y[8:])]
    losses = [call(train_one_epoch, model, loader, optimizer) for _ in range(5)]
    if type(losses[0]) is not float:
        raise CheckFailure(f"return a Python float (loss.item()), got {type(losses[0])}")
    with torch.no_grad():
        after = float(F.cross_entropy(model(x), y))
    if not after < before:
        raise CheckFailure(f"after 5 epochs the loss went from {before:.3f} to {after:.3f}: "
                           "the model does not learn.")
    passed(f"5 epochs on 16 examples: loss {before:.3f} -> {after:.3f}")


def check_evaluate(evaluate) -> None:
    """A linear model on two batches: (loss, accuracy) with accuracy in [0, 1]."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(10, 4, generator=g), torch.randint(0, 2, (10,), generator=g)
    model = nn.Linear(4, 2)
    out = call(evaluate, model, [(x[:5], y[:5]), (x[5:], y[5:])])
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("return a tuple (loss, accuracy)")
    loss, acc = out
    with torch.no_grad():
        logits = model(x)
    assert_close(torch.tensor([float(loss), float(acc)]),
                 torch.tensor([float(F.cross_entropy(logits, y)),
                               float((logits.argmax(-1) == y).float().mean())]),
                 "(loss, accuracy)", rtol=1e-5, atol=1e-6)
    passed(f"loss {float(loss):.3f}, accuracy {float(acc):.2f} on 10 examples")
