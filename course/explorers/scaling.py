"""The scaling explorer (Day 2): :func:`scaling_explorer`.

A slider for d_k shows how unscaled dot products saturate *your* softmax, and how dividing by
sqrt(d_k) prevents it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from course.explorers.handle import Explorer, interactive_frontend
from course.explorers.shared import PURPLE, TEAL, YELLOW, _caption, _new_figure
from course.profile import not_drawn_while_grading

__all__ = ["scaling_explorer"]


@not_drawn_while_grading
def scaling_explorer(softmax: Callable[..., torch.Tensor] | None = None, d_k: int = 64,
                     seq_len: int = 16, trials: int = 200, seed: int = 0,
                     interactive: bool | None = None) -> Explorer:
    """Why attention divides by sqrt(d_k), with *your* softmax and a slider for d_k.

    For random q and k with unit-variance entries, q · k has variance d_k. Left: one query's
    weights over ``seq_len`` keys, unscaled and scaled, sorted. Right: the mean largest weight
    against d_k over ``trials`` queries, with the chosen d_k marked.

    Args:
        softmax: your ``softmax(x, dim=-1)`` (default: ``torch.softmax``).
        d_k: starting value (a power of 2 from 1 to 4096).

    Returns:
        The :class:`Explorer` (value: ``d_k``).
    """
    softmax = softmax or torch.softmax
    choices = [2 ** i for i in range(13)]
    if d_k not in choices:
        raise ValueError(f"d_k must be a power of 2 from 1 to 4096, got {d_k}")
    g = torch.Generator().manual_seed(seed)
    qs = {n: torch.randn(trials, 1, n, generator=g) for n in choices}
    ks = {n: torch.randn(trials, seq_len, n, generator=g) for n in choices}

    def weights(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        scores = (qs[n] @ ks[n].transpose(-2, -1)).squeeze(1)           # (trials, seq_len)
        raw = softmax(scores, dim=-1)
        scaled = softmax(scores / math.sqrt(n), dim=-1)
        return scores, raw, scaled

    curve = {n: tuple(float(w.max(-1).values.mean()) for w in weights(n)[1:]) for n in choices}

    def draw(values: dict, static: bool):
        n = int(values["d_k"])
        scores, raw, scaled = weights(n)
        fig = _new_figure(static, (10.5, 3.8))
        ax1, ax2 = fig.subplots(1, 2)
        pos = torch.arange(seq_len).float()
        r = raw[0].sort(descending=True).values
        s = scaled[0].sort(descending=True).values
        ax1.bar((pos - 0.2).numpy(), r.numpy(), width=0.4, color=PURPLE, label="softmax(q·k)")
        ax1.bar((pos + 0.2).numpy(), s.numpy(), width=0.4, color=TEAL,
                label="softmax(q·k / √d_k)")
        ax1.axhline(1 / seq_len, ls=":", color="grey", label=f"uniform 1/{seq_len}")
        ax1.set_ylim(0, 1.05)
        ax1.set_xlabel(f"key rank (the {seq_len} keys sorted by weight)")
        ax1.set_ylabel("attention weight (0 to 1)")
        ax1.set_title(f"One query's weights at d_k = {n}", fontsize=10)
        ax1.legend(fontsize=8, loc="upper right")
        xs = list(curve)
        ax2.plot(xs, [curve[x][0] for x in xs], "o-", color=PURPLE, ms=4, label="unscaled")
        ax2.plot(xs, [curve[x][1] for x in xs], "s-", color=TEAL, ms=4, label="scaled by √d_k")
        ax2.axvline(n, color=YELLOW, lw=3, alpha=0.8, label=f"d_k = {n}")
        ax2.axhline(1 / seq_len, ls=":", color="grey")
        ax2.set_xscale("log", base=2)
        ax2.set_ylim(0, 1.05)
        ax2.set_xlabel("d_k (query/key dimension, log scale)")
        ax2.set_ylabel(f"mean largest weight ({trials} queries)")
        ax2.set_title("Without scaling, softmax saturates as d_k grows", fontsize=10)
        ax2.legend(fontsize=8, loc="center right")
        std = float(scores.std())
        caption = _caption(
            f"<p>d_k = {n}: unscaled scores have standard deviation {std:.1f} "
            f"(√d_k = {math.sqrt(n):.1f}); the top key takes {curve[n][0]:.2f} of the weight on "
            f"average. Divided by √d_k: standard deviation {std / math.sqrt(n):.2f}, top key "
            f"{curve[n][1]:.2f}. A saturated softmax (top weight near 1) has gradients near 0.</p>")
        return fig, caption

    use_widgets = interactive_frontend() if interactive is None else interactive
    controls = {}
    if use_widgets:
        import ipywidgets as w

        controls["d_k"] = w.SelectionSlider(options=choices, value=d_k, description="d_k",
                                            continuous_update=False)
    return Explorer("scaling explorer", draw, {"d_k": d_k}, controls, interactive=use_widgets)
