"""The positional-encoding explorer (Day 5): :func:`positional_encoding_explorer`.

The PE heatmap, one dimension's wave and how similar a chosen position is to all others, for
*your* positional encoding.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from course.explorers.handle import Explorer, interactive_frontend
from course.explorers.shared import (
    BLUE,
    TEAL,
    YELLOW,
    _caption,
    _eval_mode,
    _infer_d_model,
    _new_figure,
)
from course.profile import not_drawn_while_grading

__all__ = ["positional_encoding_explorer"]


def _pe_matrix(pe: Any, max_len: int, d_model: int | None) -> torch.Tensor:
    """(max_len, d_model) from a tensor, a module (its ``pe`` buffer, or its output on zeros)
    or a function ``pe(max_len, d_model)``."""
    if isinstance(pe, torch.Tensor):
        m = pe
    elif isinstance(pe, nn.Module):
        buf = getattr(pe, "pe", None)
        if isinstance(buf, torch.Tensor):
            m = buf
        else:
            width = d_model or _infer_d_model(pe)
            with _eval_mode(pe), torch.no_grad():
                m = pe(torch.zeros(1, max_len, width))
    elif callable(pe):
        with torch.no_grad():
            m = pe(max_len, d_model or 64)
    else:
        raise TypeError(f"expected a tensor, a module or a function, got {type(pe).__name__}")
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"the positional encoding gave a {type(m).__name__}, not a tensor")
    m = m.detach().float().cpu()
    m = m.reshape(-1, m.shape[-1])[:max_len]                        # (max_len, d_model)
    return m


@not_drawn_while_grading
def positional_encoding_explorer(pe: Any, max_len: int = 64, d_model: int | None = None,
                                 position: int = 10, dim: int = 0,
                                 interactive: bool | None = None) -> Explorer:
    """Your positional encoding, three ways, with sliders for a position and a dimension.

    Left: the (positions x dimensions) heatmap. Middle: one dimension's value along the
    positions (a sine or cosine whose wavelength grows with the dimension). Right: the cosine
    similarity of the chosen position's encoding with every position's: high near it, lower
    far away — which is how attention can tell near from far.

    Args:
        pe: your encoding as a (max_len, d_model) tensor, a module (its ``pe`` buffer, or what
            it adds to a zero input), or a function ``pe(max_len, d_model) -> tensor``.
        max_len: positions shown.
        d_model: width when it cannot be read from ``pe``.
        position, dim: starting slider values.

    Returns:
        The :class:`Explorer` (values: ``position``, ``dim``).
    """
    m = _pe_matrix(pe, max_len, d_model)
    n_pos, width = m.shape
    lo, hi = float(m.min()), float(m.max()) + 1e-6
    unit = m / m.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    sim = unit @ unit.T                                                 # (n_pos, n_pos)

    def draw(values: dict, static: bool):
        p, i = int(values["position"]), int(values["dim"])
        fig = _new_figure(static, (13.0, 3.8))
        ax1, ax2, ax3 = fig.subplots(1, 3, width_ratios=[1.3, 1, 1])
        im = ax1.imshow(m.numpy(), cmap="cividis", aspect="auto", vmin=float(m.min()),
                        vmax=float(m.max()))
        ax1.axhline(p, color="white", lw=0.8, ls="--")
        ax1.axvline(i, color="white", lw=0.8, ls="--")
        ax1.set_xlabel("encoding dimension i")
        ax1.set_ylabel("position (token index)")
        ax1.set_title(f"PE: {n_pos} positions × {width} dimensions", fontsize=10)
        fig.colorbar(im, ax=ax1, fraction=0.046, label="PE value")
        ax2.plot(range(n_pos), m[:, i].numpy(), "-", color=BLUE, lw=1.5)
        ax2.plot([p], [float(m[p, i])], "o", color=YELLOW, mec="black", ms=7,
                 label=f"position {p}")
        ax2.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))   # fixed: panels stay put
        ax2.set_xlabel("position (token index)")
        ax2.set_ylabel(f"PE[:, {i}] (unitless)")
        wave = 2 * math.pi * 10000 ** (2 * (i // 2) / width)
        ax2.set_title(f"dimension {i}: {'sin' if i % 2 == 0 else 'cos'}-like, sinusoidal "
                      f"wavelength {wave:.3g} positions", fontsize=9)
        ax2.legend(fontsize=8, loc="lower right")
        ax3.plot(range(n_pos), sim[p].numpy(), "-", color=TEAL, lw=1.5)
        ax3.axvline(p, color=YELLOW, lw=3, alpha=0.8)
        ax3.set_ylim(min(-0.05, float(sim[p].min()) - 0.05), 1.05)
        ax3.set_xlabel("other position (token index)")
        ax3.set_ylabel("cosine similarity (−1 to 1)")
        ax3.set_title(f"How alike position {p} is to every position", fontsize=10)
        near = [float(sim[p, q]) for q in (p - 1, p + 1) if 0 <= q < n_pos]
        far = float(sim[p, (p + n_pos // 2) % n_pos])
        caption = _caption(
            f"<p>Position {p}: cosine similarity {max(near, default=1.0):.2f} with a "
            f"neighbour, {far:.2f} with position {(p + n_pos // 2) % n_pos}. Dimension {i} "
            f"ranges from {float(m[:, i].min()):.2f} to {float(m[:, i].max()):.2f}.</p>")
        return fig, caption

    use_widgets = interactive_frontend() if interactive is None else interactive
    position = min(position, n_pos - 1)
    dim = min(dim, width - 1)
    controls = {}
    if use_widgets:
        import ipywidgets as w

        controls["position"] = w.IntSlider(position, 0, n_pos - 1, description="position",
                                           continuous_update=False)
        controls["dim"] = w.IntSlider(dim, 0, width - 1, description="dimension",
                                      continuous_update=False)
    return Explorer("positional-encoding explorer", draw, {"position": position, "dim": dim},
                    controls, interactive=use_widgets)
