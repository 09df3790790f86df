"""Hidden tests of Day 9: the warm-up + cosine schedule, train_one_epoch, evaluate, accuracy.

Expected weights come from a reference loop written here with PyTorch's SGD, cross-entropy and
``clip_grad_norm_`` on a deep copy of the same model; the schedule from its formula; accuracy
from the grader's own evaluation. Never from a solutions module.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder.judge.checks import (
    CheckFailure,
    call,
    compare,
    expect_tensor,
    permutation,
    rng,
    trusted_mnist,
    value_check,
)
from course.checking import in_kernel, note_value_checked, record, twin
from course.probes import DropoutProbe, TrainingProbe, predict, step_schedule

# check_train_one_epoch trains its reference model here: the judge's warm-up takes one
# optimizer step (PyTorch's first step() imports its compiler stack, about a second).
JUDGE_STEPS_OPTIMIZERS = True


# --------------------------------------------------------------------------------- schedule


def _factor(step: int, warmup: int, total: int, shift: int = 0, progress_from_zero=False):
    if step < warmup:
        return (step + shift) / max(1, warmup)
    if progress_from_zero:
        progress = min(1.0, step / max(1, total))
    else:
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _factors(warmup_cosine_schedule, warmup: int, total: int, steps: int) -> torch.Tensor:
    param = in_kernel(nn.Parameter, torch.zeros(1))
    optimizer = in_kernel(torch.optim.SGD, [param], lr=0.5)
    sched = call(warmup_cosine_schedule, optimizer, warmup, total,
                 name=f"warmup_cosine_schedule(optimizer, {warmup}, {total})")
    if not isinstance(sched, torch.optim.lr_scheduler.LambdaLR):
        raise CheckFailure("warmup_cosine_schedule should return a "
                           "torch.optim.lr_scheduler.LambdaLR, got "
                           f"{type(sched).__module__}.{type(sched).__qualname__}.")
    lrs = call(in_kernel, step_schedule, optimizer, sched, steps, name="scheduler.step()")
    if not (isinstance(lrs, list) and len(lrs) == steps
            and all(type(v) is float for v in lrs)):
        raise CheckFailure("the scheduler's learning rates are not numbers.")
    return torch.tensor(lrs, dtype=torch.float64) / 0.5


@value_check
def check_schedule(warmup_cosine_schedule) -> None:
    """The factor at every step for several (warmup, total), including warmup 0 and overrun."""
    for warmup, total, steps in ((7, 40, 46), (0, 15, 18), (12, 13, 16)):
        got = _factors(warmup_cosine_schedule, warmup, total, steps)
        expected = torch.tensor([_factor(s, warmup, total) for s in range(steps)],
                                dtype=torch.float64)
        compare(got, expected, f"learning-rate factors for warmup_steps={warmup}, "
                f"total_steps={total}, steps 0..{steps - 1}",
                {"your warm-up starts above 0: at step s < warmup_steps the factor is "
                 "s / warmup_steps (0 at step 0)":
                     torch.tensor([_factor(s, warmup, total, shift=1) for s in range(steps)],
                                  dtype=torch.float64),
                 "your cosine starts at step 0: measure its progress from the end of the "
                 "warm-up, (step - warmup_steps) / (total_steps - warmup_steps)":
                     torch.tensor([_factor(s, warmup, total, progress_from_zero=True)
                                   for s in range(steps)], dtype=torch.float64)},
                rtol=1e-6, atol=1e-9,
                hint="after total_steps the factor stays at 0 (clamp the progress to 1).")


# --------------------------------------------------------------------------- train_one_epoch

def _batches(n_examples=(5, 5, 2), d_in=6, classes=3, seed=91, scale=1.0):
    g = rng(seed)
    return [(torch.randn(n, d_in, generator=g, dtype=torch.float64) * scale,
             torch.randint(0, classes, (n,), generator=g)) for n in n_examples]


def _reference_epoch(model, batches, lr, max_grad_norm=None, zero_grad=True, clip=True):
    """SGD steps on a copy; returns (model, example-weighted mean, batch-mean, losses)."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses, sizes = [], []
    for inputs, labels in batches:
        loss = F.cross_entropy(model(inputs), labels)
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        if clip and max_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        losses.append(loss.item())
        sizes.append(len(labels))
    weighted = sum(v * n for v, n in zip(losses, sizes, strict=True)) / sum(sizes)
    return model, weighted, sum(losses) / len(losses), losses


def _params(model) -> torch.Tensor:
    return torch.cat([torch.flatten(p) for p in model.parameters()]).detach()


def _as_float(value, name):
    if type(value) is not float:
        raise CheckFailure(f"{name} should be a Python float (use loss.item()), got "
                           f"{type(value).__module__}.{type(value).__qualname__}.")
    return value


@value_check
def check_train_one_epoch(train_one_epoch) -> None:
    """Weights, returned mean loss, scheduler steps and train mode after one epoch."""
    batches = _batches()
    start = TrainingProbe(seed=90).eval()         # starts in eval mode: the loop must switch
    model = twin(start)
    optimizer = in_kernel(torch.optim.SGD, model.parameters(), lr=0.3)
    scheduler = in_kernel(torch.optim.lr_scheduler.StepLR, optimizer, step_size=10**6)
    result = call(train_one_epoch, model, batches, optimizer, scheduler, max_grad_norm=1e9,
                  name="train_one_epoch(model, 3 batches of 5, 5, 2 examples, SGD lr=0.3)")
    _as_float(result, "train_one_epoch's return value")
    modes = record(model, "modes")
    if modes and not all(modes):
        raise CheckFailure("the model ran in eval mode during training: call model.train() at "
                           "the start of train_one_epoch (evaluate switches it to eval mode).")
    if len(modes) != len(batches):
        raise CheckFailure(f"the model was called {len(modes)} times for {len(batches)} "
                           "batches: one forward pass per batch.")
    expected, weighted, batch_mean, losses = _reference_epoch(start, batches, 0.3)
    accumulated, *_ = _reference_epoch(start, batches, 0.3, zero_grad=False)
    compare(_params(model), _params(expected), "the weights after one epoch",
            {"gradients accumulated across batches: call optimizer.zero_grad() before "
             "loss.backward() in every step": _params(accumulated),
             "the weights did not change: call loss.backward() and optimizer.step() for every "
             "batch": _params(start)},
            rtol=1e-7, atol=1e-9)
    got = torch.tensor([result], dtype=torch.float64)
    if (math.isclose(result, weighted, rel_tol=1e-6)
            or math.isclose(result, batch_mean, rel_tol=1e-6)):
        note_value_checked()
    else:
        compare(got, torch.tensor([weighted], dtype=torch.float64),
                "train_one_epoch's mean loss",
                {"you returned the sum of the batch losses: return the mean per example":
                     torch.tensor([sum(losses)], dtype=torch.float64),
                 "you returned the last batch's loss: average over the whole epoch":
                     torch.tensor([losses[-1]], dtype=torch.float64)},
                rtol=1e-6, atol=1e-9)
    if scheduler.last_epoch != len(batches):
        raise CheckFailure(
            f"after one epoch of {len(batches)} optimizer steps the scheduler was stepped "
            f"{scheduler.last_epoch} times: call scheduler.step() after every optimizer step "
            "(per batch), not once per epoch — the schedule counts steps.")
    # No scheduler: must still work.
    plain = twin(TrainingProbe(seed=90))
    call(train_one_epoch, plain, batches, in_kernel(torch.optim.SGD, plain.parameters(), lr=0.3),
         name="train_one_epoch(..., scheduler=None)")


@value_check
def check_clipping(train_one_epoch) -> None:
    """Large gradients and max_grad_norm=0.05: the step uses the clipped gradients."""
    batches = _batches((4,), scale=1.0, seed=92)
    start = TrainingProbe(seed=93)
    with torch.no_grad():
        start.linear.weight.mul_(6.0)             # confident, wrong logits: large gradients
    model = twin(start)
    optimizer = in_kernel(torch.optim.SGD, model.parameters(), lr=1.0)
    call(train_one_epoch, model, batches, optimizer, None, max_grad_norm=0.05,
         name="train_one_epoch(model, one batch, SGD lr=1.0, max_grad_norm=0.05)")
    clipped, *_ = _reference_epoch(start, batches, 1.0, max_grad_norm=0.05)
    unclipped, *_ = _reference_epoch(start, batches, 1.0, max_grad_norm=0.05, clip=False)
    compare(_params(model), _params(clipped), "the weights after one clipped step",
            {"the step used unclipped gradients: call nn.utils.clip_grad_norm_(model."
             "parameters(), max_grad_norm) after loss.backward() and before optimizer.step() "
             "(clipping after the step has no effect on it)": _params(unclipped)},
            rtol=1e-7, atol=1e-9)
    model = twin(start)
    call(train_one_epoch, model, batches, in_kernel(torch.optim.SGD, model.parameters(), lr=1.0),
         None,
         max_grad_norm=None, name="train_one_epoch(..., max_grad_norm=None)")
    compare(_params(model), _params(unclipped), "the weights with max_grad_norm=None",
            hint="max_grad_norm=None means: do not clip.", rtol=1e-7, atol=1e-9)


# --------------------------------------------------------------------------------- evaluate

@value_check
def check_evaluate(evaluate) -> None:
    """Eval mode, no graph, exact example-weighted loss and accuracy over uneven batches."""
    batches = _batches((4, 4, 3), seed=95)
    local = DropoutProbe(seed=94).train()
    model = twin(local)
    result = call(evaluate, model, batches, name="evaluate(model with dropout, 3 batches)")
    if not isinstance(result, tuple) or len(result) != 2:
        raise CheckFailure(f"evaluate should return a tuple (loss, accuracy), got "
                           f"{type(result).__name__}.")
    loss, accuracy = (_as_float(v, f"evaluate(...)[{i}]") for i, v in enumerate(result))
    if any(record(model, "modes")):
        raise CheckFailure("evaluate ran the model in training mode (dropout on): call "
                           "model.eval() first.")
    if any(record(model, "grad_enabled")) or any(p.grad is not None
                                                   for p in model.parameters()):
        raise CheckFailure("evaluate built a computation graph: wrap the loop in "
                           "torch.no_grad() (or decorate evaluate with @torch.no_grad()); "
                           "gradients are not needed and cost memory.")
    inputs = torch.cat([b[0] for b in batches])
    labels = torch.cat([b[1] for b in batches])
    model = local
    with torch.no_grad():
        logits = model.linear(torch.tanh(inputs))
    exp_loss = float(F.cross_entropy(logits, labels))
    exp_acc = float((logits.argmax(-1) == labels).double().mean())
    with torch.no_grad():
        batch_mean = sum(float(F.cross_entropy(model.linear(torch.tanh(x)), y))
                         for x, y in batches) / len(batches)
    compare(torch.tensor([accuracy], dtype=torch.float64),
            torch.tensor([exp_acc], dtype=torch.float64), "accuracy",
            {"you returned a percentage: return the accuracy as a fraction in [0, 1]":
                 torch.tensor([100 * exp_acc], dtype=torch.float64)}, rtol=1e-6, atol=1e-7)
    compare(torch.tensor([loss], dtype=torch.float64),
            torch.tensor([exp_loss], dtype=torch.float64), "the mean loss",
            {"you averaged the batch means: with an uneven last batch, sum the per-example "
             "losses (reduction='sum') and divide by the number of examples":
                 torch.tensor([batch_mean], dtype=torch.float64)}, rtol=1e-6, atol=1e-9)


# --------------------------------------------------------------------------------- accuracy

@value_check
def check_heldout_accuracy(model, heldout_rows, heldout_labels, threshold: float = 0.80) -> None:
    """The trained model reaches ``threshold`` on the held-out digits.

    The digits are the judge's own copy, normalized with the training split's statistics,
    with slight noise drawn per submission and sent in an order drawn per submission (the
    notebook's ``heldout_rows`` and labels are the kernel's word, and a "model" that answers
    the held-out labels in a known order scores nothing); only the model's logits come from
    the kernel, and the accuracy is counted here.
    """
    mnist = trusted_mnist()
    train = mnist.train_images.double() / 255.0
    mean, std = float(train.mean()), float(train.std())
    heldout_rows = ((mnist.heldout_images.float() / 255.0 - mean) / std)   # (N, 28, 28)
    # Slight noise, so that a model that looks the exact held-out images up scores nothing.
    heldout_rows = heldout_rows + 0.05 * torch.randn(heldout_rows.shape, generator=rng(96))
    order = permutation(len(heldout_rows), 97)
    heldout_rows, heldout_labels = heldout_rows[order], mnist.heldout_labels[order]
    if not isinstance(model, nn.Module):
        raise CheckFailure(f"`model` should be the trained nn.Module, got {type(model)}.")
    model.eval()
    correct = 0
    for start in range(0, len(heldout_rows), 500):
        x = heldout_rows[start:start + 500]
        logits = call(in_kernel, predict, model, x, name="model(held-out digits)")
        expect_tensor(logits, "model(held-out digits)", shape=(len(x), 10))
        correct += int((logits.argmax(-1) == heldout_labels[start:start + 500]).sum())
    accuracy = correct / len(heldout_rows)
    if accuracy >= threshold:
        note_value_checked()
    else:
        raise CheckFailure(
            f"the trained model reaches {100 * accuracy:.1f}% on the {len(heldout_rows)} "
            f"held-out digits, below {100 * threshold:.0f}%. Check train_one_epoch "
            "(zero_grad, clipping before step, scheduler per step) and that training ran.")
