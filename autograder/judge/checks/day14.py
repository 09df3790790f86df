"""Hidden tests of Day 14: RMSNorm, SwiGLU, RoPE, the KV cache, ModernGPT, cached generation.

RoPE uses the half-split convention (dimension i pairs with i + head_dim/2), stated in the
notebook; the reference here is written with complex numbers, independently of the exercise.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    call,
    compare,
    expect_module,
    expect_tensor,
    inject,
    manual_seed,
    observed_check,
    randomize,
    rng,
    shown,
    upstream,
    value_check,
)
from autograder.judge.checks.day14_reference import (
    MERGE_WITHOUT_TRANSPOSE,
    SPLIT_WITHOUT_TRANSPOSE,
    _modern_gpt_ref,
    _reference_attention,
    _rope_reference,
)
from course.checking import in_kernel, matches
from course.device import check_runs_on_any_device
from course.probes import LogitsOnly

# --------------------------------------------------------------------------- RMSNorm


@value_check
def check_rmsnorm_matches_torch(RMSNorm) -> None:
    """float64, random gain, eps = 0.1: equal to torch.nn.RMSNorm."""
    d, eps = 10, 0.1
    norm = expect_module(RMSNorm, d, eps=eps).double()
    weight = getattr(norm, "weight", None)
    if not isinstance(weight, nn.Parameter) or tuple(weight.shape) != (d,):
        raise CheckFailure("RMSNorm needs a learned gain `self.weight = nn.Parameter(torch.ones("
                           "d_model))`.")
    if any(n != "weight" for n, _ in norm.named_parameters()):
        raise CheckFailure("RMSNorm has only a gain `weight`: no bias (that is LayerNorm).")
    g = rng(50)
    w = inject(norm, {"weight": 1 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)}
               )["weight"]
    x = 2 + 3 * torch.randn(2, 3, d, generator=g, dtype=torch.float64)   # non-zero mean
    out = call(norm, x, name="RMSNorm(10, eps=0.1)(x of shape (2, 3, 10))")
    ref = nn.RMSNorm(d, eps=eps).double()
    with torch.no_grad():
        ref.weight.copy_(w)
    ms = x.pow(2).mean(-1, keepdim=True)
    centred = x - x.mean(-1, keepdim=True)
    candidates = {
        "you subtracted the mean: RMSNorm only rescales by the root mean square (no "
        "centring, unlike LayerNorm)":
            centred / torch.sqrt(centred.pow(2).mean(-1, True) + eps) * w,
        "eps is outside the square root: use sqrt(mean(x²) + eps)": x / (ms.sqrt() + eps) * w,
        "you divided by the mean square, not its square root": x / (ms + eps) * w,
        "you forgot the gain `weight`": x / torch.sqrt(ms + eps),
        "you ignored the module's eps (0.1 here), or used a fixed one such as 1e-6: add "
        "self.eps inside the square root": x / ms.sqrt() * w,
        "you subtracted the mean before dividing by the root mean square: RMSNorm does not "
        "centre": (x - x.mean(-1, keepdim=True)) / torch.sqrt(ms + eps) * w,
        "you normalised by the sum of squares instead of the mean": x / torch.sqrt(
            x.pow(2).sum(-1, keepdim=True) + eps) * w,
    }
    compare(out, ref(x), "RMSNorm output", candidates, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- SwiGLU


@value_check
def check_swiglu_values(SwiGLU) -> None:
    """d 6, d_ff 10, float64, injected weights: w_down(silu(w_gate x) * w_up x)."""
    d, d_ff = 6, 10
    mlp = expect_module(SwiGLU, d, d_ff).double()
    shapes = {"w_gate": (d_ff, d), "w_up": (d_ff, d), "w_down": (d, d_ff)}
    for name, shape in shapes.items():
        layer = getattr(mlp, name, None)
        if not isinstance(layer, nn.Linear) or tuple(layer.weight.shape) != shape:
            raise CheckFailure(f"SwiGLU needs `self.{name}` = nn.Linear with weight of shape "
                               f"{shape}; got {shown(layer)}.")
        if layer.bias is not None:
            raise CheckFailure(f"{name} must have no bias: nn.Linear(..., bias=False).")
    g = rng(51)
    ws = {n: torch.randn(*s, generator=g, dtype=torch.float64) / math.sqrt(s[1])
          for n, s in shapes.items()}
    with torch.no_grad():
        for n, w in ws.items():
            getattr(mlp, n).weight.copy_(w)
    x = torch.randn(3, 4, d, generator=g, dtype=torch.float64)
    out = call(mlp, x, name="SwiGLU(6, 10)(x of shape (3, 4, 6))")
    gate, up, down = x @ ws["w_gate"].T, x @ ws["w_up"].T, ws["w_down"].T
    candidates = {
        "silu is on the wrong branch: apply it to the gate, silu(w_gate(x)) * w_up(x)":
            (gate * F.silu(up)) @ down,
        "the gate has no silu: silu(w_gate(x)) * w_up(x)": (gate * up) @ down,
        "silu is applied to the product: only the gate goes through silu":
            F.silu(gate * up) @ down,
        "you used GELU; SwiGLU uses silu (x * sigmoid(x)) on the gate":
            (F.gelu(gate) * up) @ down,
        "sigmoid instead of silu: silu(z) = z * sigmoid(z)": (torch.sigmoid(gate) * up) @ down,
    }
    compare(out, (F.silu(gate) * up) @ down, "SwiGLU output", candidates, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- RoPE


def _apply(rope, q, k, positions, label):
    out = call(rope.apply_rope, q, k, positions, name=label)
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("apply_rope should return a tuple (q_rotated, k_rotated).")
    qr, kr = out
    expect_tensor(qr, "rotated q", shape=tuple(q.shape))
    expect_tensor(kr, "rotated k", shape=tuple(k.shape))
    return qr, kr


@value_check
def check_rope_properties(RotaryEmbedding) -> None:
    """Identity at position 0, norms kept, q_m . k_n a function of m - n only."""
    d, max_len = 8, 40
    rope = expect_module(RotaryEmbedding, d, max_len, base=100.0).double()
    g = rng(52)
    q = torch.randn(2, 5, d, generator=g, dtype=torch.float64)
    k = torch.randn(2, 5, d, generator=g, dtype=torch.float64)
    zero = torch.zeros(5, dtype=torch.long)
    qr, kr = _apply(rope, q, k, zero, "apply_rope(q, k, positions = 0)")
    compare(qr, q, "q rotated at position 0", rtol=1e-10, atol=1e-12,
            hint="position 0 must be the identity: the angle is 0 * theta = 0, cos = 1, sin = 0.")
    compare(kr, k, "k rotated at position 0", rtol=1e-10, atol=1e-12)
    pos = torch.tensor([0, 3, 9, 17, 33])
    qr, kr = _apply(rope, q, k, pos, "apply_rope(q, k, positions)")
    compare(qr.norm(dim=-1), q.norm(dim=-1), "norms of rotated q", rtol=1e-6, atol=1e-7,
            hint="a rotation keeps the length of every vector: use cos and sin of the same "
                 "angle for both members of a pair (a cos - b sin, a sin + b cos).")
    # One query and one key vector placed at many positions: score(m, n) vs m - n.
    qv = torch.randn(1, d, generator=g, dtype=torch.float64)
    kv = torch.randn(1, d, generator=g, dtype=torch.float64)
    positions = torch.arange(max_len)
    q_all, k_all = _apply(rope, qv.expand(max_len, d), kv.expand(max_len, d), positions,
                          "apply_rope on one vector at positions 0..39")
    scores = q_all @ k_all.T                                               # (m, n)
    for offset in (0, 5, -7, 21):
        diag = torch.diagonal(scores, offset=-offset)                      # m - n == offset
        if float(diag.max() - diag.min()) > 1e-5:
            raise CheckFailure(f"q_m · k_n differs between pairs with the same offset m - n = "
                               f"{offset} (from {float(diag.min()):.4f} to "
                               f"{float(diag.max()):.4f}): rotate q and k with the same angles "
                               "for the same position, by m * theta_i.")
    if float(scores.std()) < 1e-6:
        raise CheckFailure("all scores are equal: the rotation ignores the positions.")


@value_check
def check_rope_convention(RotaryEmbedding) -> None:
    """4-D inputs at positions (3, 0, 7, 12) vs the complex half-split reference."""
    d, base = 12, 10000.0
    rope = expect_module(RotaryEmbedding, d, 16).double()
    g = rng(53)
    q = torch.randn(2, 3, 4, d, generator=g, dtype=torch.float64)    # (B, H, T, d)
    k = torch.randn(2, 3, 4, d, generator=g, dtype=torch.float64)
    pos = torch.tensor([3, 0, 7, 12])
    qr, kr = _apply(rope, q, k, pos, "apply_rope(q, k, positions = [3, 0, 7, 12])")
    candidates = {
        "you rotated the wrong pairs: in the half-split convention dimension i pairs with "
        "i + head_dim/2 (x1 = x[..., :d/2], x2 = x[..., d/2:]), not with its neighbour i + 1":
            _rope_reference(q, pos, base, pairing="interleaved"),
        "the rotation goes the wrong way: x1 cos - x2 sin, x1 sin + x2 cos":
            _rope_reference(q, pos, base, sign=-1.0),
        "wrong frequencies: theta_i = base ** (-2i / head_dim) for i = 0 .. head_dim/2 - 1":
            _rope_reference(q, pos, base, exponent="i/d"),
        "the positions were ignored (rotated as 0, 1, 2, ...): index the tables with "
        "`positions`": _rope_reference(q, torch.arange(4), base),
    }
    compare(qr, _rope_reference(q, pos, base), "rotated q", candidates, rtol=1e-6, atol=1e-6)
    compare(kr, _rope_reference(k, pos, base), "rotated k", rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- cached attention


def _cache_len(cache, label: str) -> int:
    if not isinstance(cache, tuple | list) or len(cache) != 2:
        raise CheckFailure(f"{label}: the cache should be a tuple (k, v), got "
                           f"{type(cache).__name__}.")
    k, v = cache
    expect_tensor(k, f"{label}: cached k")
    expect_tensor(v, f"{label}: cached v")
    if k.shape != v.shape:
        raise CheckFailure(f"{label}: cached k has shape {tuple(k.shape)} but v has "
                           f"{tuple(v.shape)}: append this step's keys and values once each.")
    return k.size(2)


def _rope_right(rope: nn.Module, head_dim: int) -> bool:
    """Whether a RotaryEmbedding inside the attention rotates as day14_rope_convention asks."""
    q = torch.randn(1, 2, 4, head_dim, generator=rng(60), dtype=torch.float64)
    pos = torch.tensor([3, 0, 7, 1])
    qr, _ = rope.apply_rope(q, q, pos)
    return matches(qr, _rope_reference(q, pos, 10000.0), rtol=1e-4, atol=1e-5)


def _cache_right(attn: nn.Module, heads: int) -> bool:
    """Whether a CachedCausalSelfAttention inside a model does what
    day14_cached_attention_matches_full grades: full pass = reference, and prefill + decoding
    = full pass, with its own weights."""
    w_qkv, w_proj = attn.qkv.weight.detach().double(), attn.proj.weight.detach().double()
    x = torch.randn(2, 7, w_proj.shape[0], generator=rng(61), dtype=torch.float64)
    x = x.to(attn.proj.weight.dtype)
    full, _ = attn(x)
    y1, c1 = attn(x[:, :5])
    y2, c2 = attn(x[:, 5:6], c1)
    y3, _ = attn(x[:, 6:7], c2)
    return (matches(full, _reference_attention(x.double(), w_qkv, w_proj, heads), 1e-4, 1e-5)
            and matches(torch.cat([y1, y2, y3], dim=1), full, 1e-4, 1e-5))


def _rope_first(attns, head_dim: int):
    return ("your RotaryEmbedding fails day14_rope_convention",
            lambda: all(_rope_right(a.rope, head_dim) for a in attns))


@value_check
def check_cached_attention_matches_full(CachedCausalSelfAttention) -> None:
    """Prefill 5 then decode 1 + 1 == one full causal pass over 7 tokens; caches 5, 6, 7."""
    d, heads, max_len = 24, 3, 16
    attn = expect_module(CachedCausalSelfAttention, d, heads, max_len).double().eval()
    for name, shape in (("qkv", (3 * d, d)), ("proj", (d, d))):
        layer = getattr(attn, name, None)
        if not isinstance(layer, nn.Linear) or tuple(layer.weight.shape) != shape:
            raise CheckFailure(f"CachedCausalSelfAttention needs `self.{name}` = nn.Linear with "
                               f"weight {shape} and no bias.")
    g = rng(54)
    w_qkv = torch.randn(3 * d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    w_proj = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    with torch.no_grad():
        attn.qkv.weight.copy_(w_qkv)
        attn.proj.weight.copy_(w_proj)
    x = torch.randn(2, 7, d, generator=g, dtype=torch.float64)
    # The pass without a cache reads tokens of its own: decoding the same tokens could replay
    # that pass's outputs from memory instead of attending over the cache.
    x_full = torch.randn(2, 7, d, generator=g, dtype=torch.float64)
    with upstream(_rope_first([attn], d // heads)):
        _cached_values(attn, x, w_qkv, w_proj, heads, x_full)


def _cached_values(attn, x, w_qkv, w_proj, heads, x_full) -> None:
    d = x.shape[-1]
    expected = _reference_attention(x, w_qkv, w_proj, heads)
    with torch.no_grad():
        out = call(attn, x_full, name="attention over 7 tokens without a cache")
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailure("forward should return a tuple (y, (k, v)).")
        full, full_cache = out
        expect_tensor(full, "output without a cache", shape=(2, 7, d))
        no_rope = F.scaled_dot_product_attention(
            *((x_full @ w_qkv.T).split(d, 2)[i].view(2, 7, heads, d // heads).transpose(1, 2)
              for i in range(3)), is_causal=True).transpose(1, 2).reshape(2, 7, d) @ w_proj.T
        compare(full, _reference_attention(x_full, w_qkv, w_proj, heads),
                "output over 7 tokens without a cache",
                {"q and k were not rotated: apply RoPE to q and k before the scores": no_rope,
                 MERGE_WITHOUT_TRANSPOSE: _reference_attention(
                     x_full, w_qkv, w_proj, heads, layout="no-merge-transpose"),
                 SPLIT_WITHOUT_TRANSPOSE: _reference_attention(
                     x_full, w_qkv, w_proj, heads, layout="no-head-transpose")},
                rtol=1e-5, atol=1e-6)
        if _cache_len(full_cache, "without a cache") != 7:
            raise CheckFailure("after 7 tokens the returned cache should hold 7 keys.")
        y1, c1 = call(attn, x[:, :5], name="prefill of 5 tokens")
        n1 = _cache_len(c1, "after a prefill of 5 tokens")
        y2, c2 = call(attn, x[:, 5:6], c1, name="decoding token 6 with the cache")
        n2 = _cache_len(c2, "after decoding token 6")
        y3, c3 = call(attn, x[:, 6:7], c2, name="decoding token 7 with the cache")
        n3 = _cache_len(c3, "after decoding token 7")
    if (n1, n2, n3) != (5, 6, 7):
        twice = n2 - n1 == 2 or n3 - n2 == 2
        raise CheckFailure(
            f"the cache held {n1}, {n2}, {n3} keys after 5, 6, 7 tokens, expected 5, 6, 7"
            + (": the new keys were appended twice; concatenate the cache with this step's "
               "keys exactly once" if twice else "") + ".")
    got = torch.cat([y1, y2, y3], dim=1)
    expect_tensor(got, "cached outputs", shape=(2, 7, d))
    # The classic mistakes of decoding, computed the same way.
    wrong_pos = expected.clone()
    for t in (5, 6):          # the new token rotated as position 0
        b, n = 2, t + 1
        q, k, v = (x[:, :n] @ w_qkv.T).split(d, 2)
        q, k, v = (a.view(b, n, heads, d // heads).transpose(1, 2) for a in (q, k, v))
        pos_k = torch.arange(n)
        pos_k[5:] = 0            # every decoded key was rotated as position 0 too
        qr = _rope_reference(q[:, :, -1:], torch.tensor([0]), 10000.0)
        kr = _rope_reference(k, pos_k, 10000.0)
        y = F.scaled_dot_product_attention(qr, kr, v)
        wrong_pos[:, t] = (y.transpose(1, 2).reshape(b, 1, d) @ w_proj.T)[:, 0]
    compare(got, expected, "outputs of prefill + cached decoding",
            {"the new token was rotated as position 0: offset the positions by the cache "
             "length, torch.arange(past, past + T)": wrong_pos},
            rtol=1e-5, atol=1e-6,
            hint="prefill + decoding must equal one full causal pass; the new query attends to "
                 "all past + 1 keys (mask torch.ones(T, S).tril(diagonal=S - T)).")


# --------------------------------------------------------------------------- ModernGPT


@observed_check
def check_modern_gpt_structure(ModernGPT) -> None:
    """Tied head, no position table, RMSNorm/SwiGLU inside, parameter count by formula."""
    vocab, d, heads, layers, max_len, d_ff = 23, 48, 4, 3, 32, 40
    model = expect_module(ModernGPT, vocab, d_model=d, num_heads=heads, num_layers=layers,
                          max_len=max_len, d_ff=d_ff)
    tok, head = getattr(model, "tok", None), getattr(model, "head", None)
    if not isinstance(tok, nn.Embedding) or not isinstance(head, nn.Linear):
        raise CheckFailure("ModernGPT needs `self.tok` (nn.Embedding) and `self.head` "
                           "(nn.Linear(d_model, vocab_size, bias=False)).")
    if head.weight is not tok.weight:
        raise CheckFailure("the head is not tied to the embedding: write "
                           "`self.head.weight = self.tok.weight` (one shared (V, D) matrix).")
    if head.bias is not None:
        raise CheckFailure("head must have no bias.")
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Embedding) and mod is not tok:
            raise CheckFailure(f"`{name}` is a second embedding table: ModernGPT has no learned "
                               "position table, RoPE inside attention encodes positions.")
        if isinstance(mod, nn.LayerNorm):
            raise CheckFailure(f"`{name}` is a LayerNorm: ModernGPT uses your RMSNorm.")
    got = sum(p.numel() for p in model.parameters())
    want = layers * (4 * d * d + 3 * d * d_ff + 2 * d) + vocab * d + d
    if got != want:
        delta = got - want
        hints = {vocab * d: "the head is counted separately: tie it to the embedding",
                 max_len * d: "a position table is there: remove it",
                 -d: "the final norm norm_f is missing",
                 -layers * d * d_ff: "the MLP is missing a matrix: SwiGLU has three"}
        raise CheckFailure(f"ModernGPT({vocab}, d_model={d}, num_layers={layers}, d_ff={d_ff}) "
                           f"has {got:,} parameters, expected {want:,} = L(4D² + 3·D·d_ff + 2D) "
                           f"+ V·D + D: {hints.get(delta, f'difference {delta:+,}')}.")


@value_check
def check_modern_gpt_cache(ModernGPT) -> None:
    """Prompt of 6 then 2 cached steps == full pass over 8 (float64); causal; any device."""
    vocab = 17
    manual_seed(55)
    model = expect_module(ModernGPT, vocab, d_model=32, num_heads=4, num_layers=2, max_len=16,
                          d_ff=40).double().eval()
    attns = [b.attn for b in getattr(model, "blocks", [])]
    try:
        with torch.no_grad():
            attention_right = bool(attns) and all(_cache_right(a, 4) for a in attns)
    except Exception:  # noqa: BLE001 - an attention that cannot even run is not right
        attention_right = False
    # One mistake costs once: when the attention already lost its points in its own test,
    # the rest of ModernGPT is judged with every attention's output projection at zero (each
    # block's attention then adds nothing, right or wrong). An attention that crashes still
    # fails here, and the message names it first.
    with upstream(_rope_first(attns, 8),
                  ("your CachedCausalSelfAttention fails day14_cached_attention_matches_full",
                   lambda: all(_cache_right(a, 4) for a in attns))):
        _model_cache(model, vocab, attention_off=bool(attns) and not attention_right)
    small = expect_module(ModernGPT, 11, d_model=16, num_heads=2, num_layers=1, max_len=8,
                          d_ff=24).eval()
    tokens = torch.randint(0, 11, (2, 6), generator=rng(57))
    check_runs_on_any_device(in_kernel(LogitsOnly, small), lambda: (tokens,), "ModernGPT")


def _model_cache(model, vocab, attention_off: bool = False) -> None:
    """Full pass and prefill + cached decoding of ``model`` against :func:`_modern_gpt_ref` on
    the judge's weights; ``attention_off`` zeroes every ``attn.proj`` (judge and model alike),
    for a model whose attention already failed its own test."""
    w = randomize(model, 58)
    if attention_off:
        off = {k: torch.zeros_like(v) for k, v in w.items() if k.endswith("attn.proj.weight")}
        w.update(inject(model, off))
    g = rng(56)
    idx = torch.randint(0, vocab, (2, 8), generator=g)
    with torch.no_grad():
        out = call(model, idx, name="ModernGPT(17, ...)(idx of shape (2, 8))")
        if not isinstance(out, tuple) or len(out) != 2:
            raise CheckFailure("ModernGPT.forward should return (logits, new_cache).")
        full, _ = out
        expect_tensor(full, "logits", shape=(2, 8, vocab), dtype=torch.float64)
        try:
            expected = _modern_gpt_ref(w, idx, 4)
        except KeyError as exc:
            raise CheckFailure(f"ModernGPT has no parameter {exc}: keep the contract's names "
                               "(tok, blocks.N.norm1/attn.qkv/attn.proj/norm2/mlp.w_gate/w_up/"
                               "w_down, norm_f).") from None
        changed = idx.clone()
        changed[:, 5:] = (changed[:, 5:] + 3) % vocab
        other, _ = call(model, changed, name="ModernGPT on a changed suffix")
        if not torch.allclose(full[:, :5], other[:, :5], atol=1e-9):
            raise CheckFailure("changing tokens 5..7 changed the logits at positions 0..4: "
                               "the model is not causal.")
    off_note = (" (judged with every attention's output projection at zero: your attention "
                "fails its own test, day14_cached_attention_matches_full, so only the rest of "
                "the model is judged here)") if attention_off else ""
    compare(full, expected, "logits of a full pass" + off_note, rtol=1e-5, atol=1e-6,
            hint="the contract: tok -> blocks (x + attn(norm1(x)), then x + mlp(norm2(x))) -> "
                 "norm_f -> the head tied to tok.")
    with torch.no_grad():
        l1, cache = call(model, idx[:, :6], name="ModernGPT prefill (6 tokens)")
        l2, cache = call(model, idx[:, 6:7], cache, name="ModernGPT decoding with the cache")
        l3, cache = call(model, idx[:, 7:8], cache, name="ModernGPT decoding with the cache")
    if not isinstance(cache, list | tuple) or len(cache) != 2:
        raise CheckFailure("the new cache should be a list with one (k, v) per block (2 here).")
    got = torch.cat([l1, l2, l3], dim=1)
    # As loose as the full pass above: the rotary tables are the learner's buffers, usually
    # float32 (4 draws in 40 of the answer key differed by up to 2e-7 at rtol=1e-6, atol=1e-7).
    compare(got, expected, "logits from prefill + cached decoding", rtol=1e-5, atol=1e-6,
            hint="pass cache[i] to block i and return the list of the blocks' new caches.")
