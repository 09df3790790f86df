"""Hidden tests of Day 6: FeedForward, a hand-written LayerNorm, the Pre-LN encoder layer.

References, all on weights the judge injects and keeps (``randomize``): ``F.gelu`` and
``F.linear``, ``F.layer_norm``, and ``nn.TransformerEncoderLayer(..., activation="gelu",
batch_first=True, norm_first=True)`` holding the same weights. The layer tests put PyTorch's
LayerNorm or the course's FeedForward in place of the learner's when those fail their own
tests (one mistake costs once).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from autograder.judge.checks import (
    CheckFailure,
    Step,
    call,
    compare,
    expect_module,
    expect_tensor,
    expect_unchanged,
    manual_seed,
    observed_check,
    randomize,
    rng,
    shown,
    value_check,
)
from autograder.judge.checks import reference as ref
from course.checking import forbid, in_kernel, matches
from course.device import check_runs_on_any_device
from course.probes import FeedForwardBlock


def _count(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def _linear(module: nn.Module, name: str, shape: tuple[int, int]) -> nn.Linear:
    lin = getattr(module, name, None)
    if not isinstance(lin, nn.Linear) or tuple(lin.weight.shape) != shape or lin.bias is None:
        raise CheckFailure(f"self.{name} should be nn.Linear({shape[1]}, {shape[0]}) with bias, "
                           f"got {shown(lin)}.")
    return lin


@value_check
def check_ffn(FeedForward) -> None:
    """linear1 (C -> d_ff), GELU, linear2 (d_ff -> C); 131,712 parameters at (128, 512)."""
    big = expect_module(FeedForward, 128, 512, name="FeedForward")
    if _count(big) != 131_712:
        raise CheckFailure(f"FeedForward(128, 512) has {_count(big):,} parameters, expected "
                           "131,712 = (128 x 512 + 512) + (512 x 128 + 128).")
    ffn = expect_module(FeedForward, 16, 40, name="FeedForward").double()
    _linear(ffn, "linear1", (40, 16))
    _linear(ffn, "linear2", (16, 40))
    w = randomize(ffn, 60)

    def l2(t):
        return ref.linear(w, "linear2.", t)

    x = 2.0 * torch.randn(3, 5, 16, generator=rng(61), dtype=torch.float64)
    out = call(ffn, x, name="FeedForward.forward(x)")
    expect_tensor(out, "FeedForward output", shape=(3, 5, 16), dtype=torch.float64)
    with torch.no_grad():
        hidden = ref.linear(w, "linear1.", x)
        expected = l2(F.gelu(hidden))
        mistakes = {
            "you used ReLU: the feed-forward block uses GELU (F.gelu or nn.GELU), the smooth "
            "version of ReLU": l2(F.relu(hidden)),
            "you used the tanh approximation of GELU; use the exact F.gelu(x)":
                l2(F.gelu(hidden, approximate="tanh")),
            "there is no activation between linear1 and linear2: add GELU": l2(hidden),
            "GELU is applied to the input, before linear1: GELU goes after linear1, "
            "linear2(gelu(linear1(x)))": l2(ref.linear(w, "linear1.", F.gelu(x))),
        }
    compare(out, expected, "FeedForward output", mistakes, rtol=1e-6, atol=1e-9)
    expect_unchanged(ffn, w)


# PyTorch's other routes to the same normalisation: group_norm with one group over a
# (N, C) view is a layer norm (found by the attack round of issue 47), instance and batch norm
# over the right view too, and the native kernels behind them.
LN_FORBIDDEN = ("torch.nn.functional.layer_norm", "torch.layer_norm",
                "torch.nn.functional.group_norm", "torch.group_norm",
                "torch.nn.functional.instance_norm", "torch.instance_norm",
                "torch.nn.functional.batch_norm", "torch.batch_norm",
                "torch.native_layer_norm", "torch.native_group_norm", "torch.native_batch_norm")


@value_check
def check_layer_norm(LayerNorm) -> None:
    """Equal to nn.LayerNorm with the same non-default weights; eps=0.5 so eps's place shows."""
    with forbid(*LN_FORBIDDEN):
        ln = expect_module(LayerNorm, 12, eps=0.5, name="LayerNorm")
    for name in ("weight", "bias"):
        p = getattr(ln, name, None)
        if not isinstance(p, nn.Parameter) or tuple(p.shape) != (12,):
            raise CheckFailure(f"self.{name} should be an nn.Parameter of shape (d_model,) = "
                               f"(12,), got {type(p).__name__}.")
    ln = ln.double()
    w = randomize(ln, 62)
    gain, shift = w["weight"], w["bias"]
    x = 0.7 * torch.randn(3, 5, 12, generator=rng(63), dtype=torch.float64) + 0.3
    with forbid(*LN_FORBIDDEN):
        out = call(ln, x, name="LayerNorm.forward(x)")
    expect_tensor(out, "LayerNorm output", shape=(3, 5, 12), dtype=torch.float64)

    def norm(var, eps_inside=True, eps=0.5):
        mean = x.mean(-1, keepdim=True)
        scale = torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps
        return (x - mean) / scale * gain + shift

    biased = x.var(-1, unbiased=False, keepdim=True)
    unbiased = x.var(-1, unbiased=True, keepdim=True)
    mistakes = {
        "eps is outside the square root: LayerNorm divides by sqrt(var + eps), not "
        "sqrt(var) + eps (it is inside the square root)": norm(biased, eps_inside=False),
        "you used the unbiased variance (divides by d_model - 1): LayerNorm uses the biased "
        "variance, x.var(dim=-1, unbiased=False, keepdim=True)": norm(unbiased),
        "you ignored self.eps (the test uses eps=0.5)": norm(biased, eps=1e-5),
        "you normalised over the batch or the sequence: LayerNorm normalises each vector over "
        "its last dimension (d_model)": (x - x.mean(0, keepdim=True))
        / torch.sqrt(x.var(0, unbiased=False, keepdim=True) + 0.5) * gain + shift,
        "weight and bias are not applied: return normalised * self.weight + self.bias":
            (x - x.mean(-1, keepdim=True)) / torch.sqrt(biased + 0.5),
    }
    compare(out, F.layer_norm(x, (12,), gain, shift, 0.5), "LayerNorm output", mistakes,
            rtol=1e-6, atol=1e-9)
    expect_unchanged(ln, w)


def _layer(cls, d_model, heads, d_ff, seed):
    manual_seed(seed)
    layer = expect_module(cls, d_model, heads, d_ff, name="TransformerEncoderLayer")
    for name in ("norm1", "attn", "norm2", "ffn"):
        if not isinstance(getattr(layer, name, None), nn.Module):
            raise CheckFailure(f"TransformerEncoderLayer should have a submodule self.{name} "
                               "(norm1, attn, norm2, ffn).")
    return layer


@observed_check
def check_encoder_structure(TransformerEncoderLayer) -> None:
    """norm1, attn, norm2, ffn; 198,272 parameters at (128, 8, 512)."""
    layer = _layer(TransformerEncoderLayer, 128, 8, 512, seed=64)
    parts = {n: _count(getattr(layer, n)) for n in ("norm1", "attn", "norm2", "ffn")}
    expected = {"norm1": 256, "attn": 66_048, "norm2": 256, "ffn": 131_712}
    for name, n in parts.items():
        if n != expected[name]:
            raise CheckFailure(f"self.{name} has {n:,} parameters, expected {expected[name]:,}.")
    total = _count(layer)
    if total != 198_272:
        raise CheckFailure(f"TransformerEncoderLayer(128, 8, 512) has {total:,} parameters, "
                           "expected 198,272 (66,048 attention + 131,712 feed-forward + 2 x 256 "
                           "LayerNorm); do not create extra layers.")


WIRING = ("in how forward wires the sublayers: x = x + self.attn(self.norm1(x), mask), then "
          "x = x + self.ffn(self.norm2(x)) on that result")


def _without_ffn(layer, x, mask):
    """The layer's output with the feed-forward block's last Linear zeroed: for a Pre-LN
    layer that is the residual stream after the attention half, x + attn(norm1(x))."""
    last = layer.ffn.linear2
    saved = {k: v.detach().clone() for k, v in last.state_dict().items()}
    last.load_state_dict({k: torch.zeros_like(v) for k, v in saved.items()})
    try:
        return layer(x, mask) if mask is not None else layer(x)
    finally:
        last.load_state_dict(saved)


def _prepared(layer, d_model: int, d_ff: int, seed: int) -> tuple[dict, str]:
    """The judge's weights injected into every parameter of the layer, and the note for the
    message. One mistake costs once: when the learner's LayerNorm or FeedForward (earlier
    exercises of this day, with their own tests) is wrong on the judge's weights, PyTorch's
    nn.LayerNorm or the course's FeedForward holding the same weights takes its place, so
    that this test grades how the layer wires them."""
    w = randomize(layer, seed)
    x = torch.randn(2, 3, d_model, generator=rng(seed + 1000), dtype=torch.float64)
    notes = []
    with torch.no_grad():
        for name in ("norm1", "norm2"):
            norm = getattr(layer, name)
            if not matches(call(norm, x, name=f"layer.{name}"),
                           ref.layer_norm(w, f"{name}.", x), rtol=1e-6, atol=1e-9):
                stand_in = in_kernel(nn.LayerNorm, d_model, dtype=torch.float64)
                stand_in.load_state_dict({"weight": w[f"{name}.weight"],
                                          "bias": w[f"{name}.bias"]})
                setattr(layer, name, stand_in)
                notes.append("your LayerNorm fails day06_layer_norm_values (fix that first)")
        if not matches(call(layer.ffn, x, name="layer.ffn"), ref.ffn(w, "ffn.", x),
                       rtol=1e-6, atol=1e-9):
            stand_in = in_kernel(FeedForwardBlock, d_model, d_ff)
            stand_in.double()
            stand_in.load_state_dict({k[len("ffn."):]: v for k, v in w.items()
                                      if k.startswith("ffn.")})
            layer.ffn = stand_in
            notes.append("your FeedForward fails day06_ffn_values (fix that first)")
    if not notes:
        return w, ""
    return w, ("; ".join(dict.fromkeys(notes)) + ": this test used PyTorch's LayerNorm or the "
               "course's FeedForward with the same weights in its place")


@value_check
def check_encoder_wiring(TransformerEncoderLayer) -> None:
    """Pre-LN with a residual around each sublayer, on the judge's weights."""
    layer = _layer(TransformerEncoderLayer, 20, 4, 36, seed=65).double().eval()
    w, note = _prepared(layer, 20, 36, 66)
    x = torch.randn(2, 6, 20, generator=rng(67), dtype=torch.float64)
    keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    mask = keep[:, None, None, :]                                        # (B, 1, 1, T)

    def n1(t):
        return ref.layer_norm(w, "norm1.", t)

    def n2(t):
        return ref.layer_norm(w, "norm2.", t)

    def ffn(t):
        return ref.ffn(w, "ffn.", t)

    def attn(t, m):
        return ref.mha(w, "attn.", t, 4, m)[0]

    for m, label in ((None, "without a mask"), (mask, "with a padding mask")):
        out = call(layer, x, m, name="TransformerEncoderLayer.forward(x, mask)") \
            if m is not None else call(layer, x, name="TransformerEncoderLayer.forward(x)")
        expect_tensor(out, f"layer output {label}", shape=(2, 6, 20), dtype=torch.float64)
        with torch.no_grad():
            h = x + attn(n1(x), m)
            expected = h + ffn(n2(h))
            post_h = n1(x + attn(x, m))
            a = attn(n1(x), m)
            mistakes = {
                "this is Post-LN (normalise after adding the residual); use Pre-LN: "
                "x = x + attn(norm1(x)), then x = x + ffn(norm2(x))":
                    n2(post_h + ffn(post_h)),
                "the residual around the attention is missing: x = x + attn(norm1(x))":
                    a + ffn(n2(a)),
                "the residual around the feed-forward block is missing: x = x + ffn(norm2(x))":
                    ffn(n2(h)),
                "the residuals are missing around both sublayers": ffn(n2(a)),
                "both sublayers read the same input: the feed-forward block must read the "
                "output of the attention sublayer": h + ffn(n2(x)),
                "the mask was not passed to the attention: self.attn(self.norm1(x), mask)":
                    (lambda hh: hh + ffn(n2(hh)))(x + attn(n1(x), None)),
            }
        stream = Step(
            "the residual stream after the attention half (your layer's output with the "
            "feed-forward block's last Linear zeroed)",
            lambda m=m: _without_ffn(layer, x, m), h,
            "in the attention half: x = x + self.attn(self.norm1(x), mask)")
        compare(out, expected, f"layer output {label}", mistakes, rtol=1e-6, atol=1e-9,
                hint=note, steps=[stream], where="in the feed-forward half: x = x + "
                "self.ffn(self.norm2(x)), where x is the output of the attention half")


def _torch_layer(w, d_model, heads, d_ff, norm_first=True, activation="gelu"):
    """nn.TransformerEncoderLayer holding the judge's weights ``w``."""
    torch_ref = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout=0.0,
                                           activation=activation, batch_first=True,
                                           norm_first=norm_first).double()
    sa = torch_ref.self_attn
    with torch.no_grad():
        sa.in_proj_weight.copy_(torch.cat([w[f"attn.{n}.weight"] for n in ("W_Q", "W_K",
                                                                           "W_V")]))
        sa.in_proj_bias.copy_(torch.cat([w[f"attn.{n}.bias"] for n in ("W_Q", "W_K", "W_V")]))
        sa.out_proj.weight.copy_(w["attn.W_O.weight"])
        sa.out_proj.bias.copy_(w["attn.W_O.bias"])
        for name in ("linear1", "linear2"):
            getattr(torch_ref, name).weight.copy_(w[f"ffn.{name}.weight"])
            getattr(torch_ref, name).bias.copy_(w[f"ffn.{name}.bias"])
        for name in ("norm1", "norm2"):
            getattr(torch_ref, name).weight.copy_(w[f"{name}.weight"])
            getattr(torch_ref, name).bias.copy_(w[f"{name}.bias"])
    return torch_ref.eval()


@value_check
def check_encoder_matches_torch(TransformerEncoderLayer) -> None:
    """Equal to nn.TransformerEncoderLayer(norm_first=True, gelu) given the same weights.

    A wrong LayerNorm or FeedForward costs its own test only: it is replaced here."""
    layer = _layer(TransformerEncoderLayer, 24, 6, 40, seed=68).double().eval()
    w, note = _prepared(layer, 24, 40, 69)
    try:
        torch_ref = _torch_layer(w, 24, 6, 40)
        post = _torch_layer(w, 24, 6, 40, norm_first=False)
    except KeyError as exc:
        raise CheckFailure(f"could not find the weight {exc} in your layer. Keep the names "
                           "attn.W_Q/W_K/W_V/W_O, ffn.linear1/linear2, norm1/norm2 with weight "
                           "and bias.") from None
    x = torch.randn(3, 7, 24, generator=rng(70), dtype=torch.float64)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[0, 5:] = False
    out = call(layer, x, keep[:, None, None, :], name="TransformerEncoderLayer.forward(x, mask)")
    expect_tensor(out, "layer output", shape=(3, 7, 24), dtype=torch.float64)
    with torch.no_grad():
        expected = torch_ref(x, src_key_padding_mask=~keep)
        relu = _torch_layer(w, 24, 6, 40, activation="relu")
        mistakes = {
            "this is Post-LN; nn.TransformerEncoderLayer(norm_first=True) is Pre-LN":
                post(x, src_key_padding_mask=~keep),
            "the feed-forward block uses ReLU; use GELU": relu(x, src_key_padding_mask=~keep),
        }
        n1 = ref.layer_norm(w, "norm1.", x)
        h = torch.randn(3, 7, 24, generator=rng(72), dtype=torch.float64)
    parts = [
        Step("self.attn (against nn.MultiheadAttention with the same weights)",
             lambda: layer.attn(n1, keep[:, None, None, :])[keep],
             lambda: torch_ref.self_attn(n1, n1, n1, key_padding_mask=~keep,
                                         need_weights=False)[0][keep],
             "in self.attn, the multi-head attention inside the layer"),
        Step("self.ffn (against Linear, GELU, Linear with the same weights)",
             lambda: layer.ffn(h), lambda: ref.ffn(w, "ffn.", h),
             "in self.ffn: see day06_ffn_values"),
    ]
    # Positions that are padding are ignored by PyTorch's fast path; compare real tokens.
    compare(out[keep], expected[keep], "layer output at real tokens",
            {k: v[keep] for k, v in mistakes.items()}, rtol=1e-6, atol=1e-8, hint=note,
            steps=parts, where=WIRING)


@observed_check
def check_encoder_device(TransformerEncoderLayer) -> None:
    """Runs on another device (GPU, or PyTorch's meta device) with a causal mask."""
    layer = _layer(TransformerEncoderLayer, 16, 4, 32, seed=71)
    check_runs_on_any_device(
        layer, lambda: (torch.randn(2, 5, 16, generator=rng(72)),
                        torch.ones(5, 5, dtype=torch.bool).tril()),
        "TransformerEncoderLayer")
