"""Interactive explorers that run the learner's own code (ipywidgets 8 + matplotlib).

Four explorers, each one line in a notebook:

- :func:`attention_explorer` — a sentence, a text or a digit goes through *your* model; sliders
  pick the layer and the head; you see the attention heatmap and, for every token, the tokens it
  attends to most (Days 3, 4, 7, 11, 12).
- :func:`scaling_explorer` — a slider for d_k shows how unscaled dot products saturate *your*
  softmax, and how dividing by sqrt(d_k) prevents it (Day 2).
- :func:`positional_encoding_explorer` — the PE heatmap, one dimension's wave and how similar a
  chosen position is to all others, for *your* positional encoding (Day 5).
- :func:`sampling_explorer` — sliders for temperature, top-k and top-p around *your*
  ``generate`` and a trained TinyGPT: the next-token distribution as bars and a fresh sample
  (Day 13).

Every explorer shows itself when it is created and returns an :class:`Explorer` handle
(``explorer.update(head=2)`` moves a slider from code). Each update takes well under a second on
a CPU: models run once per new input, slider moves only redraw.

Without a widget front end — in CI (``CI``), outside Jupyter, or with ``COURSE_WIDGETS=static`` —
an explorer draws one static matplotlib figure with its default settings instead.
``COURSE_WIDGETS=interactive`` forces the widgets. While nbgrader executes the notebook
(``NBGRADER_EXECUTION``) an explorer draws nothing and returns None
(:func:`course.profile.not_drawn_while_grading`).

Figures follow the course's habits: a title, axis labels with units, viridis/cividis colours.
This module holds no exercise answers: it only calls the functions and modules it is given.
"""

from __future__ import annotations

import contextlib
import html
import io
import math
import os
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

from course.profile import not_drawn_while_grading

__all__ = [
    "Explorer",
    "attention_explorer",
    "capture_attention",
    "interactive_frontend",
    "positional_encoding_explorer",
    "sampling_explorer",
    "scaling_explorer",
]

PURPLE, TEAL, YELLOW, BLUE = "#440154", "#21918c", "#fde725", "#3b528b"


# --------------------------------------------------------------------------- front end


def interactive_frontend() -> bool:
    """True when widgets can be shown: a Jupyter kernel, not nbgrader, not CI.

    ``COURSE_WIDGETS=static`` or ``=interactive`` overrides the guess.
    """
    forced = os.environ.get("COURSE_WIDGETS", "").strip().lower()
    if forced in ("static", "0", "off", "no"):
        return False
    if os.environ.get("NBGRADER_EXECUTION"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - both are course dependencies
        return False
    if forced in ("interactive", "1", "on", "yes"):
        return True
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _execution_count() -> int | None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return None
    shell = get_ipython()
    return getattr(shell, "execution_count", None) if shell is not None else None


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    return get_ipython() is not None


def _new_figure(static: bool, figsize: tuple[float, float]):
    """A pyplot figure in static mode (the inline backend shows it at the end of the cell),
    a detached Figure for widgets (rendered to PNG bytes, never shown twice)."""
    if static:
        import matplotlib.pyplot as plt

        return plt.figure(figsize=figsize, layout="constrained")
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def _png(fig, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


class Explorer:
    """A handle on one explorer: its current values, its last figure and its widgets.

    Args:
        name: shown in the repr.
        draw: ``draw(values, static) -> (figure, caption_html)``.
        values: the starting value of every control.
        controls: ipywidgets control per value name (those without one stay fixed).
        interactive: show widgets (True) or one static figure (False); default: guessed by
            :func:`interactive_frontend`.
        on_change: optional ``on_change(name, values)`` called before a redraw (to recompute
            cached model outputs when an input changes).
        extra: more widgets to show above the figure (buttons, text boxes).

    Attributes:
        values: dict of the current settings.
        figure: the last matplotlib Figure drawn.
        caption: the last caption (HTML): what the figure shows, in words.
        seconds: how long the last update took (model runs and drawing), in seconds.
        widget: the ipywidgets box, or None in static mode.
    """

    def __init__(self, name: str, draw: Callable[[dict, bool], tuple[Any, str]],
                 values: dict, controls: dict | None = None, interactive: bool | None = None,
                 on_change: Callable[[str, dict], None] | None = None,
                 extra: Sequence = ()) -> None:
        self.name = name
        self._draw = draw
        self._on_change = on_change
        self.values = dict(values)
        self.interactive = interactive_frontend() if interactive is None else interactive
        self.controls = dict(controls or {}) if self.interactive else {}
        self.figure = None
        self.caption = ""
        self.seconds = 0.0
        self.widget = None
        self._image = self._html = None
        self._busy = False
        self._shown_at = None
        self._layouts: dict = {}
        if self.interactive:
            import ipywidgets as w

            self._image = w.Image(format="png", layout=w.Layout(
                max_width="100%", width="auto", height="auto", align_self="flex-start"))
            self._html = w.HTML()
            for key, control in self.controls.items():
                control.observe(self._observer(key), names="value")
            rows = list(self.controls.values()) + list(extra)
            self.widget = w.VBox([w.HBox(rows[i:i + 3]) for i in range(0, len(rows), 3)]
                                 + [self._image, self._html])
            self.widget.add_class("course-explorer")
        self.redraw()
        self._show()

    # -- drawing
    def _observer(self, key: str):
        def handler(change) -> None:
            if self._busy:
                return
            self.values[key] = change["new"]
            if self._on_change is not None:
                self._on_change(key, self.values)
            self.redraw()
        return handler

    def redraw(self):
        """Draw the figure for the current values; return it."""
        t0 = time.perf_counter()
        fig, caption = self._draw(self.values, not self.interactive)
        self.figure, self.caption = fig, caption
        if self.interactive:
            # The layout engine costs more than the drawing: run it on the first figure of
            # each shape, then reuse its axes positions (the panels also stop jumping around).
            longest = max((len(t.get_text()) for ax in fig.axes
                           for t in (*ax.get_xticklabels(), *ax.get_yticklabels())), default=0)
            key = (tuple(round(float(v), 2) for v in fig.get_size_inches()), len(fig.axes),
                   longest)
            cached = self._layouts.get(key)
            if cached is not None:
                fig.set_layout_engine("none")
                for ax, pos in zip(fig.axes, cached, strict=True):
                    ax.set_position(pos)
            self._image.value = _png(fig)
            if cached is None:
                self._layouts[key] = [ax.get_position() for ax in fig.axes]
            self._html.value = caption
        self.seconds = time.perf_counter() - t0
        return fig

    def update(self, **changes):
        """Set some values (moving the sliders when they exist), redraw once, return the figure.

        Raises:
            KeyError: for a name that is not one of :attr:`values`.
        """
        for key in changes:
            if key not in self.values:
                raise KeyError(f"{self.name} has no setting {key!r}; it has "
                               f"{', '.join(self.values)}")
        t0 = time.perf_counter()
        self._busy = True
        try:
            for key, value in changes.items():
                if key in self.controls:
                    self.controls[key].value = value
                    value = self.controls[key].value     # the slider may round or clip
                self.values[key] = value
                if self._on_change is not None:
                    self._on_change(key, self.values)
        finally:
            self._busy = False
        fig = self.redraw()
        self.seconds = time.perf_counter() - t0
        return fig

    # -- display
    def _show(self) -> None:
        if not _in_ipython():
            return
        self._shown_at = _execution_count()
        if self.interactive:
            from IPython.display import display

            display(self.widget)
        elif self.caption:
            from IPython.display import HTML, display

            display(HTML(self.caption))

    def _ipython_display_(self) -> None:
        # The explorer already showed itself in the cell that created it; show it again only
        # when the handle is displayed from a later cell.
        if self._shown_at is not None and self._shown_at == _execution_count():
            return
        self._show()

    def __repr__(self) -> str:
        mode = "widgets" if self.interactive else "static figure"
        vals = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        return f"<{self.name} ({mode}): {vals}>"


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


# --------------------------------------------------------------------------- attention capture


class _AttentionRecorder(TorchDispatchMode):
    """Sees every tensor operation (below autograd, whatever Python wrapper called it) and
    records attention weights: each softmax over the last dimension of a >= 3-D tensor, and
    the weights of each fused scaled-dot-product-attention kernel (which never returns them).
    """

    SOFTMAX = ("aten._softmax.", "aten._safe_softmax.", "aten.softmax.")
    FUSED = ("aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient",
             "aten._scaled_dot_product_cudnn", "aten._scaled_dot_product_fused")

    def __init__(self) -> None:
        super().__init__()
        self.maps: list[torch.Tensor] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func)
        if name.startswith(self.SOFTMAX):
            dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
            if isinstance(out, torch.Tensor) and out.dim() >= 3 and dim in (-1, out.dim() - 1):
                self.maps.append(out.detach().clone())
        elif name.startswith(self.FUSED):
            named = dict(zip((a.name for a in func._schema.arguments), args, strict=False))
            named.update(kwargs)
            self.maps.append(_sdpa_weights(
                named["query"], named["key"],
                attn_mask=named.get("attn_mask", named.get("attn_bias")),
                is_causal=bool(named.get("is_causal", False)), scale=named.get("scale")))
        return out


def _sdpa_weights(query, key, attn_mask=None, is_causal=False, scale=None) -> torch.Tensor:
    """The weights F.scaled_dot_product_attention uses (it never returns them)."""
    q, k = query.detach().float(), key.detach().float()
    if q.dim() == k.dim() and q.dim() >= 3 and q.size(-3) != k.size(-3):   # grouped queries
        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
    s = scale if scale is not None else 1.0 / math.sqrt(q.size(-1))
    scores = q @ k.transpose(-2, -1) * s                                # (..., Tq, Tk)
    tq, tk = scores.shape[-2:]
    if is_causal:
        keep = torch.ones(tq, tk, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        m = attn_mask.detach()
        scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool \
            else scores + m.float()
    return torch.softmax(scores, dim=-1)


def _detach(output: Any) -> Any:
    return output.detach() if isinstance(output, torch.Tensor) else output


def _as_heads(t: torch.Tensor) -> torch.Tensor:
    """One example's weights as (heads, seq_q, seq_k) on the CPU, float32."""
    t = t.detach().float().cpu()
    if t.dim() == 2:
        return t.unsqueeze(0)
    if t.dim() == 3:          # (batch=1, T, S), or (batch*heads, T, S) from nn.MultiheadAttention
        return t
    return t.reshape(-1, *t.shape[-3:])[0]     # (B, H, T, S) -> first example's heads


def capture_attention(model: Callable, *args, **kwargs
                      ) -> tuple[Any, list[tuple[str, torch.Tensor]]]:
    """Run ``model(*args, **kwargs)`` once and return ``(output, maps)``.

    ``maps`` is a list of ``(name, weights)`` in the order the layers ran, each ``weights`` a
    (heads, seq_q, seq_k) CPU tensor for the first example of the batch. They come from:

    1. the ``attn_weights`` attribute that the course's modules store (Days 3 and 4), read
       after every submodule's forward; otherwise
    2. every softmax over the last dimension of a 3-D or 4-D tensor, and every
       ``F.scaled_dot_product_attention`` call (its weights are recomputed from q, k and the
       mask), which covers ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer``.

    Gradients are enabled during the call so that PyTorch's fused inference paths (which skip
    the Python code) are not taken; nothing is trained.
    """
    hooks, seen, from_attr = [], set(), []
    modules = list(model.named_modules()) if isinstance(model, nn.Module) else []

    def hook(name):
        def record(module, inputs, output) -> None:
            w = getattr(module, "attn_weights", None)
            if isinstance(w, torch.Tensor) and w.dim() >= 2:
                key = (w.data_ptr(), tuple(w.shape))
                if key not in seen:
                    seen.add(key)
                    from_attr.append((name or type(module).__name__, _as_heads(w)))
        return record

    for name, module in modules:
        hooks.append(module.register_forward_hook(hook(name)))
    recorder = _AttentionRecorder()
    try:
        with _eval_mode(model), torch.enable_grad(), recorder:
            output = model(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    if from_attr:     # the module stores its weights: trust them, ignore the softmax calls
        return _detach(output), from_attr
    output = _detach(output)
    maps = [_as_heads(m) for m in recorder.maps]
    if maps:   # drop stray softmaxes (over a vocabulary, say): keep the common key length
        lengths = [m.shape[-1] for m in maps]
        common = max(set(lengths), key=lengths.count)
        maps = [m for m in maps if m.shape[-1] == common]
    return output, [(f"attention call {i}", m) for i, m in enumerate(maps)]


# --------------------------------------------------------------------------- attention explorer


def _infer_d_model(model: Any) -> int:
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


def _device_of(model: Any) -> torch.device:
    if isinstance(model, nn.Module):
        for p in model.parameters():
            return p.device
        for b in model.buffers():
            return b.device
    return torch.device("cpu")


def word_vectors(words: Sequence[str], d_model: int) -> torch.Tensor:
    """A fixed random vector per word (seeded by the word itself): (1, len(words), d_model).

    The same word always gets the same vector, so "the ... the" gives two identical keys.
    """
    rows = [torch.randn(d_model, generator=torch.Generator().manual_seed(zlib.crc32(w.encode())))
            for w in words]
    return torch.stack(rows).unsqueeze(0)                               # (1, T, d_model)


@not_drawn_while_grading
def attention_explorer(model: Callable, inputs: str | torch.Tensor,
                       labels: Sequence[str] | None = None, *, tokenizer: Any = None,
                       embed: Callable | None = None, mask: Any = None,
                       d_model: int | None = None, classes: Sequence[str] | None = None,
                       title: str | None = None, top: int = 2,
                       interactive: bool | None = None) -> Explorer:
    """Look inside your attention: heatmap per layer and head, and what each token attends to.

    Args:
        model: your module (or any callable) — ``SelfAttention``, ``MultiHeadSelfAttention``,
            a classifier, a TinyGPT. Its weights are found as described in
            :func:`capture_attention`. It runs on one example at a time, in eval mode.
        inputs: a sentence (``str``; a text box lets you type another one) or a tensor whose
            first dimension lists examples (token ids, embeddings or images, e.g. MNIST digits
            (N, 28, 28)); a slider picks the example.
        labels: one label per position, or a function of the example's (1, T) input giving
            them (default: the words or characters of the sentence, else position numbers).
        tokenizer: for text models: an object with ``encode(str) -> list[int]`` and
            ``decode(list[int]) -> str`` (the model gets a (1, T) tensor of ids).
        embed: turns the input into what the model takes: ``embed(ids)`` with a tokenizer, or
            ``embed(words) -> (1, T, d_model)`` for a sentence without one. Default for a
            sentence without tokenizer: :func:`word_vectors` (a fixed random vector per word).
        mask: passed as the model's second argument: a tensor (one row per example when its
            first dimension matches ``inputs``'), ``"causal"`` (a (T, T) lower triangle of True),
            or a function of T.
        d_model: width for :func:`word_vectors` when the model does not say.
        classes: class names for a classifier's output (caption: the predicted class).
        title: figure title prefix.
        top: how many most-attended tokens to list per token.
        interactive: force widgets (True) or a static figure (False).

    Returns:
        The :class:`Explorer` (values: ``text`` or ``example``, ``layer``, ``head``).
    """
    is_text = isinstance(inputs, str)
    n_examples = 1 if is_text else int(inputs.shape[0])

    def prepare(values: dict):
        if is_text:
            text = values["text"]
            if tokenizer is not None:
                ids = _encode(tokenizer, text) or [0]
                toks = [_fmt_token(tokenizer.decode([i])) for i in ids]
                x = torch.tensor([ids], dtype=torch.long)
                if embed is not None:
                    x = embed(x)
            else:
                toks = text.split() or ["∅"]
                x = embed(toks) if embed is not None else word_vectors(
                    toks, d_model or _infer_d_model(model))
            image = None
        else:
            i = values["example"]
            x = inputs[i:i + 1]
            toks = list(labels(x)) if callable(labels) else None
            one = inputs[i]
            square = one.shape[-1] == one.shape[-2] if one.dim() >= 2 else False
            image = one if one.is_floating_point() and square and (
                one.dim() == 2 or (one.dim() == 3 and one.shape[0] in (1, 3))) else None
            if embed is not None:
                x = embed(x)
        device = _device_of(model)
        x = x.to(device)
        args = [x]
        if mask is not None:
            t = x.shape[1]
            if isinstance(mask, torch.Tensor) and not is_text and n_examples > 1 \
                    and mask.shape[0] == n_examples:
                args.append(mask[values["example"]:values["example"] + 1])   # one per example
            elif isinstance(mask, str) and mask == "causal":
                args.append(torch.ones(t, t, dtype=torch.bool).tril())
            elif callable(mask):
                args.append(mask(t))
            else:
                args.append(mask)
        args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
        output, maps = capture_attention(model, *args)
        if not maps:
            raise ValueError(
                "no attention weights found: store them in self.attn_weights in your attention "
                "module's forward, or compute them with torch.softmax")
        return output, maps, toks, image

    state: dict = {}

    def on_change(key: str, values: dict) -> None:
        if key in ("text", "example") or not state:
            state["output"], state["maps"], state["toks"], state["image"] = prepare(values)
            if "layer" in controls:
                controls["layer"].max = len(state["maps"]) - 1
            values["layer"] = min(values["layer"], len(state["maps"]) - 1)
        heads = state["maps"][values["layer"]][1].shape[0]
        if "head" in controls:
            controls["head"].max = heads - 1
        values["head"] = min(values["head"], heads - 1)

    values: dict = {"text": inputs} if is_text else {"example": 0}
    values.update(layer=0, head=0)
    controls: dict = {}
    use_widgets = interactive_frontend() if interactive is None else interactive
    state_values = dict(values)
    state["output"], state["maps"], state["toks"], state["image"] = prepare(state_values)
    n_layers = len(state["maps"])
    n_heads = state["maps"][0][1].shape[0]
    if use_widgets:
        import ipywidgets as w

        style = {"description_width": "initial"}
        if is_text:
            controls["text"] = w.Text(value=inputs, description="input text",
                                      continuous_update=False, style=style,
                                      layout=w.Layout(width="34em"))
        elif n_examples > 1:
            controls["example"] = w.IntSlider(0, 0, n_examples - 1, description="example",
                                              continuous_update=False, style=style)
        controls["layer"] = w.IntSlider(0, 0, max(n_layers - 1, 0), description="layer",
                                        continuous_update=False, style=style,
                                        disabled=n_layers == 1)
        controls["head"] = w.IntSlider(0, 0, max(n_heads - 1, 0), description="head",
                                       continuous_update=False, style=style,
                                       disabled=n_heads == 1)

    def draw(values: dict, static: bool):
        maps, toks, image = state["maps"], state["toks"], state["image"]
        name, heads = maps[values["layer"]]
        weights = heads[values["head"]]                                  # (Tq, Tk)
        tq, tk = weights.shape
        if labels is not None and not callable(labels) and len(labels) >= max(tq, tk):
            q_labels, k_labels = list(labels)[:tq], list(labels)[:tk]
        elif toks is not None and len(toks) == tq == tk:
            q_labels = k_labels = toks
        else:
            q_labels, k_labels = [str(i) for i in range(tq)], [str(j) for j in range(tk)]
        side = min(7.0, 2.8 + 0.2 * max(tq, tk))
        width = side + 0.8 + (3.2 if image is not None else 0.0)
        fig = _new_figure(static, (width, side))
        if image is not None:
            ax_img, ax = fig.subplots(1, 2, width_ratios=[3.2, side])
            img = image.detach().float().cpu()
            if img.dim() == 3:
                img = img.permute(1, 2, 0) if img.shape[0] == 3 else img[0]
            img = (img - img.min()) / (img.max() - img.min()).clamp_min(1e-12)   # to [0, 1]
            ax_img.imshow(img.numpy(), cmap="cividis" if img.dim() == 2 else None)
            ax_img.set_title(f"input example {values['example']}")
            ax_img.set_xlabel("column (pixels)")
            ax_img.set_ylabel("row (pixels)")
        else:
            ax = fig.subplots()
        im = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0,
                       vmax=max(float(weights.max()), 1e-6), aspect="auto")
        best = weights.argmax(-1)
        ax.scatter(best.numpy(), range(tq), marker="o", s=14, facecolors="none",
                   edgecolors="white", linewidths=0.8, label="most attended key")
        fs = 8 if max(tq, tk) <= 24 else 6
        step = 1 if max(tq, tk) <= 40 else 2
        ax.set_xticks(range(0, tk, step), k_labels[::step], rotation=90, fontsize=fs)
        ax.set_yticks(range(0, tq, step), q_labels[::step], fontsize=fs)
        ax.set_xlabel("key position (token attended to)")
        ax.set_ylabel("query position (token attending)")
        head_txt = f"head {values['head']} (heads 0–{heads.shape[0] - 1})"
        ax.set_title(f"{title + ': ' if title else ''}layer {values['layer']} (layers "
                     f"0–{len(maps) - 1}), {head_txt}", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.046, label="attention weight (0 to 1)")
        # Caption: who attends to whom, in words (also what a screen reader gets).
        k = min(top, tk)
        vals, idx = weights.topk(k, dim=-1)
        rows = []
        for i in range(tq):
            pairs = ", ".join(f"{html.escape(k_labels[int(j)])} ({float(v):.2f})"
                              for v, j in zip(vals[i], idx[i], strict=True) if v > 0) or "—"
            rows.append(f"<b>{html.escape(q_labels[i])}</b> → {pairs}")
        pred = ""
        out = state["output"]
        if isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[0] == 1:
            p = torch.softmax(out[0].float(), -1)
            c = int(p.argmax())
            cname = classes[c] if classes is not None and c < len(classes) else str(c)
            pred = f"<p>model prediction: <b>{html.escape(cname)}</b> (p = {float(p[c]):.2f})</p>"
        caption = _caption(
            f"<p>Layer {values['layer']} ({html.escape(name)}), {head_txt}. Rows sum to 1. "
            f"Each token, then the {k} tokens it attends to most:</p>",
            pred,
            "<div style='columns: 3; font-family: monospace; font-size: 0.85em'>"
            + "<br>".join(rows) + "</div>")
        return fig, caption

    explorer = Explorer("attention explorer", draw, values, controls, interactive=use_widgets,
                        on_change=on_change)
    return explorer


# --------------------------------------------------------------------------- scaling explorer


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


# --------------------------------------------------------------------------- positional encoding


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


# --------------------------------------------------------------------------- sampling explorer


class _FixedLogits(nn.Module):
    """A 'model' whose next-token logits are always the same (to sample one step many times)."""

    def __init__(self, logits: torch.Tensor, n_ctx: int) -> None:
        super().__init__()
        self.register_buffer("logits", logits.detach().float().reshape(-1))
        self.n_ctx = n_ctx
        self.head = nn.Linear(1, self.logits.numel(), bias=False)   # for vocab-size lookups

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, n = idx.shape
        return self.logits.expand(b, n, -1).clone()                       # (B, N, V)


def _call_generate(generate: Callable, model, idx, max_new_tokens, settings, seed):
    g = torch.Generator(device=idx.device).manual_seed(seed)
    try:
        return generate(model, idx, max_new_tokens, generator=g, **settings)
    except TypeError as exc:
        if "generator" not in str(exc):
            raise
        torch.manual_seed(seed)
        return generate(model, idx, max_new_tokens, **settings)


@not_drawn_while_grading
def sampling_explorer(model: nn.Module, tokenizer: Any, generate: Callable[..., torch.Tensor],
                      prompt: str = "ROMEO:", max_new_tokens: int = 60, draws: int = 2000,
                      shown: int = 20, temperature: float = 1.0, top_k: int = 0,
                      top_p: float = 1.0, seed: int = 0,
                      interactive: bool | None = None) -> Explorer:
    """Sliders for temperature, top-k and top-p around *your* ``generate`` and a trained model.

    Bars: how often your ``generate`` picks each of the ``shown`` likeliest next tokens after
    the prompt, over ``draws`` one-token draws from the model's real next-token logits; black
    ticks: the model's plain probabilities (temperature 1, no filter). Below: a fresh sample of
    ``max_new_tokens`` tokens with the same settings and seed.

    Args:
        model: a trained TinyGPT (``model(idx) -> logits (B, N, V)``).
        tokenizer: ``encode(str) -> list[int]``, ``decode(list[int]) -> str``.
        generate: your ``generate(model, idx, max_new_tokens, temperature=, top_k=, top_p=,
            generator=)`` (``top_k=None`` and ``top_p=None`` mean "off"; without a
            ``generator`` argument, ``torch.manual_seed`` is used).

    Returns:
        The :class:`Explorer` (values: ``temperature``, ``top_k``, ``top_p``, ``seed``,
        ``prompt``).
    """
    n_ctx = int(getattr(model, "n_ctx", 10**9))
    device = next(model.parameters()).device if isinstance(model, nn.Module) and \
        any(True for _ in model.parameters()) else torch.device("cpu")
    cache: dict = {}

    def next_logits(prompt_text: str) -> torch.Tensor:
        if prompt_text not in cache:
            ids = _encode(tokenizer, prompt_text) or [0]
            idx = torch.tensor([ids[-n_ctx:]], dtype=torch.long, device=device)
            with _eval_mode(model), torch.no_grad():
                cache.clear()
                cache[prompt_text] = model(idx)[0, -1].float().cpu()        # (V,)
        return cache[prompt_text]

    def settings(values: dict) -> dict:
        return {"temperature": float(values["temperature"]),
                "top_k": int(values["top_k"]) or None,
                "top_p": float(values["top_p"]) if values["top_p"] < 1.0 else None}

    def draw(values: dict, static: bool):
        logits = next_logits(values["prompt"])
        vocab = logits.numel()
        kw = settings(values)
        fixed = _FixedLogits(logits, n_ctx=8)
        with torch.no_grad():
            out = _call_generate(generate, fixed, torch.zeros(draws, 1, dtype=torch.long),
                                 1, kw, int(values["seed"]))
        freq = torch.bincount(out[:, -1].cpu(), minlength=vocab).double() / draws
        probs = torch.softmax(logits.double(), -1)
        order = probs.argsort(descending=True)[:shown]
        names = [_fmt_token(tokenizer.decode([int(t)])) for t in order]
        fig = _new_figure(static, (10.0, 3.6))
        ax = fig.subplots()
        import matplotlib

        colors = matplotlib.colormaps["viridis"](0.15 + 0.7 * probs[order].numpy() /
                                                 float(probs[order].max()))
        xs = range(len(order))
        ax.bar(xs, freq[order].numpy(), color=colors, label=f"your generate ({draws} draws)")
        ax.scatter(xs, probs[order].numpy(), marker="_", s=220, color="black", linewidths=2,
                   label="model probability (T = 1, no filter)")
        ax.set_xticks(list(xs), names, fontsize=9)
        ax.set_xlabel(f"next token (the {len(order)} likeliest after the prompt)")
        ax.set_ylabel("probability / frequency (0 to 1)")
        ax.set_ylim(0, max(1e-3, float(max(freq[order].max(), probs[order].max()))) * 1.15)
        desc = ", ".join(f"{k}={v}" for k, v in kw.items())
        ax.set_title(f"Next token after {values['prompt'][-30:]!r}: {desc}", fontsize=10)
        ax.legend(fontsize=8, loc="upper right")
        ids = _encode(tokenizer, values["prompt"]) or [0]
        idx = torch.tensor([ids], dtype=torch.long, device=device)
        with _eval_mode(model), torch.no_grad():
            sample = _call_generate(generate, model, idx, max_new_tokens, kw, int(values["seed"]))
        text = tokenizer.decode(sample[0].tolist())
        outside = max(0.0, float(freq.sum() - freq[order].sum()))
        entropy = float(-(freq[freq > 0] * freq[freq > 0].log()).sum())
        caption = _caption(
            f"<p>{desc}: {int((freq > 0).sum())} different tokens drawn, {outside:.0%} of the "
            f"draws outside the {len(order)} shown; entropy of the draws {entropy:.2f} nats "
            f"(uniform over {vocab}: {math.log(vocab):.2f}).</p>",
            "<pre style='white-space: pre-wrap; border: 1px solid #ccc; padding: 4px'>"
            + html.escape(text) + "</pre>")
        return fig, caption

    values = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
              "prompt": prompt}
    use_widgets = interactive_frontend() if interactive is None else interactive
    controls: dict = {}
    if use_widgets:
        import ipywidgets as w

        vocab = next_logits(prompt).numel()
        style = {"description_width": "initial"}
        controls["temperature"] = w.FloatLogSlider(temperature, base=10, min=-1, max=math.log10(5),
                                                   step=0.05, description="temperature",
                                                   continuous_update=False, style=style)
        controls["top_k"] = w.IntSlider(top_k, 0, vocab, description="top-k (0 = off)",
                                        continuous_update=False, style=style)
        controls["top_p"] = w.FloatSlider(top_p, min=0.05, max=1.0, step=0.05,
                                          description="top-p (1 = off)",
                                          continuous_update=False, style=style)
        controls["seed"] = w.IntText(seed, description="seed", style=style,
                                     layout=w.Layout(width="10em"))
        controls["prompt"] = w.Text(prompt, description="prompt", continuous_update=False,
                                    style=style)
    extra = []
    if use_widgets:
        new = w.Button(description="new sample", tooltip="draw again with the next seed",
                       icon="refresh")
        new.on_click(lambda _: controls["seed"].set_trait("value", controls["seed"].value + 1))
        extra.append(new)
    return Explorer("sampling explorer", draw, values, controls, interactive=use_widgets,
                    extra=extra)
