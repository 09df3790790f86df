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

from autograder.judge.checks import (
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
from autograder.judge.checks import reference as ref
from course.checking import in_kernel
from course.device import check_runs_on_any_device
from course.standins import TransformerEncoderLayer as EncoderLayerStandIn

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


def _reference(w, refs, tokens, keep, pe=True, cls_at="first", invert=False, norm=True,
               cls_mask_last=False):
    """Logits computed from PyTorch modules on the judge's weights ``w``; the keyword
    arguments make classic mistakes."""
    B = tokens.shape[0]
    d = w["cls_token"].shape[-1]
    with torch.no_grad():
        x = F.embedding(tokens, w["embedding.weight"])                        # (B, T, d)
        x = torch.cat([w["cls_token"].expand(B, 1, d), x], dim=1)              # (B, T+1, d)
        if pe:
            x = x + _sinusoid(x.shape[1], d)
        real = ~keep if invert else keep                                       # (B, T)
        ones = torch.ones(B, 1, dtype=torch.bool)
        real = torch.cat([real, ones] if cls_mask_last else [ones, real], dim=1)  # (B, T+1)
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
        "the mask's entry for the CLS token is appended after the padding mask: the CLS token "
        "is at position 0, so prepend its True (torch.cat([cls_keep, padding_mask], dim=1))":
            _reference(w, refs, tokens, keep, cls_mask_last=True),
    }
    # Float64, but the sinusoidal table is the learner's buffer, usually computed in float32
    # when the model was made (then converted): the logits carry its rounding, up to about
    # 2e-6 relative on some draws (seen: 6.9e-8 on 0.046). Every catalogued mistake moves them
    # by far more than these tolerances.
    compare(out, expected, "logits", mistakes, rtol=1e-5, atol=1e-6)
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


# Exercise 2: the learner's layers in PyTorch's nn.TransformerEncoderLayer. The judge makes the
# Day 6 layer from the course's stand-in (one mistake costs once: the learner's Day 6 code has
# its own tests), injects its weights, and computes every expected value from its own copy.

def _torch_layer_reference(w: dict, x: torch.Tensor, keep: torch.Tensor, heads: int,
                           post_ln: bool = False, activation=F.gelu) -> torch.Tensor:
    """A Pre-LN (or, for a classic mistake, Post-LN) layer on the judge's weights ``w``;
    ``keep`` (B, T) True = real key."""
    mask = keep[:, None, None, :]                                       # (B, 1, 1, T)
    with torch.no_grad():
        if not post_ln:
            h = x + ref.mha(w, "attn.", ref.layer_norm(w, "norm1.", x), heads, mask)[0]
            return h + ref.ffn(w, "ffn.", ref.layer_norm(w, "norm2.", h), activation)
        h = ref.layer_norm(w, "norm1.", x + ref.mha(w, "attn.", x, heads, mask)[0])
        return ref.layer_norm(w, "norm2.", h + ref.ffn(w, "ffn.", h, activation))


def _renamed(w: dict, pairs: dict[str, str]) -> dict:
    """``w`` with the tensors of the names in ``pairs`` exchanged (a classic packing mistake)."""
    out = dict(w)
    for a, b in pairs.items():
        out[a], out[b] = w[b], w[a]
    return out


@value_check
def check_key_padding_mask(to_key_padding_mask) -> None:
    """(B, T) True = real -> (B, T + 1) True = ignore, CLS column first and never ignored."""
    lengths = torch.randint(1, 10, (5,), generator=rng(90))
    keep = torch.arange(9)[None, :] < lengths[:, None]                      # (5, 9)
    out = call(to_key_padding_mask, keep, name="to_key_padding_mask(padding_mask)")
    expect_tensor(out, "the key padding mask", dtype=torch.bool, finite=False)
    if tuple(out.shape) == (5, 9):
        raise CheckFailure("to_key_padding_mask returned (B, T) = (5, 9), expected (B, T + 1) = "
                           "(5, 10): the encoder sees the CLS token too, so the mask needs a "
                           "column for it, first.")
    ones = torch.ones(5, 1, dtype=torch.bool)
    expected = ~torch.cat([ones, keep], dim=1)                             # (5, 10)
    mistakes = {
        "the mask is not inverted: PyTorch's src_key_padding_mask is True for the keys to "
        "IGNORE, the opposite of padding_mask (True = real)": torch.cat([ones, keep], dim=1),
        "the CLS column says 'ignore': CLS is a real token, its column must be False":
            torch.cat([ones, ~keep], dim=1),
        "the CLS column is last: CLS is prepended, so its column comes first":
            torch.cat([~keep, ~ones], dim=1),
    }
    compare(out.double(), expected.double(), "the key padding mask",
            {k: v.double() for k, v in mistakes.items()}, rtol=0, atol=0)


@value_check
def check_torch_encoder_layer(to_torch_encoder_layer) -> None:
    """PyTorch's layer with the copied weights computes the Day 6 layer (float64, padding)."""
    d_model, heads, d_ff = 24, 4, 40
    manual_seed(91)
    layer = in_kernel(EncoderLayerStandIn, d_model, heads, d_ff).double().eval()
    w = randomize(layer, 92)
    torch_layer = call(to_torch_encoder_layer, layer, name="to_torch_encoder_layer(layer)")
    if not isinstance(torch_layer, nn.TransformerEncoderLayer):
        raise CheckFailure("to_torch_encoder_layer should return an nn.TransformerEncoderLayer, "
                           f"got {type(torch_layer).__name__}.")
    dtype = torch_layer.linear1.weight.dtype
    if dtype != torch.float64:
        raise CheckFailure(f"the new layer is {dtype} but the layer given is torch.float64: "
                           "create it with dtype= (and device=) of the given layer's weights.")
    x = torch.randn(3, 7, d_model, generator=rng(93), dtype=torch.float64)
    lengths = torch.randint(2, 8, (3,), generator=rng(94))
    lengths[0] = 7
    keep = torch.arange(7)[None, :] < lengths[:, None]                      # (3, 7)
    out = call(torch_layer, x, src_key_padding_mask=~keep,
               name="torch_layer(x, src_key_padding_mask=...)")
    expected = _torch_layer_reference(w, x, keep, heads)
    qkv = ("attn.W_Q.bias", "attn.W_K.bias", "attn.W_V.bias")
    mistakes = {
        "the layer is Post-LN: pass norm_first=True (PyTorch's default is the original "
        "Post-LN)": _torch_layer_reference(w, x, keep, heads, post_ln=True),
        "the feed-forward uses ReLU: pass activation=\"gelu\" (PyTorch's default is ReLU)":
            _torch_layer_reference(w, x, keep, heads, activation=F.relu),
        "Q and K are swapped in in_proj_weight: stack W_Q, W_K, W_V in that order":
            _torch_layer_reference(_renamed(w, {"attn.W_Q.weight": "attn.W_K.weight",
                                                "attn.W_Q.bias": "attn.W_K.bias"}),
                                   x, keep, heads),
        "Q and K are swapped in in_proj_weight (the biases are in order): stack W_Q, W_K, "
        "W_V in that order": _torch_layer_reference(
            _renamed(w, {"attn.W_Q.weight": "attn.W_K.weight"}), x, keep, heads),
        "K and V are swapped in in_proj_weight: stack W_Q, W_K, W_V in that order":
            _torch_layer_reference(_renamed(w, {"attn.W_K.weight": "attn.W_V.weight",
                                                "attn.W_K.bias": "attn.W_V.bias"}),
                                   x, keep, heads),
        "in_proj_bias was not copied (PyTorch starts it at zero): stack the three biases too":
            _torch_layer_reference({**w, **{k: torch.zeros_like(w[k]) for k in qkv}},
                                   x, keep, heads),
        "norm1 and norm2 are swapped: norm1 comes before attention, norm2 before the "
        "feed-forward": _torch_layer_reference(_renamed(w, {"norm1.weight": "norm2.weight",
                                                            "norm1.bias": "norm2.bias"}),
                                               x, keep, heads),
    }
    compare(out, expected, "the PyTorch layer's output", mistakes, rtol=1e-6, atol=1e-8)
    expect_unchanged(layer, w, when="to_torch_encoder_layer")
