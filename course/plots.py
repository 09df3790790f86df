"""Figures that use the learner's own code. Titles, labelled axes, colour-blind-safe maps."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from course.profile import not_drawn_while_grading


@not_drawn_while_grading
def plot_softmax_saturation(softmax: Callable[..., torch.Tensor],
                            d_ks: Sequence[int] = (2, 8, 32, 128, 512), seq_len: int = 16,
                            trials: int = 200, seed: int = 0):
    """Why attention divides by sqrt(d_k): the largest softmax weight with and without scaling.

    For random q, k with unit-variance entries, q . k has variance d_k, so unscaled scores
    grow like sqrt(d_k) and the softmax collapses onto one key (its gradient vanishes).
    Dividing by sqrt(d_k) keeps the variance at 1 whatever d_k is (Vaswani et al., 2017, 3.2.1).

    Prints the largest weights at the largest d_k, next to their health checks.
    Returns the matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    g = torch.Generator().manual_seed(seed)
    raw, scaled = [], []
    for d_k in d_ks:
        q = torch.randn(trials, 1, d_k, generator=g)
        k = torch.randn(trials, seq_len, d_k, generator=g)
        scores = (q @ k.transpose(-2, -1)).squeeze(1)          # (trials, seq_len)
        raw.append(float(softmax(scores, dim=-1).max(-1).values.mean()))
        scaled.append(float(softmax(scores / math.sqrt(d_k), dim=-1).max(-1).values.mean()))
    print(f"mean largest weight at d_k = {d_ks[-1]}: unscaled {raw[-1]:.2f} (health check: "
          f"near 1), scaled {scaled[-1]:.2f} (health check: between 0.2 and 0.3)")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(d_ks, raw, "o-", color="#440154", label="softmax(q·k)")
    ax.plot(d_ks, scaled, "s-", color="#21918c", label="softmax(q·k / √d_k)")
    ax.axhline(1 / seq_len, ls=":", color="grey", label=f"uniform (1/{seq_len})")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("d_k (dimension of queries and keys)")
    ax.set_ylabel(f"mean largest weight over {seq_len} keys")
    ax.set_title("Without scaling, softmax saturates as d_k grows")
    ax.legend(loc="center right")
    fig.tight_layout()
    return fig


@not_drawn_while_grading
def plot_attention(weights: torch.Tensor, tokens_q: Sequence[str],
                   tokens_k: Sequence[str] | None = None, title: str = "Attention weights",
                   ax=None):
    """Heatmap of one (seq_q, seq_k) attention matrix: row i = where token i looks."""
    import matplotlib.pyplot as plt

    w = weights.detach().cpu().float()
    if w.dim() != 2:
        raise ValueError(f"expected a (seq_q, seq_k) matrix, got shape {tuple(w.shape)}")
    tokens_k = tokens_q if tokens_k is None else tokens_k
    if ax is None:
        _, ax = plt.subplots(figsize=(1 + 0.5 * len(tokens_k), 1 + 0.5 * len(tokens_q)))
    im = ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, vmax=float(w.max()))
    ax.set_xticks(range(len(tokens_k)), tokens_k, rotation=45, ha="right")
    ax.set_yticks(range(len(tokens_q)), tokens_q)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, label="weight")
    return ax.figure


@not_drawn_while_grading
def plot_gradient_norms(norms: torch.Tensor, title: str = "Gradient reaching each input step"):
    """Log plot of ||d h_last / d x_t|| against t: the vanishing gradient of an RNN."""
    import matplotlib.pyplot as plt

    n = norms.detach().cpu().double()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.semilogy(range(len(n)), n.clamp_min(1e-30).numpy(), "o-", color="#3b528b")
    ax.set_xlabel("input step t")
    ax.set_ylabel("‖∂ h_last / ∂ x_t‖ (log scale)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


@not_drawn_while_grading
def plot_lr_schedule(lrs: Sequence[float], warmup_steps: int, total_steps: int):
    """The learning rate at every optimizer step (``lrs[s]`` used by step ``s``), with the end
    of the warm-up marked. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(list(lrs), color="#21918c")
    ax.axvline(warmup_steps, color="#888888", linestyle=":", label="end of warm-up")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"Your schedule: {warmup_steps} warm-up steps, cosine to 0 at step "
                 f"{total_steps}")
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def family_masks(n_in: int = 4, n_out: int = 4) -> dict[str, torch.Tensor]:
    """Who may attend to whom in the three Transformer families, as bool matrices
    (True: the row's token may look at the column's token).

    - encoder-only (BERT): every input token sees every input token, (n_in, n_in);
    - decoder-only (GPT): each token sees itself and the past, (n_in + n_out, n_in + n_out);
    - encoder–decoder (T5): rows and columns are the n_in input then the n_out output tokens;
      the encoder's rows see all inputs; the decoder's rows see all inputs (cross-attention)
      and the outputs up to themselves (causal self-attention).
    """
    n = n_in + n_out
    both = torch.zeros(n, n, dtype=torch.bool)
    both[:n_in, :n_in] = True                                        # encoder: full
    both[n_in:, :n_in] = True                                        # cross-attention
    both[n_in:, n_in:] = torch.ones(n_out, n_out, dtype=torch.bool).tril()
    return {"encoder-only (BERT)": torch.ones(n_in, n_in, dtype=torch.bool),
            "decoder-only (GPT)": torch.ones(n, n, dtype=torch.bool).tril(),
            "encoder–decoder (T5)": both}


@not_drawn_while_grading
def plot_model_families(n_in: int = 4, n_out: int = 4):
    """The three families' attention patterns side by side. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    masks = family_masks(n_in, n_out)
    inputs = [f"in{i}" for i in range(n_in)]
    outputs = [f"out{i}" for i in range(n_out)]
    labels = {"encoder-only (BERT)": inputs, "decoder-only (GPT)": inputs + outputs,
              "encoder–decoder (T5)": inputs + outputs}
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.2))
    for ax, (name, mask) in zip(axes, masks.items(), strict=True):
        ax.imshow(mask.float(), cmap="viridis", vmin=0, vmax=1)
        ticks = labels[name]
        ax.set_xticks(range(len(ticks)), ticks, rotation=90, fontsize=8)
        ax.set_yticks(range(len(ticks)), ticks, fontsize=8)
        ax.set_xlabel("may look at")
        ax.set_ylabel("token")
        ax.set_title(name)
        if name.startswith("encoder–decoder"):
            ax.axhline(n_in - 0.5, color="white", lw=1)
            ax.axvline(n_in - 0.5, color="white", lw=1)
    fig.suptitle("Who attends to whom (bright: allowed)")
    fig.tight_layout()
    return fig
