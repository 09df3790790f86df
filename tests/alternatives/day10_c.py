"""Day 10: activation_stats with the population std (correction=0), accepted like the
sample std (the grader once reported an internal error for it instead of passing)."""

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
            std, mean = torch.std_mean(output.detach(), correction=0)
            stats[name] = (float(mean), float(std))

    handle = register_module_forward_hook(global_hook)
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        handle.remove()
    return stats


