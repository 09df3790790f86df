"""Day 10's training set-ups to diagnose: :func:`bug_hunt` and :func:`lr_run`.

Each set-up trains the stand-in for Day 8's ``SequenceClassifier`` (:mod:`course.standins`) for
a few dozen steps on MNIST-10k; ``"healthy"`` is the reference, and each lettered set-up has one
thing wrong, for the learner to find. :func:`bug_hunt` returns a :class:`TrainingRun` (the model,
its losses, one batch) to inspect with their own tools; :func:`lr_run` trains the healthy set-up
at another learning rate. MNIST is read once per process. :mod:`course.training` re-exports
these names.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from course.standins import SequenceClassifier

__all__ = ["TrainingRun", "bug_hunt", "lr_run"]


class _Classifier(SequenceClassifier):
    """The stand-in classifier with an optional attention mask for every layer."""

    def __init__(self, *args, dropout: float = 0.0, attn_mask: torch.Tensor | None = None):
        super().__init__(*args)
        if dropout:
            for layer in self.layers:
                layer.dropout.p = dropout
                layer.ffn.dropout.p = dropout
        self.attn_mask = attn_mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.input_proj(x)                                       # (B, T, C)
        h = torch.cat([self.cls_token.expand(len(h), -1, -1), h], 1)  # (B, T + 1, C)
        h = self.pos_encoding(h)
        for layer in self.layers:
            h = layer(h, self.attn_mask)
        return self.head(self.norm(h)[:, 0])


class TrainingRun:
    """The outcome of one training set-up, for you to inspect with your tools.

    Attributes:
        name: the set-up's letter.
        model: the model as training left it (its ``.grad`` fields hold the last gradients).
        losses: the training loss at every step (Python floats).
        inputs, labels: one batch exactly as this set-up feeds it to the model.

    ``evaluate()`` and ``heldout_loss()`` measure it on 500 held-out digits (100 while
    nbgrader grades).
    """

    def __init__(self, name, model, losses, inputs, labels, evaluator):
        self.name, self.model, self.losses = name, model, losses
        self.inputs, self.labels = inputs, labels
        self._evaluator = evaluator

    def evaluate(self) -> float:
        """Held-out accuracy (fraction) on the held-out digits, measured the way this set-up
        does it."""
        return self._evaluator()[0]

    def heldout_loss(self) -> float:
        """Held-out cross-entropy (nats per digit) on the same digits, measured the same way.

        Unlike the accuracy, which moves only when an argmax flips, the loss changes with any
        change of the logits: two calls on a deterministic model return the same float.
        """
        return self._evaluator()[1]

    def __repr__(self) -> str:
        return (f"TrainingRun({self.name}: {len(self.losses)} steps, first loss "
                f"{self.losses[0]:.3f}, last loss {self.losses[-1]:.3f})")


@functools.cache
def _mnist():
    """MNIST, read once per process for the 16 runs of Day 10 (only read, never changed)."""
    from course.data import load_mnist

    return load_mnist()


def _train_setup(name: str, *, lr: float = 3e-3, zero_grad: bool = True,
                 shuffle_labels: bool = False, self_only_mask: bool = False,
                 dropout: float = 0.0, eval_mode: bool = True, raw_pixels: bool = False,
                 steps: int | None = None, seed: int = 0) -> TrainingRun:
    from course.profile import pick

    # While nbgrader grades, the runs feed only a table nobody reads (the diagnosis is the
    # learner's own): a few steps and a smaller held-out set keep the cell's code running.
    steps = pick(grading=8, cpu=30) if steps is None else steps
    n_held = pick(grading=100, cpu=500)

    mnist = _mnist()
    x = mnist.train_images[:1024].float() / 255
    mean, std = float(x.mean()), float(x.std())
    def prepare(images):
        pixels = images.float()
        return pixels if raw_pixels else (pixels / 255 - mean) / std   # (N, 28, 28)

    train_x, train_y = prepare(mnist.train_images[:1024]), mnist.train_labels[:1024].clone()
    held_x, held_y = prepare(mnist.heldout_images[:n_held]), mnist.heldout_labels[:n_held]
    g = torch.Generator().manual_seed(seed)
    if shuffle_labels:
        train_y = train_y[torch.randperm(len(train_y), generator=g)]
    mask = torch.eye(29, dtype=torch.bool) if self_only_mask else None
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = _Classifier(28, 10, 32, 4, 64, 2, 28, dropout=dropout, attn_mask=mask)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    model.train()
    for step in range(steps):
        idx = torch.randint(0, len(train_x), (64,), generator=g)
        loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        del step

    def evaluator() -> tuple[float, float]:
        # set-up B forgets model.eval(): dropout stays on, and each evaluation differs
        model.train(not eval_mode)
        with torch.no_grad():
            logits = model(held_x)                                   # (n_held, 10)
            accuracy = float((logits.argmax(-1) == held_y).float().mean())
            loss = F.cross_entropy(logits, held_y).item()
        return accuracy, loss

    return TrainingRun(name, model, losses, train_x[:64], train_y[:64], evaluator)


# Letter -> set-up. "healthy" is the reference to compare against.
_SETUPS: dict[str, dict] = {
    "healthy": {},
    "A": {"shuffle_labels": True},
    "B": {"dropout": 0.3, "eval_mode": False},
    "C": {"zero_grad": False},
    "D": {"self_only_mask": True},
    "E": {"raw_pixels": True},
    "F": {"lr": 0.3},
}


def lr_run(lr: float) -> TrainingRun:
    """The healthy Day 10 set-up trained at peak learning rate ``lr``: one point of a sweep.

    Every rate starts from the same initial weights and sees the same batches (AdamW, weight
    decay 0.01; 30 steps in the ``cpu`` profile, 8 in ``grading``), so the final losses differ
    by the rate alone.

    Raises:
        ValueError: if ``lr`` is not a positive, finite number.
    """
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr) \
            or lr <= 0:
        raise ValueError(f"lr must be a positive, finite number, got {lr!r}")
    return _train_setup(f"lr={lr:g}", lr=float(lr))


def bug_hunt(name: str) -> TrainingRun:
    """Run the Day 10 training set-up ``name`` ("healthy", "A", ..., "F") and return it."""
    if name not in _SETUPS:
        raise KeyError(f"unknown set-up {name!r}; choose from {sorted(_SETUPS)}")
    return _train_setup(name, **_SETUPS[name])
