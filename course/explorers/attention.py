"""The attention explorer (Days 3, 4, 7, 11, 12): :func:`attention_explorer`.

A sentence, a text or a digit goes through *your* model; sliders pick the layer and the head;
the figure is the attention heatmap and the caption lists, for every token, the tokens it attends
to most. The weights are found by :func:`course.explorers.capture.capture_attention`.
"""

from __future__ import annotations

import html
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn as nn

from course.explorers.capture import capture_attention
from course.explorers.handle import Explorer, interactive_frontend
from course.explorers.shared import _caption, _encode, _fmt_token, _infer_d_model, _new_figure
from course.profile import not_drawn_while_grading

__all__ = ["attention_explorer", "word_vectors"]


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
