"""Day 9 written another way: the schedule as cos² of a half angle in a small callable class,
clipping by hand from a float64 global norm, losses summed as float64 tensors, and evaluation
under inference_mode with a hand-written log-softmax cross-entropy."""

# %% day09_warmup_cosine_schedule
def warmup_cosine_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int,
                           total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 0 over ``warmup_steps``, then cosine decay to 0 at ``total_steps``.

    Returns:
        A LambdaLR; call ``scheduler.step()`` once after every ``optimizer.step()``.
    """

    class _Factor:
        # ½(1 + cos(π t)) == cos²(π t / 2): the same half cosine, written as a square
        def __init__(self, warm: int, total: int) -> None:
            self.warm = warm
            self.decay_len = max(1, total - warm)
            self.warm_len = max(1, warm)

        def __call__(self, step: int) -> float:
            if step >= self.warm:
                progress = min(1.0, (step - self.warm) / self.decay_len)
                return math.cos(0.5 * math.pi * progress) ** 2
            return step / self.warm_len

    return torch.optim.lr_scheduler.LambdaLR(optimizer, _Factor(warmup_steps, total_steps))


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
    device = next(model.parameters()).device
    loss_sum = torch.zeros((), dtype=torch.float64)
    seen = 0
    for batch_inputs, batch_labels in loader:
        x = batch_inputs.to(device)
        y = batch_labels.to(device)
        batch_loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        batch_loss.backward()
        if max_grad_norm is not None:
            # the global norm, accumulated in float64, then one common factor for every gradient
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            if grads:
                squares = sum(g.detach().double().pow(2).sum().cpu() for g in grads)
                global_norm = float(squares) ** 0.5
                factor = max_grad_norm / (global_norm + 1e-6)
                if factor < 1.0:
                    for g in grads:
                        g.mul_(factor)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        n = y.shape[0]
        loss_sum += batch_loss.detach().double().cpu() * n
        seen += n
    return float(loss_sum / seen)


# %% day09_evaluate
def evaluate(model: nn.Module, loader) -> tuple[float, float]:
    """Mean loss per example and accuracy of ``model`` on ``loader``, in eval mode.

    Returns:
        (loss, accuracy) as Python floats; accuracy in [0, 1].
    """
    model.eval()
    device = next(model.parameters()).device
    nll_total = 0.0
    hits = 0
    count = 0
    with torch.inference_mode():
        for x, y in loader:
            y = y.to(device)
            logits = model(x.to(device)).double()
            # cross-entropy by hand: logsumexp minus the true class's logit, per example
            nll = torch.logsumexp(logits, dim=-1) - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)
            nll_total += nll.sum().item()
            hits += int(torch.eq(logits.max(dim=-1).indices, y).sum())
            count += len(y)
    return nll_total / count, hits / count
