"""Day 10, a second way: torch.linalg norms, one global module forward hook (filtered to the
model's submodules) with torch.std_mean, entropy via clamp_min + log, torch.optim.SGD with a
deep-copied state_dict, and dead units counted with .all() through functools.partial hooks."""

# %% day10_gradient_norms
def gradient_norms(model: nn.Module) -> dict[str, float]:
    """L2 norm of each parameter's gradient (call after loss.backward()).

    Returns:
        {name: norm} for the parameters of ``model.named_parameters()`` whose ``.grad`` is not
        None, as Python floats.
    """
    with_grad = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
    return {n: torch.linalg.vector_norm(g, ord=2).item() for n, g in with_grad}


# %% day10_activation_stats
def activation_stats(model: nn.Module, inputs: torch.Tensor) -> dict[str, tuple[float, float]]:
    """(mean, std) of the output of every named submodule for one forward pass.

    Args:
        model: any nn.Module; inputs: what ``model`` takes.

    Returns:
        {submodule name: (mean, std)} as Python floats; every hook removed afterwards.
    """
    from torch.nn.modules.module import register_module_forward_hook

    wanted = {id(m): n for n, m in model.named_modules() if n}
    stats = {}

    def global_hook(module, args, output):
        name = wanted.get(id(module))
        if name is None:                      # the model itself, or a module of another model
            return
        if isinstance(output, tuple):
            output = output[0]
        if isinstance(output, torch.Tensor) and output.dtype.is_floating_point:
            std, mean = torch.std_mean(output.detach())
            stats[name] = (float(mean), float(std))

    handle = register_module_forward_hook(global_hook)
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        handle.remove()
    return stats


# %% day10_attention_entropy
def attention_entropy(attn_weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row.

    Args:
        attn_weights: (..., seq_q, seq_k), rows sum to 1, entries >= 0 (masked keys exactly 0).

    Returns:
        (..., seq_q): -sum_j p_j ln p_j, with 0 ln 0 = 0.
    """
    tiny = torch.finfo(attn_weights.dtype).tiny
    log_p = attn_weights.clamp_min(tiny).log()          # finite everywhere; 0 * finite = 0
    return -(attn_weights * log_p).sum(-1)


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
    import copy

    before = copy.deepcopy({n: p.data for n, p in model.named_parameters()})
    sgd = torch.optim.SGD(model.parameters(), lr=lr)
    sgd.zero_grad()
    logits = model(inputs)
    F.cross_entropy(logits, labels).backward()
    sgd.step()
    after = dict(model.named_parameters())
    return {n: (after[n].detach() - old).abs().max().item() for n, old in before.items()}


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
    import functools

    found = {}

    def count(name, module, args, output):
        d_ff = output.shape[-1]
        below = output.reshape(-1, d_ff) <= threshold       # (rows, d_ff)
        found[name] = int(below.all(dim=0).sum().item())

    targets = [(n, m) for n, m in model.named_modules() if n.endswith("linear1")]
    handles = []
    try:
        for n, m in targets:
            handles.append(m.register_forward_hook(functools.partial(count, n)))
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return found


# %% day10_diagnosis
DIAGNOSIS = dict(
    F="lr_too_high",
    E="unnormalized_inputs",
    D="mask_blocks_attention",
    C="no_zero_grad",
    B="dropout_at_eval",
    A="shuffled_labels",
)
