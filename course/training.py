"""Helpers for the training days (8-11): augmentation, a live plot, figures, and stand-ins.

- :func:`random_shift` and :func:`shift_collate`: the "light augmentation" of Day 9 (random
  shifts of a couple of pixels, done per batch in the DataLoader).
- :class:`LiveMonitor`: a loss/accuracy plot that redraws in place while a loop runs (and draws
  once at the end when nbgrader executes the notebook).
- Figures that use the learner's model: :func:`plot_digits`, :func:`plot_confusion_matrix`,
  :func:`plot_curves`, :func:`plot_cls_attention`.
- Day 10's training set-ups to diagnose, built on the stand-ins for Day 8's
  ``SequenceClassifier`` and Day 9's training functions (which live in :mod:`course.standins`
  and are re-exported here).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from course.profile import not_drawn_while_grading
from course.standins import SequenceClassifier, evaluate, train_one_epoch, warmup_cosine_schedule

__all__ = [
    "LiveMonitor",
    "SequenceClassifier",
    "evaluate",
    "plot_cls_attention",
    "plot_confusion_matrix",
    "plot_curves",
    "plot_digits",
    "random_shift",
    "shift_collate",
    "train_one_epoch",
    "warmup_cosine_schedule",
]


# --------------------------------------------------------------------------------------------
# Augmentation
# --------------------------------------------------------------------------------------------

def random_shift(images: torch.Tensor, max_shift: int = 2, fill: float | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image by its own random (dy, dx) in [-max_shift, max_shift], filling the gap.

    Args:
        images: (B, H, W) or (B, C, H, W).
        max_shift: largest shift in pixels.
        fill: value of the uncovered border; default: the batch's smallest value (the
            background, also after normalization).
        generator: for reproducible shifts.

    Returns:
        A tensor of the same shape and dtype.
    """
    if max_shift <= 0:
        return images
    s = max_shift
    fill = float(images.min()) if fill is None else fill
    padded = F.pad(images, (s, s, s, s), value=fill)                # (..., H + 2s, W + 2s)
    B, H, W = images.shape[0], images.shape[-2], images.shape[-1]
    dy = torch.randint(0, 2 * s + 1, (B,), generator=generator).to(images.device)
    dx = torch.randint(0, 2 * s + 1, (B,), generator=generator).to(images.device)
    rows = dy[:, None] + torch.arange(H, device=images.device)     # (B, H)
    cols = dx[:, None] + torch.arange(W, device=images.device)     # (B, W)
    b = torch.arange(B, device=images.device)
    if images.dim() == 3:
        return padded[b[:, None, None], rows[:, :, None], cols[:, None, :]]
    c = torch.arange(images.shape[1], device=images.device)
    return padded[b[:, None, None, None], c[None, :, None, None], rows[:, None, :, None],
                  cols[:, None, None, :]]


def shift_collate(max_shift: int = 2, seed: int = 0) -> Callable:
    """A DataLoader ``collate_fn`` that stacks (image, label) pairs and shifts the images."""
    generator = torch.Generator().manual_seed(seed)

    def collate(batch):
        images = torch.stack([item[0] for item in batch])
        labels = torch.stack([torch.as_tensor(item[1]) for item in batch])
        return random_shift(images, max_shift, generator=generator), labels

    return collate


# --------------------------------------------------------------------------------------------
# Live plot
# --------------------------------------------------------------------------------------------

def _interactive() -> bool:
    import os

    if os.environ.get("NBGRADER_EXECUTION"):
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class LiveMonitor:
    """Record metrics during training and keep one figure of them up to date.

    ``monitor.log(step, train_loss=..., heldout_loss=..., heldout_accuracy=...)`` records
    values; names containing "loss" go on the left panel, the others (accuracies) on the
    right. In a live notebook the figure redraws at most every ``every_s`` seconds; under
    nbgrader nothing is drawn (:meth:`close` returns None).
    """

    def __init__(self, title: str = "Training", xlabel: str = "epoch", every_s: float = 2.0):
        self.title, self.xlabel, self.every_s = title, xlabel, every_s
        self.history: dict[str, list[tuple[float, float]]] = {}
        self._last = 0.0
        self._handle = None
        self._live = _interactive()

    def log(self, step: float, **values: float) -> None:
        for name, value in values.items():
            self.history.setdefault(name, []).append((float(step), float(value)))
        if self._live and time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            self._show()

    def _show(self):
        import matplotlib.pyplot as plt
        from IPython.display import display

        fig = plot_curves(self.history, self.title, self.xlabel)
        if self._handle is None:
            self._handle = display(fig, display_id=True)
        else:
            self._handle.update(fig)
        plt.close(fig)

    def close(self):
        """Draw the final figure (in place of the live one) and return it (None while
        nbgrader grades: see :func:`course.profile.not_drawn_while_grading`)."""
        fig = plot_curves(self.history, self.title, self.xlabel)
        if fig is not None and self._handle is not None:
            import matplotlib.pyplot as plt

            self._handle.update(fig)
            plt.close(fig)
        return fig


@not_drawn_while_grading
def plot_curves(history: dict[str, Sequence[tuple[float, float]]], title: str = "Training",
                xlabel: str = "epoch"):
    """Loss curves (left) and accuracy curves (right) from ``{name: [(step, value), ...]}``."""
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.5))
    colours = plt.cm.viridis([0.0, 0.45, 0.8, 0.95])
    for i, (name, points) in enumerate(sorted(history.items())):
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        ax = ax_loss if "loss" in name else ax_acc
        if "loss" not in name and max(ys) <= 1.0:
            ys = [100 * y for y in ys]
        ax.plot(xs, ys, "o-" if len(xs) < 40 else "-", ms=3, color=colours[i % 4],
                label=name.replace("_", " "))
    ax_loss.set_ylabel("cross-entropy loss (nats)")
    ax_acc.set_ylabel("accuracy (%)")
    for ax in (ax_loss, ax_acc):
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    ax_loss.set_title("Loss")
    ax_acc.set_title("Accuracy")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------

@not_drawn_while_grading
def plot_digits(images: torch.Tensor, labels: torch.Tensor | None = None,
                predictions: torch.Tensor | None = None, n: int = 16,
                title: str = "MNIST digits", cols: int = 8):
    """A grid of the first ``n`` images (B, 28, 28) with their labels (and predictions)."""
    import matplotlib.pyplot as plt

    n = min(n, len(images))
    rows = max(1, math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(1.3 * cols, 1.5 * rows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.axis("off")
        if i >= n:
            continue
        ax.imshow(images[i].detach().float().cpu().reshape(28, 28), cmap="gray_r")
        caption = "" if labels is None else f"label {int(labels[i])}"
        if predictions is not None:
            caption += f"\npred {int(predictions[i])}"
        ax.set_title(caption, fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


@not_drawn_while_grading
def plot_confusion_matrix(labels: torch.Tensor, predictions: torch.Tensor,
                          num_classes: int = 10, title: str = "Confusion matrix (held-out)"):
    """Counts of (true, predicted) pairs; the diagonal is what the model gets right."""
    import matplotlib.pyplot as plt

    counts = torch.zeros(num_classes, num_classes, dtype=torch.long)
    counts.index_put_((labels.long().cpu(), predictions.long().cpu()),
                      torch.ones(len(labels), dtype=torch.long), accumulate=True)
    fig, ax = plt.subplots(figsize=(5.2, 4.5))
    im = ax.imshow(counts, cmap="viridis")
    for i in range(num_classes):
        for j in range(num_classes):
            if counts[i, j]:
                ax.text(j, i, int(counts[i, j]), ha="center", va="center", fontsize=7,
                        color="black" if i == j else "white")
    ax.set_xticks(range(num_classes))
    ax.set_yticks(range(num_classes))
    ax.set_xlabel("predicted digit")
    ax.set_ylabel("true digit")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="number of digits")
    fig.tight_layout()
    return fig


@not_drawn_while_grading
def plot_cls_attention(images: torch.Tensor, cls_attention: torch.Tensor, patch_size: int,
                       title: str = "Where the CLS token looks (last layer, mean over heads)"):
    """Each image next to the CLS token's attention over its patches.

    Args:
        images: (B, 28, 28) or (B, 1, 28, 28).
        cls_attention: (B, num_patches) weights of the CLS query over the patch keys.
        patch_size: side of a patch in pixels.
    """
    import matplotlib.pyplot as plt

    images = images.detach().float().cpu().reshape(len(images), -1, images.shape[-1])
    B, H, W = images.shape
    grid = cls_attention.detach().float().cpu().reshape(B, H // patch_size, W // patch_size)
    fig, axes = plt.subplots(2, B, figsize=(1.8 * B, 3.8), squeeze=False)
    for i in range(B):
        axes[0, i].imshow(images[i], cmap="gray_r")
        axes[0, i].set_title(f"digit {i}", fontsize=8)
        im = axes[1, i].imshow(grid[i], cmap="viridis", vmin=0)
        axes[1, i].set_title(f"max {float(grid[i].max()):.2f}", fontsize=8)
        for ax in axes[:, i]:
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0, 0].set_ylabel("image")
    axes[1, 0].set_ylabel("CLS attention\n(per patch)")
    fig.colorbar(im, ax=axes[1, :].tolist(), shrink=0.8, label="attention weight")
    fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------------------------
# Day 10: training set-ups to diagnose
# --------------------------------------------------------------------------------------------

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
