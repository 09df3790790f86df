"""Day 10 written another way: norms and statistics accumulated in float64 by hand, one shared
hook function that finds each module's name by identity, entropy with torch.special.xlogy,
a hand-written SGD update measured with an infinity norm, and dead units found via row maxima."""

# %% day10_gradient_norms
def gradient_norms(model: nn.Module) -> dict[str, float]:
    """L2 norm of each parameter's gradient (call after loss.backward()).

    Returns:
        {name: norm} for the parameters of ``model.named_parameters()`` whose ``.grad`` is not
        None, as Python floats.
    """
    result = {}
    for pname, param in model.named_parameters():
        g = param.grad
        if g is None:
            continue
        # sqrt of the sum of squares, in float64
        result[pname] = math.sqrt(g.detach().double().square().sum().item())
    return result


# %% day10_activation_stats
def activation_stats(model: nn.Module, inputs: torch.Tensor) -> dict[str, tuple[float, float]]:
    """(mean, std) of the output of every named submodule for one forward pass.

    Args:
        model: any nn.Module; inputs: what ``model`` takes.

    Returns:
        {submodule name: (mean, std)} as Python floats; every hook removed afterwards.
    """
    names_by_id = {id(mod): nm for nm, mod in model.named_modules() if nm != ""}
    recorded: dict[str, tuple[float, float]] = {}

    def record(module, _inputs, output):
        first = output[0] if isinstance(output, tuple) else output
        if not (torch.is_tensor(first) and torch.is_floating_point(first)):
            return
        values = first.detach().double().flatten()
        n = values.numel()
        mean = values.sum() / n
        # unbiased variance from E[x^2] - E[x]^2 (as torch.std, correction 1)
        spread = values.square().sum() - n * mean * mean
        var = spread / (n - 1) if n > 1 else torch.tensor(float("nan"), dtype=torch.float64)
        recorded[names_by_id[id(module)]] = (mean.item(), var.clamp_min(0.0).sqrt().item())

    handles = []
    try:
        for nm, mod in model.named_modules():
            if nm:
                handles.append(mod.register_forward_hook(record))
        with torch.no_grad():
            model(inputs)
    finally:
        while handles:
            handles.pop().remove()
    return recorded


# %% day10_attention_entropy
def attention_entropy(attn_weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row.

    Args:
        attn_weights: (..., seq_q, seq_k), rows sum to 1, entries >= 0 (masked keys exactly 0).

    Returns:
        (..., seq_q): -sum_j p_j ln p_j, with 0 ln 0 = 0.
    """
    # xlogy(x, y) = x * ln(y), defined as 0 where x == 0
    return torch.special.xlogy(attn_weights, attn_weights).sum(dim=-1).neg()


# %% day10_one_step_changes
def one_step_changes(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor,
                     lr: float = 0.1) -> dict[str, float]:
    """How far one plain SGD step on cross_entropy(model(inputs), labels) moves each parameter.

    Args:
        model: a classifier returning logits (B, num_classes); it is stepped in place.
        inputs: what ``model`` takes; labels: (B,) long class indices.
        lr: the SGD learning rate.

    Returns:
        {name: max |parameter after - parameter before|} for every parameter of
        ``model.named_parameters()``, as Python floats (0.0: it did not move).
    """
    params = dict(model.named_parameters())
    snapshot = {nm: torch.clone(p.detach()) for nm, p in params.items()}
    for p in params.values():
        p.grad = None                     # stale gradients must not leak into this step
    F.cross_entropy(model(inputs), labels).backward()
    with torch.no_grad():
        for p in params.values():         # plain SGD: p <- p - lr * grad
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
    changes = {}
    for nm, p in params.items():
        delta = (p.detach() - snapshot[nm]).flatten()
        if delta.numel() == 0:
            changes[nm] = 0.0
        else:
            changes[nm] = float(torch.linalg.vector_norm(delta, ord=float("inf")))
    return changes


# %% day10_dead_units
def dead_units(model: nn.Module, inputs: torch.Tensor,
               threshold: float = -3.0) -> dict[str, int]:
    """Hidden units of each feed-forward block whose input stays at or below ``threshold``.

    Args:
        model: any nn.Module; its feed-forward input layers are the submodules whose names end
            with "linear1". inputs: what ``model`` takes.
        threshold: a unit is dead when its linear1 output is <= threshold for every row. The
            default -3.0 suits GELU (|GELU'| <= 0.012 there); 0.0 is the exact rule for ReLU.

    Returns:
        {name: count of output units of that layer that are <= threshold for every example
        and position}, as ints; every hook removed afterwards.
    """
    counts: dict[str, int] = {}

    def make_hook(layer_name):
        def hook(_module, _inputs, out):
            rows = out.reshape(-1, out.shape[-1])
            # a unit is dead when even its largest value over all rows is <= threshold
            counts[layer_name] = int(torch.count_nonzero(rows.amax(dim=0) <= threshold))
        return hook

    handles = [mod.register_forward_hook(make_hook(nm))
               for nm, mod in model.named_modules() if nm.endswith("linear1")]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return counts


# %% day10_diagnosis
# read from the table: A at ln 10 with spread attention; B's two held-out losses differ;
# C's gradients ~13x the healthy run's; D's entropy is 0 and 8 parameters never move;
# E's input projection std ~44 with raw-pixel inputs; F jumps to 9.4 and kills 51 units.
_FINDINGS = [
    ("shuffled_labels", "A"),
    ("dropout_at_eval", "B"),
    ("no_zero_grad", "C"),
    ("mask_blocks_attention", "D"),
    ("unnormalized_inputs", "E"),
    ("lr_too_high", "F"),
]
DIAGNOSIS = {setup: bug for bug, setup in _FINDINGS}
