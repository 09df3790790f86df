"""What the heads of a trained GPT look at (Day 13): attention maps and a figure.

Day 4 said that trained heads specialise, and showed only untrained ones. Day 13 shows it on the
learner's own trained TinyGPT, or the stand-in: :func:`attention_maps` reads the weights with
:func:`course.explorers.capture.capture_attention` (the explorers' recorder: every softmax of a
3-D or 4-D tensor and every ``F.scaled_dot_product_attention`` call), so it needs nothing of the
model but its forward pass. Nothing here is an exercise's answer.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from course.profile import not_drawn_while_grading


def attention_maps(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """Attention weights of every layer and head for the first sequence of ``idx``.

    Args:
        model: a TinyGPT; idx: (B, T) long token ids, T <= the model's n_ctx.

    Returns:
        (L, H, T, T) float tensor on the CPU, layers in the order they ran; row t holds where
        position t looks (rows sum to 1).

    Raises:
        ValueError: when the forward pass computes no attention the recorder can see.
    """
    from course.explorers.capture import capture_attention

    _, maps = capture_attention(model, idx[:1])
    if not maps:
        raise ValueError("no attention weights were seen in the model's forward pass")
    return torch.stack([weights for _, weights in maps])                      # (L, H, T, T)


def previous_token_scores(maps: torch.Tensor) -> torch.Tensor:
    """(L, H): the mean weight each head puts on the position just before the query
    (positions 1..T-1; 1.0 = a perfect previous-token head, about 1/t for a uniform one)."""
    T = maps.size(-1)
    rows = torch.arange(1, T)
    return maps[..., rows, rows - 1].mean(-1)                                  # (L, H)


@not_drawn_while_grading
def plot_heads(maps: torch.Tensor, text: str, scores: torch.Tensor, n: int = 32):
    """Left: every head's previous-token score; right: the map of the best head over the
    first ``n`` characters of ``text``. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    layer, head = divmod(int(scores.argmax()), scores.size(1))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5), width_ratios=(1, 2.2))
    im = ax1.imshow(scores, vmin=0, vmax=1, cmap="viridis")
    ax1.set_xlabel("head")
    ax1.set_ylabel("layer")
    ax1.set_xticks(range(scores.size(1)))
    ax1.set_yticks(range(scores.size(0)))
    ax1.set_title("weight on the previous character")
    fig.colorbar(im, ax=ax1, shrink=0.7)
    labels = [repr(c)[1:-1] for c in text[:n]]
    ax2.imshow(maps[layer, head, :n, :n], vmin=0, vmax=1, cmap="viridis")
    ax2.set_xticks(range(len(labels)), labels, fontsize=7)
    ax2.set_yticks(range(len(labels)), labels, fontsize=7)
    ax2.set_xlabel("key (the character looked at)")
    ax2.set_ylabel("query (the character looking)")
    ax2.set_title(f"layer {layer}, head {head}")
    fig.tight_layout()
    return fig
