"""The attention capture: run a model once and collect its attention weights, however it
computes them (:func:`capture_attention`).

The weights come from the ``attn_weights`` attribute that the course's modules store, else from
every softmax over the last dimension and every fused scaled-dot-product-attention kernel, seen
below autograd by a ``TorchDispatchMode``. The attention explorer and :mod:`course.heads` use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

from course.explorers.shared import _eval_mode

__all__ = ["capture_attention"]


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
