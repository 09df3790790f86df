"""Day 9: evaluate's accuracy as a float32 mean (the grader once compared it at rtol 1e-9,
below float32's rounding)."""

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
    accuracy = (logits.argmax(dim=1) == labels).float().mean()
    return loss.item(), accuracy.item()
