"""Hidden tests of Day 13's training loop: that ``train`` learns, and what each of its steps
does, in which order, judged by the weights it leaves.

While the learner's ``train`` runs here, the notebook's ``get_lr``, ``get_batch`` and
``estimate_loss`` are the course's (a table of the judge's rates, batches the judge drew, a
constant loss): each has its own test, and one mistake costs once.

* ``check_train_learns``: 60 steps on a periodic toy corpus; the judge scores the trained
  weights on windows of its own, and the history's shape.
* then 4 steps on batches drawn per submission (``get_batch`` hands them out in turn), from
  weights drawn per submission. The judge replays the notebook's recipe
  (Exercise 5: set every group's rate, draw, forward, ``zero_grad``, ``backward``, clip,
  ``step``; AdamW with betas (0.9, 0.99) and weight decay 0.1) from the same weights and
  compares the weights after the last step. Twice, because Adam hides some mistakes in one
  run and shows them in the other:

  - ``grad_clip = 1e-6``: clipping shrinks every gradient entry far below Adam's eps (1e-8),
    so a clipped step moves each weight by well under the rate, an unclipped one by about the
    rate. A clip before ``backward`` (or after ``step``, or none) shows here.
  - ``grad_clip = 1e3`` (never reached): a missing ``zero_grad``, a rate set from the wrong
    step or never set, and other optimiser settings show here.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    call,
    derive,
    manual_seed,
    rng,
    trusted,
    value_check,
)
from course.checking import generator, in_kernel, note_value_checked, twin
from course.probes import BatchQueue, ConstantLoss, GlobalSwapped, StepTable, seeded
from course.standins import TinyGPT as ReferenceTinyGPT

# _replay trains the reference model here: the judge's warm-up takes one optimizer step
# (PyTorch's first optimizer imports its compiler stack, about a second).
JUDGE_STEPS_OPTIMIZERS = True


def lr_at(step, max_lr, warmup, total, min_lr):
    """The notebook's schedule: linear warm-up to ``max_lr`` at step ``warmup - 1``, cosine
    decay to ``min_lr`` at ``total``, ``min_lr`` after."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step > total:
        return min_lr
    p = (step - warmup) / max(1, total - warmup)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * p))


def _course_parts(train, rates: list[float], batch, loss: float = 1.0):
    """``train`` with the course's get_lr (``rates``), get_batch (``batch``: a probe made in the
    kernel) and estimate_loss in place of the learner's, for the call."""
    return in_kernel(GlobalSwapped, train, {"get_lr": in_kernel(StepTable, rates),
                                            "get_batch": batch,
                                            "estimate_loss": in_kernel(ConstantLoss, loss)})


@value_check
def check_train_learns(train, get_batch=None) -> None:
    """The weights after 4 steps equal the recipe's (see the module); then 60 steps on a
    periodic toy corpus: history shape, and val loss far below ln(V). ``get_batch`` is accepted
    for older notebooks and unused: the course's batches are used."""
    _train_step(train)
    _train_learns(train)


def _train_learns(train) -> None:
    manual_seed(37)
    vocab, steps, block = 7, 60, 16
    local = ReferenceTinyGPT(vocab, d_model=32, num_heads=2, num_layers=1, n_ctx=block)
    model = twin(local, vocab, d_model=32, num_heads=2, num_layers=1, n_ctx=block)
    pattern = torch.tensor([0, 3, 1, 4, 1, 5, 2, 6, 5, 3])
    data = pattern.repeat(60)
    # the batches train() draws: windows of the training part at places the judge drew
    starts = torch.randint(0, 500 - block, (steps, 8), generator=rng(38))      # (steps, B)
    windows = data[starts[..., None] + torch.arange(block + 1)]                # (steps, B, T+1)
    batches = [(w[:, :-1], w[:, 1:]) for w in windows]
    rates = [lr_at(s, 1e-2, 5, steps, 1e-3) for s in range(steps + 1)]
    swapped = _course_parts(train, rates, in_kernel(BatchQueue, batches))
    hist = call(in_kernel, seeded, derive(37), swapped, model, data[:500], data[500:],
                steps=steps, batch_size=8, block_size=block, max_lr=1e-2, warmup_steps=5,
                eval_every=25, eval_iters=2, generator=generator(38),
                name="train(stand-in model, periodic data, steps=60, eval_every=25)")
    if not isinstance(hist, dict) or not {"step", "train_loss", "val_loss"} <= set(hist):
        raise CheckFailure("train should return a dict with lists 'step', 'train_loss' and "
                           "'val_loss'.")
    if list(hist["step"]) != [25, 50, 60]:
        raise CheckFailure(f"with steps=60 and eval_every=25, history['step'] should be "
                           f"[25, 50, 60] (every eval_every steps and after the last step), got "
                           f"{list(hist['step'])}.")
    for key in ("train_loss", "val_loss"):
        try:
            vals = [float(v) for v in hist[key]]
        except (TypeError, ValueError):
            vals = []
        if len(vals) != 3 or not all(math.isfinite(v) for v in vals):
            raise CheckFailure(f"history[{key!r}] should hold 3 numbers (one per evaluation), "
                               f"got {list(hist[key])!r}.")
    with torch.no_grad():
        # The kernel's trained weights, judged by the judge's own model: what is scored.
        local.load_state_dict({k: trusted(v.detach()) for k, v in model.state_dict().items()})
        local.eval()
        held_out = data[500:].unfold(0, block + 1, 7)                  # (N, T+1)
        logits = local(held_out[:, :block])                            # (N, T, V)
        measured = float(F.cross_entropy(logits.reshape(-1, vocab),
                                         held_out[:, 1:].reshape(-1)))
    if not measured <= 0.5 * math.log(vocab):
        raise CheckFailure(f"after 60 steps on a periodic sequence the validation loss is "
                           f"{measured:.3f} (ln({vocab}) = {math.log(vocab):.3f}): the model "
                           "barely learns. Check the learning rate you set in every param "
                           "group, zero_grad before backward, and that you step the optimiser.")


STEPS, WARMUP, MAX_LR, BATCH, BLOCK, VOCAB = 16, 4, 1e-2, 4, 8, 7
TINY_CLIP, HUGE_CLIP = 1e-6, 1e3
# Adam divides each gradient entry by its own size, so an entry that is zero in exact
# arithmetic (the key bias: softmax ignores a constant added to every key's score) but 1e-9 in
# float32 moves its weight by about the rate, in a direction set by rounding. The weights
# compared are those whose gradient reaches LIVE of the largest entry in some step: there,
# two correct runs agree to 1e-4 of the rate (the learner may compute the loss or the clip
# another way, in another process); every catalogued mistake moves some of them by more
# than a third of it.
LIVE, TOL = 1e-3, 2e-2


def _replay(model, batches, clip, *, zero_grad=True, lr_shift=0, set_lr=True,
            betas=(0.9, 0.99), weight_decay=0.1, clip_after_backward=True,
            zero_after_backward=False, adam=False,
            grad_max: dict | None = None) -> dict[str, torch.Tensor]:
    """The recipe's weights after STEPS steps from ``model``'s (a copy is trained); the
    keywords replay a mistake instead. ``grad_max`` gets each weight's largest gradient."""
    model = copy.deepcopy(model)
    model.train()
    make = torch.optim.Adam if adam else torch.optim.AdamW
    opt = make(model.parameters(), lr=MAX_LR, betas=betas, weight_decay=weight_decay)
    for step, (x, y) in enumerate(batches):
        if set_lr:
            for group in opt.param_groups:
                group["lr"] = lr_at(step + lr_shift, MAX_LR, WARMUP, STEPS, MAX_LR / 10)
        logits = model(x)                                                    # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        if zero_grad and not zero_after_backward:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_max is not None:
            for k, p in model.named_parameters():
                g = p.grad.abs() if p.grad is not None else torch.zeros_like(p)
                grad_max[k] = torch.maximum(grad_max.get(k, g), g)
        if zero_after_backward:
            opt.zero_grad(set_to_none=True)
        if clip_after_backward:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


MISTAKES = (
    ("the gradient is not clipped after loss.backward(): call torch.nn.utils.clip_grad_norm_("
     "model.parameters(), grad_clip) between loss.backward() and optimizer.step() (clipping "
     "before backward clips nothing, after step clips too late)",
     {"clip_after_backward": False}),
    ("the gradients add up over the steps: call optimizer.zero_grad(set_to_none=True) before "
     "loss.backward() in every step", {"zero_grad": False}),
    ("zero_grad runs between loss.backward() and optimizer.step(): the step sees no gradient. "
     "Zero the gradients before backward", {"zero_after_backward": True}),
    ("the learning rate is never set: assign group['lr'] = getlr_at(step, ...) to every "
     "parameter group at the start of each step", {"set_lr": False}),
    ("the rate is taken one step ahead: step s uses getlr_at(s, ...), s counting from 0",
     {"lr_shift": 1}),
    ("the optimiser is AdamW's default (betas (0.9, 0.999), weight decay 0.01): create it as "
     "torch.optim.AdamW(model.parameters(), lr=max_lr, betas=(0.9, 0.99), weight_decay=0.1)",
     {"betas": (0.9, 0.999), "weight_decay": 0.01}),
    ("the optimiser has no weight decay: weight_decay=0.1", {"weight_decay": 0.0}),
    ("the optimiser is torch.optim.Adam, whose weight_decay adds the decay to the gradient "
     "(an L2 penalty that Adam then rescales); AdamW decays the weights directly: use "
     "torch.optim.AdamW", {"adam": True}),
    ("the optimiser's betas are AdamW's default (0.9, 0.999): betas=(0.9, 0.99)",
     {"betas": (0.9, 0.999)}),
)


def _gap(got: dict, want: dict, live: dict) -> tuple[float, str]:
    """The largest difference of a live weight (see LIVE) in units of the peak rate, and the
    parameter's name."""
    def gap(k):
        return float(((got[k] - want[k]).abs() * live[k]).max()) if k in live else 0.0
    worst = max(want, key=gap)
    return gap(worst) / MAX_LR, worst


def _train_step(train) -> None:
    """The weights after 4 steps equal the notebook's recipe, in two runs (see the module)."""
    manual_seed(41)
    local = ReferenceTinyGPT(VOCAB, d_model=16, num_heads=2, num_layers=1, n_ctx=BLOCK)
    g = rng(42)
    # the batches of the STEPS steps, drawn per submission (get_batch hands them out in turn)
    xs = torch.randint(0, VOCAB, (STEPS, BATCH, BLOCK + 1), generator=g)    # (steps, B, T+1)
    batches = [(w[:, :-1], w[:, 1:]) for w in xs]
    corpus = torch.randint(0, VOCAB, (64,), generator=g)
    # one rate past the last step: a rate taken one step ahead is diagnosed, not an IndexError
    rates = [lr_at(s, MAX_LR, WARMUP, STEPS, MAX_LR / 10) for s in range(STEPS + 1)]
    grad_max: dict[str, torch.Tensor] = {}
    _replay(local, batches, HUGE_CLIP, grad_max=grad_max)
    top = max(float(g.max()) for g in grad_max.values())
    live = {k: (g > LIVE * top).float() for k, g in grad_max.items()}
    for clip, what in ((HUGE_CLIP, "grad_clip=1e3, never reached"),
                       (TINY_CLIP, "grad_clip=1e-6, every step clipped")):
        model = twin(local, VOCAB, d_model=16, num_heads=2, num_layers=1, n_ctx=BLOCK)
        swapped = _course_parts(train, rates, in_kernel(BatchQueue, batches))
        label = (f"train(stand-in TinyGPT, steps={STEPS}, "
                 f"warmup_steps={WARMUP}, max_lr={MAX_LR:g}, {what})")
        call(swapped, model, corpus, corpus, steps=STEPS, batch_size=BATCH, block_size=BLOCK,
             max_lr=MAX_LR, warmup_steps=WARMUP, eval_every=STEPS, eval_iters=1,
             grad_clip=clip, name=label)
        got = {k: trusted(v.detach()).to(torch.float32) for k, v in model.state_dict().items()}
        want = _replay(local, batches, clip)
        if set(got) != set(want):
            raise CheckFailure(f"after {label} the model's weights are named "
                               f"{sorted(got)[:6]}…, expected {sorted(want)[:6]}…")
        gap, name = _gap(got, want, live)
        if gap <= TOL:
            continue
        if max(float((got[k] - local.state_dict()[k]).abs().max()) for k in got) == 0:
            raise CheckFailure(f"{label} left every weight as it was: call optimizer.step() "
                               "after loss.backward() in each step, on an optimiser over "
                               "model.parameters().")
        named = next((words for words, kw in MISTAKES
                      if _gap(got, _replay(local, batches, clip, **kw), live)[0] <= TOL), None)
        raise CheckFailure(
            f"after {label} the weights differ from the notebook's recipe by up to "
            f"{gap:.3g} × max_lr (in {name}). "
            + (f"They equal the recipe with one mistake: {named}." if named else
               "Follow Exercise 5's six steps in their order: set every group's lr, draw a "
               "batch, forward and loss, zero_grad then backward, clip, step; with "
               "AdamW(lr=max_lr, betas=(0.9, 0.99), weight_decay=0.1) made inside train."))
    note_value_checked()
