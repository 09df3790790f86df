"""Helpers for Days 12-14 (text generation): figures, a stand-in model, widgets.

Nothing here is an exercise's answer. The stand-in :class:`ReferenceTinyGPT` (defined in
:mod:`course.standins` as ``TinyGPT``) is assembled from PyTorch's own
``nn.TransformerEncoderLayer`` (not from the Day 12 exercises), so that Days 13 and 14 can run,
and be graded, on their own code alone:

- :func:`load_tinygpt` returns the learner's ``TinyGPT`` from their Day 12 notebook when it
  exists and works, otherwise (and always while nbgrader grades) the stand-in.
- :func:`plot_causal_influence`, :func:`plot_loss_curves`, :func:`plot_sampling_distribution`,
  :func:`plot_attention_memory`: figures that take the learner's code as an argument.
- :func:`sampling_widget`: sliders for temperature, top-k and top-p around the learner's
  ``generate``.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn as nn

from course.previous import load_previous
from course.profile import not_drawn_while_grading

__all__ = [
    "attention_memory",
    "load_tinygpt",
    "plot_attention_memory",
    "plot_causal_influence",
    "plot_finetune",
    "plot_loss_curves",
    "plot_sampling_distribution",
    "saved_activation_bytes",
    "sampling_widget",
    "show_side_by_side",
]

DAY12 = "day12_causal_attention_tinygpt"


# --------------------------------------------------------------------------- Day 12 figure


@torch.no_grad()
def causal_influence(model: nn.Module, seq_len: int, vocab_size: int | None = None,
                     seed: int = 0) -> torch.Tensor:
    """How much the logits at position i move when the token at position j changes.

    Returns a (seq_len, seq_len) tensor: entry [i, j] is the largest absolute change of the
    logits at output position i after replacing input token j. A causal model gives a lower
    triangle (j <= i).
    """
    model = model.eval()
    vocab = vocab_size or _vocab_of(model)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab, (1, seq_len), generator=g)
    base = model(idx)                                   # (1, N, V)
    out = torch.zeros(seq_len, seq_len)
    for j in range(seq_len):
        changed = idx.clone()
        changed[0, j] = (changed[0, j] + 1 + int(torch.randint(0, vocab - 1, (1,), generator=g))
                         ) % vocab
        out[:, j] = (model(changed) - base).abs().amax(-1)[0]
    return out


def _vocab_of(model: nn.Module) -> int:
    head = getattr(model, "head", None)
    if isinstance(head, nn.Linear):
        return head.out_features
    raise ValueError("pass vocab_size=: the model has no nn.Linear `head`")


@not_drawn_while_grading
def plot_causal_influence(model: nn.Module, seq_len: int = 16, vocab_size: int | None = None,
                          seed: int = 0):
    """Heatmap of :func:`causal_influence`: output position against changed input position."""
    import matplotlib.pyplot as plt

    infl = causal_influence(model, seq_len, vocab_size, seed)
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    im = ax.imshow(torch.log10(infl + 1e-12).numpy(), cmap="viridis", vmin=-12,
                   vmax=float(torch.log10(infl.max() + 1e-12)))
    ax.set_xlabel("input position j whose token was changed")
    ax.set_ylabel("output position i (its logits)")
    ax.set_title("Which predictions move when one token changes")
    fig.colorbar(im, ax=ax, fraction=0.046, label="log10 max |Δ logit|")
    upper = infl.triu(diagonal=1)
    ax.text(0.98, 0.98, f"max change above the diagonal: {float(upper.max()):.1e}",
            transform=ax.transAxes, ha="right", va="top", fontsize=8, color="white")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- stand-in model


def load_tinygpt(notebook: str | Path | None = None, verbose: bool = True) -> type[nn.Module]:
    """The ``TinyGPT`` class to build on: yours from Day 12 if it works, else the stand-in.

    A thin wrapper over :func:`course.previous.load_previous` for Day 12's ``TinyGPT`` (the
    same rules: your class if it runs and is causal, the stand-in when it is missing, broken,
    or nbgrader is grading). ``notebook`` is the Day 12 notebook file (default:
    ``../day12_causal_attention_tinygpt/day12_causal_attention_tinygpt.ipynb``); ``verbose``
    False hides the line that says which class is used, and why.
    """
    if verbose:
        return load_previous(DAY12, "TinyGPT", notebook=notebook)
    with contextlib.redirect_stdout(io.StringIO()):
        return load_previous(DAY12, "TinyGPT", notebook=notebook)


# --------------------------------------------------------------------------- Day 13 figures


@not_drawn_while_grading
def plot_loss_curves(history: dict, title: str = "TinyGPT on Tiny Shakespeare",
                     vocab_size: int | None = 65):
    """Training and validation loss (nats per character) against the optimisation step.

    ``history`` holds lists ``step``, ``train_loss`` and ``val_loss`` of equal length.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(history["step"], history["train_loss"], "o-", color="#3b528b", ms=3, label="train")
    ax.plot(history["step"], history["val_loss"], "s-", color="#5ec962", ms=3, label="validation")
    if vocab_size:
        ax.axhline(math.log(vocab_size), ls=":", color="grey",
                   label=f"uniform guess ln({vocab_size}) = {math.log(vocab_size):.2f}")
    ax.set_xlabel("optimisation step")
    ax.set_ylabel("cross-entropy loss (nats per character)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


@not_drawn_while_grading
def show_side_by_side(left: str, right: str, titles: Sequence[str] = ("before", "after"),
                      width: int = 48) -> None:
    """Print two texts as two columns (samples before and after training)."""
    def wrap(text: str) -> list[str]:
        lines = []
        for raw in text.splitlines() or [""]:
            while len(raw) > width:
                lines.append(raw[:width])
                raw = raw[width:]
            lines.append(raw)
        return lines

    a, b = wrap(left), wrap(right)
    print(f"{titles[0]:<{width}} | {titles[1]}")
    print("-" * width + "-+-" + "-" * width)
    for i in range(max(len(a), len(b))):
        print(f"{(a[i] if i < len(a) else ''):<{width}} | {b[i] if i < len(b) else ''}")


@not_drawn_while_grading
def plot_sampling_distribution(generate: Callable[..., torch.Tensor], logits: torch.Tensor,
                               settings: Sequence[dict], draws: int = 4000, seed: int = 0,
                               labels: Sequence[str] | None = None):
    """Bar chart of the token frequencies ``generate`` produces from fixed logits.

    A tiny model that always returns ``logits`` (shape (V,)) is sampled ``draws`` times for each
    dict of keyword arguments in ``settings`` (temperature, top_k, top_p).
    """
    import matplotlib.pyplot as plt

    model = _FixedLogits(logits)
    vocab = logits.numel()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(settings)
    colors = plt.get_cmap("viridis")(torch.linspace(0.1, 0.9, len(settings)).numpy())
    for n, kw in enumerate(settings):
        g = torch.Generator().manual_seed(seed + n)
        idx = torch.zeros(draws, 1, dtype=torch.long)
        with torch.no_grad():
            out = generate(model, idx, 1, generator=g, **kw)
        freq = torch.bincount(out[:, -1], minlength=vocab).double() / draws
        label = ", ".join(f"{k}={v}" for k, v in kw.items()) or "defaults"
        ax.bar(torch.arange(vocab).numpy() + (n - (len(settings) - 1) / 2) * width,
               freq.numpy(), width=width, color=colors[n], label=label)
    ax.set_xticks(range(vocab), labels if labels is not None else range(vocab))
    ax.set_xlabel("token")
    ax.set_ylabel(f"frequency over {draws} draws")
    ax.set_title("What temperature, top-k and top-p do to one distribution")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


class _FixedLogits(nn.Module):
    """A 'model' whose next-token logits are always the same vector (for sampling demos)."""

    def __init__(self, logits: torch.Tensor, n_ctx: int = 8) -> None:
        super().__init__()
        self.register_buffer("logits", logits.detach().float().reshape(-1))
        self.n_ctx = n_ctx

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, n = idx.shape
        return self.logits.expand(b, n, -1).clone()


@not_drawn_while_grading
def sampling_widget(model: nn.Module, tokenizer, generate: Callable[..., torch.Tensor],
                    prompt: str = "ROMEO:", max_new_tokens: int = 200):
    """Sliders for temperature, top-k and top-p and a button that regenerates with your code.

    Returns the ipywidgets box (display it as the last line of a cell), or None without
    ipywidgets.
    """
    try:
        import ipywidgets as w
    except ImportError:  # pragma: no cover - ipywidgets is a course dependency
        print("install ipywidgets for the interactive version")
        return None
    temperature = w.FloatSlider(value=0.8, min=0.1, max=2.0, step=0.05, description="temperature")
    top_k = w.IntSlider(value=0, min=0, max=65, description="top-k (0=off)")
    top_p = w.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="top-p")
    seed = w.IntText(value=0, description="seed")
    button = w.Button(description="generate")
    out = w.Output(layout={"border": "1px solid #ccc"})

    def run(_=None) -> None:
        device = next(model.parameters()).device
        g = torch.Generator(device=device).manual_seed(int(seed.value))
        idx = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long, device=device)
        with torch.no_grad():
            ids = generate(model, idx, max_new_tokens, temperature=temperature.value,
                           top_k=top_k.value or None,
                           top_p=top_p.value if top_p.value < 1.0 else None,
                           generator=g)
        out.clear_output()
        with out:
            print(tokenizer.decode(ids[0].tolist()))

    button.on_click(run)
    run()
    return w.VBox([w.HBox([temperature, top_k]), w.HBox([top_p, seed, button]), out])


# --------------------------------------------------------------------------- Day 14 figure


class _AllocationRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Sums the bytes of every new tensor an operator creates, and keeps the largest one.

    Views (``view``, ``expand``, ``transpose``...) share their input's memory and are skipped.
    """

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.largest = 0

    @staticmethod
    def _storages(obj) -> set[int]:
        flat, _ = torch.utils._pytree.tree_flatten(obj)
        return {t.untyped_storage().data_ptr() for t in flat if isinstance(t, torch.Tensor)}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        inputs = self._storages((args, kwargs))
        out = func(*args, **kwargs)
        flat, _ = torch.utils._pytree.tree_flatten(out)
        for t in flat:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                size = t.untyped_storage().nbytes()
                self.total += size
                self.largest = max(self.largest, size)
        return out


@torch.no_grad()
def attention_memory(module: nn.Module, seq_lens: Sequence[int], d_model: int,
                     batch: int = 1) -> list[tuple[int, int, int]]:
    """Measure what one forward of ``module`` on (batch, N, d_model) inputs allocates.

    Every tensor created by an operator is counted (a dispatch mode sees each one), so the
    numbers are those of the actual computation, on any device. Returns (N, total bytes,
    largest single tensor in bytes) for each N.
    """
    rows = []
    for n in seq_lens:
        x = torch.randn(batch, n, d_model)
        rec = _AllocationRecorder()
        with rec:
            module(x)
        rows.append((n, rec.total, rec.largest))
    return rows


@not_drawn_while_grading
def plot_attention_memory(rows: Sequence[tuple[int, int, int]],
                          fused_rows: Sequence[tuple[int, int, int]] | None = None,
                          title: str | None = None):
    """Log-log plot of :func:`attention_memory` with an N² reference slope.

    ``rows`` is a plain attention (it stores the N x N scores); ``fused_rows`` optionally a
    fused kernel measured the same way.
    """
    import matplotlib.pyplot as plt

    n = torch.tensor([r[0] for r in rows], dtype=torch.float64)
    total = torch.tensor([r[1] for r in rows], dtype=torch.float64) / 2**20
    largest = torch.tensor([r[2] for r in rows], dtype=torch.float64) / 2**20
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.loglog(n.numpy(), total.numpy(), "o-", color="#440154", label="plain: all new tensors")
    ax.loglog(n.numpy(), largest.numpy(), "s-", color="#31688e", label="plain: largest tensor")
    if fused_rows is not None:
        fused = torch.tensor([r[1] for r in fused_rows], dtype=torch.float64) / 2**20
        ax.loglog(n.numpy(), fused.numpy(), "^-", color="#35b779",
                  label="fused SDPA: all new tensors")
    ax.loglog(n.numpy(), (total[-1] * (n / n[-1]) ** 2).numpy(), ":", color="grey",
              label="∝ N² (slope 2)")
    ax.set_xlabel("sequence length N (tokens)")
    ax.set_ylabel("memory allocated in one forward (MiB)")
    ax.set_title(title or "Attention memory against context length")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def saved_activation_bytes(model: nn.Module, idx: torch.Tensor) -> int:
    """Bytes of the tensors autograd keeps for the backward pass of one language-model loss.

    Runs ``cross_entropy(model(idx)[..., :-1], idx[..., 1:])`` with gradients on, counts each
    saved tensor's storage once, and leaves out the parameters (they are weights, not
    activations). ``model(idx)`` may return the logits or a tuple that starts with them.
    Nothing is trained: the graph is dropped without a backward pass.
    """
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(idx)
        logits = out[0] if isinstance(out, tuple) else out                  # (B, T, V)
        V = logits.size(-1)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V),
                                                 idx[:, 1:].reshape(-1))   # (B*(T-1), V)
    del loss
    return sum(seen.values())


@not_drawn_while_grading
def plot_finetune(fine: dict, fresh: dict):
    """Day 13: selection (solid) and training (dashed) losses of the fine-tuned and the
    from-scratch run, two ``train`` histories. Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    for history, name, color in ((fine, "fine-tuned from your model", "#21918c"),
                                 (fresh, "from scratch", "#440154")):
        ax.plot(history["step"], history["val_loss"], "o-", color=color, ms=3,
                label=f"{name} (selection quarter)")
        ax.plot(history["step"], history["train_loss"], "--", color=color, lw=1,
                label=f"{name} (fine-tuning half)")
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("loss (nats)")
    ax.set_title("Pretrain, then fine-tune: same data, same steps")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def __getattr__(name: str):
    # Day 12's stand-in, imported when first asked for: this module loads in every kernel,
    # and the kernel grading Day 12 holds no stand-in of Day 12 (course.standins).
    if name == "ReferenceTinyGPT":
        from course.standins import TinyGPT

        return TinyGPT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
