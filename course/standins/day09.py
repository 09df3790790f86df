"""Day 9's stand-ins: ``train_one_epoch``, ``evaluate`` and ``warmup_cosine_schedule``, the
plain loops any correct answer computes (there is no built-in to delegate them to)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["evaluate", "train_one_epoch", "warmup_cosine_schedule"]


def train_one_epoch(model: nn.Module, loader, optimizer: torch.optim.Optimizer,
                    scheduler=None, max_grad_norm: float | None = 1.0) -> float:
    """Day 9's contract: one pass over ``loader``; the example-weighted mean training loss."""
    model.train()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        loss = F.cross_entropy(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        total += loss.item() * len(labels)
        count += len(labels)
    return total / max(count, 1)


@torch.no_grad()
def evaluate(model: nn.Module, loader) -> tuple[float, float]:
    """Day 9's contract: (mean loss, accuracy in [0, 1]) in eval mode, without gradients."""
    model.eval()
    device = next(model.parameters()).device
    total, correct, count = 0.0, 0, 0
    for inputs, labels in loader:
        inputs, labels = inputs.to(device), labels.to(device)
        logits = model(inputs)
        total += float(F.cross_entropy(logits, labels, reduction="sum"))
        correct += int((logits.argmax(-1) == labels).sum())
        count += len(labels)
    return total / max(count, 1), correct / max(count, 1)


def warmup_cosine_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int,
                           total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Day 9's contract: linear warm-up from 0, then cosine decay to 0 at ``total_steps``."""
    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
