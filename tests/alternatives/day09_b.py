"""Day 9, a second way: a closure schedule, gradients zeroed on the model before the forward
pass, and evaluation under @torch.no_grad() scoring all held-out logits at once."""

# %% day09_warmup_cosine_schedule
def warmup_cosine_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int,
                           total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 0 over ``warmup_steps``, then cosine decay to 0 at ``total_steps``.

    Returns:
        A LambdaLR; call ``scheduler.step()`` once after every ``optimizer.step()``.
    """
    ramp = max(1, warmup_steps)
    span = max(1, total_steps - warmup_steps)

    def factor(step):
        frac = torch.tensor((step - warmup_steps) / span, dtype=torch.float64).clamp(0.0, 1.0)
        decay = 0.5 + 0.5 * torch.cos(torch.pi * frac).item()
        return step / ramp if step < warmup_steps else decay

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=factor)


# %% day09_train_one_epoch
def train_one_epoch(model: nn.Module, loader, optimizer: torch.optim.Optimizer,
                    scheduler=None, max_grad_norm: float | None = 1.0) -> float:
    """Train ``model`` for one pass over ``loader``.

    Args:
        model: maps inputs (B, ...) to logits (B, classes).
        loader: yields (inputs, labels (B,) int64).
        optimizer: updates the model's parameters.
        scheduler: stepped after every optimizer step (None: constant learning rate).
        max_grad_norm: clip the global gradient norm to this (None: no clipping).

    Returns:
        The mean training loss per example over the epoch (a Python float).
    """
    model.train()
    where = next(iter(model.parameters())).device
    per_batch = []                          # (mean loss, batch size)
    for xb, yb in iter(loader):
        model.zero_grad(set_to_none=True)   # the optimizer's parameters are the model's
        out = model(xb.to(where))
        loss = F.cross_entropy(out, yb.to(where), reduction="mean")
        loss.backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_grad_norm,
                                           foreach=False)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        per_batch.append((loss.item(), len(yb)))
    total = math.fsum(mean * size for mean, size in per_batch)
    return total / sum(size for _, size in per_batch)


# %% day09_evaluate
@torch.no_grad()
def evaluate(model: nn.Module, loader) -> tuple[float, float]:
    """Mean loss per example and accuracy of ``model`` on ``loader``, in eval mode.

    Returns:
        (loss, accuracy) as Python floats; accuracy in [0, 1].
    """
    model.eval()
    where = next(iter(model.parameters())).device
    all_logits, all_labels = [], []
    for xb, yb in loader:
        all_logits.append(model(xb.to(where)))
        all_labels.append(yb.to(where))
    logits = torch.cat(all_logits)
    labels = torch.cat(all_labels)
    loss = F.cross_entropy(logits.float(), labels)          # mean over every example at once
    correct = int((logits.argmax(dim=1) == labels).sum())
    return loss.item(), correct / labels.numel()
