"""Helpers for the training days (8-11): augmentation, a live plot, figures, and stand-ins.

- :func:`random_shift` and :func:`shift_collate`: the "light augmentation" of Day 9 (random
  shifts of a couple of pixels, done per batch in the DataLoader).
- :class:`LiveMonitor`: a loss/accuracy plot that redraws in place while a loop runs (and draws
  once at the end when nbgrader executes the notebook).
- Figures that use the learner's model: :func:`plot_digits`, :func:`plot_confusion_matrix`,
  :func:`plot_curves`, :func:`plot_cls_attention`.
- Day 10's training set-ups to diagnose (:func:`bug_hunt`, :func:`lr_run`,
  :class:`TrainingRun`), built on the stand-in for Day 8's ``SequenceClassifier``: they live in
  :mod:`course.bughunt` and are re-exported here, like the stand-ins for Day 8's
  ``SequenceClassifier`` and Day 9's training functions (which live in :mod:`course.standins`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from course.profile import not_drawn_while_grading

# Imported when first asked for (PEP 562), not with this module: the helpers here load in every
# kernel, and a kernel grading Day 8 or 9 holds no stand-in of its own day (course.standins).
_LAZY = {"TrainingRun": "course.bughunt", "bug_hunt": "course.bughunt",
         "lr_run": "course.bughunt", "SequenceClassifier": "course.standins",
         "evaluate": "course.standins", "train_one_epoch": "course.standins",
         "warmup_cosine_schedule": "course.standins"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "LiveMonitor",
    "plot_cls_attention",
    "plot_confusion_matrix",
    "plot_curves",
    "plot_digits",
    "random_shift",
    "shift_collate",
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
