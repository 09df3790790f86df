"""Small helpers the explorers share: the course's colours, a figure for either mode, eval mode
for the learner's module, tolerant encoding of typed text, captions, token labels, and the width
of a model."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch.nn as nn

PURPLE, TEAL, YELLOW, BLUE = "#440154", "#21918c", "#fde725", "#3b528b"


def _new_figure(static: bool, figsize: tuple[float, float]):
    """A pyplot figure in static mode (the inline backend shows it at the end of the cell),
    a detached Figure for widgets (rendered to PNG bytes, never shown twice)."""
    if static:
        import matplotlib.pyplot as plt

        return plt.figure(figsize=figsize, layout="constrained")
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """Run in eval mode (no dropout), then give the learner their module back as it was."""
    if not isinstance(model, nn.Module):
        yield
        return
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _encode(tokenizer: Any, text: str) -> list[int]:
    """``tokenizer.encode(text)``, skipping characters it does not know (a typed prompt may
    hold some) instead of failing."""
    try:
        return list(tokenizer.encode(text))
    except (ValueError, KeyError):
        ids: list[int] = []
        for ch in text:
            try:
                ids.extend(tokenizer.encode(ch))
            except (ValueError, KeyError):
                continue
        return ids


def _caption(*parts: str) -> str:
    return "<div class='course-explorer-caption' style='font-size: 0.9em'>" + \
        "".join(parts) + "</div>"


def _fmt_token(s: str) -> str:
    return s.replace(" ", "␣").replace("\n", "⏎").replace("\t", "⇥") or "∅"


def _infer_d_model(model: Any) -> int:
    """The model's width (d_model), read from its attributes or its first layer."""
    for attr in ("d_model", "embed_dim"):
        if isinstance(getattr(model, attr, None), int):
            return getattr(model, attr)
    if isinstance(model, nn.Module):
        for m in model.modules():
            if isinstance(m, nn.Linear):
                return m.in_features
            if isinstance(m, nn.MultiheadAttention):
                return m.embed_dim
            if isinstance(m, nn.Embedding):
                return m.embedding_dim
    raise ValueError("cannot tell the model's width: pass d_model=")
