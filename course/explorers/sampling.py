"""The sampling explorer (Day 13): :func:`sampling_explorer`.

Sliders for temperature, top-k and top-p around *your* ``generate`` and a trained TinyGPT: the
next-token distribution as bars and a fresh sample.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from course.explorers.handle import Explorer, interactive_frontend
from course.explorers.shared import _caption, _encode, _eval_mode, _fmt_token, _new_figure
from course.profile import not_drawn_while_grading

__all__ = ["sampling_explorer"]


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
