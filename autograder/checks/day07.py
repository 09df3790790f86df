"""Hidden tests of Day 7: the Transformer classifier.

The reference is assembled from PyTorch's own modules holding the weights the judge injected
into the learner's model and kept (``randomize``): ``F.embedding``, the sinusoidal formula in
float64, ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")`` per layer,
``F.layer_norm`` and ``F.linear``, by the contract's names (``layers.N.attn.W_Q``...
``layers.N.ffn.linear1``... ``norm``, ``head``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autograder.checks import (
    CheckFailure,
    call,
    compare,
    expect_module,
    expect_tensor,
    expect_unchanged,
    manual_seed,
    observed_check,
    randomize,
    rng,
    trusted,
    value_check,
)
from course.device import check_runs_on_any_device

SMALL = {"d_model": 16, "num_heads": 4, "d_ff": 24, "num_layers": 2, "max_len": 20}


def _model(cls, vocab: int, classes: int, seed: int, **kwargs) -> nn.Module:
    manual_seed(seed)
    model = expect_module(cls, vocab, classes, name="TransformerClassifier", **kwargs)
    for name, kind in (("embedding", nn.Embedding), ("cls_token", nn.Parameter),
                       ("layers", nn.ModuleList), ("norm", nn.Module), ("head", nn.Linear)):
        if not isinstance(getattr(model, name, None), kind):
            raise CheckFailure(f"TransformerClassifier.{name} should be a {kind.__name__}, got "
                               f"{type(getattr(model, name, None)).__name__} (contract: "
                               "embedding, cls_token, pos_encoding, layers, norm, head).")
    return model


def _sinusoid(n: int, d: int) -> torch.Tensor:
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    freq = torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos / freq)
    pe[:, 1::2] = torch.cos(pos / freq)
    return pe


def _torch_layers(w: dict, d: int, heads: int, d_ff: int) -> list[nn.Module]:
    """One nn.TransformerEncoderLayer per ``layers.N.`` of the judge's weights ``w``."""
    n_layers = len({k.split(".")[1] for k in w if k.startswith("layers.")})
    refs = []
    for i in range(n_layers):
        p = f"layers.{i}."
        torch_ref = nn.TransformerEncoderLayer(d, heads, d_ff, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True).double()
        sa = torch_ref.self_attn
        try:
            with torch.no_grad():
                sa.in_proj_weight.copy_(torch.cat([w[f"{p}attn.{n}.weight"]
                                                   for n in ("W_Q", "W_K", "W_V")]))
                sa.in_proj_bias.copy_(torch.cat([w[f"{p}attn.{n}.bias"]
                                                 for n in ("W_Q", "W_K", "W_V")]))
                sa.out_proj.weight.copy_(w[f"{p}attn.W_O.weight"])
                sa.out_proj.bias.copy_(w[f"{p}attn.W_O.bias"])
                for mine, theirs in (("ffn.linear1", torch_ref.linear1),
                                     ("ffn.linear2", torch_ref.linear2),
                                     ("norm1", torch_ref.norm1), ("norm2", torch_ref.norm2)):
                    theirs.weight.copy_(w[f"{p}{mine}.weight"])
                    theirs.bias.copy_(w[f"{p}{mine}.bias"])
        except KeyError as exc:
            raise CheckFailure(f"your model has no parameter {exc}: keep the contract's names "
                               "(layers.N.attn.W_Q..., layers.N.ffn.linear1..., "
                               "layers.N.norm1...)") from None
        refs.append(torch_ref.eval())
    return refs


def _reference(w, refs, tokens, keep, pe=True, cls_at="first", invert=False, norm=True):
    """Logits computed from PyTorch modules on the judge's weights ``w``; the keyword
    arguments make classic mistakes."""
    B = tokens.shape[0]
    d = w["cls_token"].shape[-1]
    with torch.no_grad():
        x = F.embedding(tokens, w["embedding.weight"])                        # (B, T, d)
        x = torch.cat([w["cls_token"].expand(B, 1, d), x], dim=1)              # (B, T+1, d)
        if pe:
            x = x + _sinusoid(x.shape[1], d)
        real = torch.cat([torch.ones(B, 1, dtype=torch.bool),
                          ~keep if invert else keep], dim=1)                  # (B, T+1)
        attn_mask = torch.zeros(B, 1, 1, x.shape[1], dtype=x.dtype)
        attn_mask = attn_mask.masked_fill(~real[:, None, None, :], float("-inf"))
        attn_mask = attn_mask.expand(B, refs[0].self_attn.num_heads, x.shape[1], x.shape[1])
        attn_mask = attn_mask.reshape(-1, x.shape[1], x.shape[1])          # (B*H, T+1, T+1)
        for layer in refs:
            x = layer(x, src_mask=attn_mask)
        if norm:
            x = F.layer_norm(x, (d,), w["norm.weight"], w["norm.bias"], 1e-5)
        pooled = x[:, 0] if cls_at == "first" else x[:, -1] if cls_at == "last" else x.mean(1)
        return F.linear(pooled, w["head.weight"], w["head.bias"])


@observed_check
def check_structure(TransformerClassifier) -> None:
    """Contract names and sizes; 410,115 parameters for (vocab 100, 3 classes, defaults)."""
    model = _model(TransformerClassifier, 100, 3, seed=70)
    if tuple(model.embedding.weight.shape) != (100, 128):
        raise CheckFailure("self.embedding should be nn.Embedding(vocab_size, d_model) = "
                           f"(100, 128), got {tuple(model.embedding.weight.shape)}.")
    expect_tensor(model.cls_token, "self.cls_token", shape=(1, 1, 128))
    if len(model.layers) != 2:
        raise CheckFailure(f"self.layers should hold num_layers=2 encoder layers, got "
                           f"{len(model.layers)}.")
    if (model.head.in_features, model.head.out_features) != (128, 3):
        raise CheckFailure(f"self.head should be nn.Linear(d_model, num_classes) = (128, 3), got "
                           f"{model.head}.")
    n = sum(p.numel() for p in model.parameters())
    if n != 410_115:
        raise CheckFailure(
            f"TransformerClassifier(100, 3) has {n:,} parameters, expected 410,115 = 12,800 "
            "embedding + 128 CLS + 2 x 198,272 layers + 256 final LayerNorm + 387 head. "
            "(Positional encoding is a buffer and adds none.)")


@observed_check
def check_logits_shape(TransformerClassifier) -> None:
    """Logits (batch, num_classes) float32 for batches of 3 and 1, with and without a mask."""
    model = _model(TransformerClassifier, 12, 5, seed=71, **SMALL).eval()
    tokens = torch.randint(0, 12, (3, 9), generator=rng(72))
    out = call(model, tokens, name="TransformerClassifier(tokens)")
    expect_tensor(out, "logits for tokens (3, 9)", shape=(3, 5), dtype=torch.float32)
    keep = torch.ones(1, 4, dtype=torch.bool)
    keep[0, 3] = False
    out = call(model, tokens[:1, :4], keep, name="TransformerClassifier(tokens, padding_mask)")
    expect_tensor(out, "logits for tokens (1, 4) with a padding mask", shape=(1, 5),
                  dtype=torch.float32)


@value_check
def check_matches_reference(TransformerClassifier) -> None:
    """Equal to the same model assembled from PyTorch modules (float64), with padding."""
    model = _model(TransformerClassifier, 11, 3, seed=73, **SMALL).double().eval()
    w = randomize(model, 74)
    refs = _torch_layers(w, 16, 4, 24)
    tokens = torch.randint(1, 11, (3, 7), generator=rng(75))
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[1, 5:] = False
    keep[2, 3:] = False
    tokens = tokens.masked_fill(~keep, 0)
    out = call(model, tokens, keep, name="TransformerClassifier(tokens, padding_mask)")
    if isinstance(out, torch.Tensor) and out.is_floating_point() and torch.isnan(out).any():
        raise CheckFailure(
            "logits contain NaN: some query could attend to no key at all. Is your padding "
            "mask inverted? padding_mask is True for real tokens, and the CLS position must "
            "always be allowed (prepend True for it).")
    expected = _reference(w, refs, tokens, keep)
    mistakes = {
        "the CLS output is read from the last position; the CLS token is prepended, so read "
        "position 0: x[:, 0]": _reference(w, refs, tokens, keep, cls_at="last"),
        "you averaged over all positions; classify from the CLS output at position 0":
            _reference(w, refs, tokens, keep, cls_at="mean"),
        "your padding mask is inverted: padding_mask is True for real tokens, so those are the "
        "keys attention may use": _reference(w, refs, tokens, keep, invert=True),
        "the positional encoding is missing: add it after prepending the CLS token":
            _reference(w, refs, tokens, keep, pe=False),
        "the final LayerNorm is missing: apply self.norm before the head (Pre-LN models end "
        "with one)": _reference(w, refs, tokens, keep, norm=False),
    }
    compare(out, expected, "logits", mistakes, rtol=1e-6, atol=1e-8)
    expect_unchanged(model, w)


@observed_check
def check_padding_invariance(TransformerClassifier) -> None:
    """Appending padding tokens (mask False) leaves the logits unchanged (float64).

    An invariant of the learner's own outputs (a constant model has it too): observed, paid
    when ``check_matches_reference`` passes."""
    model = _model(TransformerClassifier, 9, 4, seed=76, **SMALL).double().eval()
    randomize(model, 77)
    tokens = torch.randint(1, 9, (2, 6), generator=rng(78))
    plain = call(model, tokens, name="TransformerClassifier(tokens)")
    expect_tensor(plain, "logits without padding", shape=(2, 4))
    pad = torch.randint(0, 9, (2, 5), generator=rng(79))       # padding ids need not be 0
    padded = torch.cat([tokens, pad], dim=1)                    # (2, 11)
    keep = torch.cat([torch.ones(2, 6, dtype=torch.bool), torch.zeros(2, 5, dtype=torch.bool)],
                     dim=1)
    out = call(model, padded, keep, name="TransformerClassifier(tokens, padding_mask)")
    compare(out, trusted(plain), "logits after appending 5 padding tokens",
            hint="padding changed the prediction. Check that (1) the CLS output is read at "
                 "position 0, not the last position, (2) padding_mask (True = real token) "
                 "reaches every layer's attention with True prepended for CLS, and (3) the "
                 "mask is not inverted.", rtol=1e-6, atol=1e-8)


@observed_check
def check_device(TransformerClassifier) -> None:
    """Runs on another device (GPU, or PyTorch's meta device) with a padding mask."""
    model = _model(TransformerClassifier, 10, 2, seed=80, **SMALL)

    def inputs():
        keep = torch.ones(2, 6, dtype=torch.bool)
        keep[1, 4:] = False
        return torch.randint(0, 10, (2, 6), generator=rng(81)), keep

    check_runs_on_any_device(model, inputs, "TransformerClassifier")
