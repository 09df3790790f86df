"""Hidden tests of Day 12: the causal mask, causal self-attention, the Pre-LN block, TinyGPT."""

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
    observed_check,
    randomize,
    rng,
    shown,
    upstream,
    value_check,
)
from autograder.judge.checks import reference as ref
from course.checking import matches, note_value_checked
from course.device import check_runs_on_any_device


def _tril(n: int, diagonal: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril(diagonal=diagonal)


@value_check
def check_causal_mask_values(causal_mask) -> None:
    """Lower triangle with the diagonal, bool, for N = 1, 6, 9; device= honoured."""
    for n in (6, 9, 1):
        got = call(causal_mask, n, name=f"causal_mask({n})")
        expect_tensor(got, f"causal_mask({n})", shape=(n, n))
        if got.dtype != torch.bool:
            raise CheckFailure(f"causal_mask({n}) has dtype {got.dtype}: return a bool tensor "
                               "(True = may attend), for example torch.ones(..., dtype=torch.bool)"
                               ".tril().")
        want = _tril(n, 0)
        if torch.equal(got, want):
            continue
        mistakes = {
            "the diagonal is excluded: a position must attend to itself, so the mask is True on "
            "the diagonal (torch.tril(..., diagonal=0))": _tril(n, -1),
            "off by one: position i can see position i + 1, one step into the future (use "
            "diagonal=0, not diagonal=1)": _tril(n, 1),
            "your mask is the upper triangle, True for the future: use torch.tril, not "
            "torch.triu": ~_tril(n, -1),
            "your mask is inverted: True must mean 'may attend' (the lower triangle)": ~want,
            "your mask allows everything: no causal masking at all": torch.ones(n, n,
                                                                                 dtype=torch.bool),
        }
        hint = next((m for m, wrong in mistakes.items() if torch.equal(got, wrong)),
                    "entry [i, j] must be True exactly when j <= i")
        raise CheckFailure(f"causal_mask({n}) is wrong: {hint}.\nGot:\n{got.int()}")
    note_value_checked()     # every mask equals the judge's own torch.tril
    got = call(causal_mask, 3, device="meta", name="causal_mask(3, device='meta')")
    if not isinstance(got, torch.Tensor) or got.device.type != "meta":
        raise CheckFailure("causal_mask(3, device='meta') did not create the mask on the "
                           "requested device: pass device=device to torch.ones.")


def _reference_attention(x, w_qkv, w_proj, heads, mode="causal", scale=None):
    """Causal multi-head attention with PyTorch's SDPA (mode 'causal'), or a classic mistake."""
    b, n, d = x.shape
    dk = d // heads
    q, k, v = (x @ w_qkv.T).split(d, dim=2)
    q, k, v = (t.view(b, n, heads, dk).transpose(1, 2) for t in (q, k, v))   # (B, H, N, dk)
    scale_val = 1 / math.sqrt(dk) if scale is None else scale
    if mode == "causal":
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale_val)
    elif mode == "none":
        y = F.scaled_dot_product_attention(q, k, v, scale=scale_val)
    elif mode == "zero-after":
        w = torch.softmax(q @ k.transpose(-2, -1) * scale_val, dim=-1)
        y = w.masked_fill(~_tril(n, 0), 0.0) @ v
    elif mode == "zero-before":
        s = (q @ k.transpose(-2, -1) * scale_val).masked_fill(~_tril(n, 0), 0.0)
        y = torch.softmax(s, dim=-1) @ v
    elif mode == "off-by-one":
        s = (q @ k.transpose(-2, -1) * scale_val).masked_fill(~_tril(n, 1), float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
    elif mode == "no-head-transpose":
        q, k, v = ((x @ w_qkv.T).split(d, dim=2))
        q, k, v = (t.reshape(b, heads, n, dk) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale_val)
        return y.transpose(1, 2).reshape(b, n, d) @ w_proj.T
    elif mode == "no-merge-transpose":
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale_val)
        return y.reshape(b, n, d) @ w_proj.T          # (B, H, N, dk) read as (B, N, D)
    else:  # pragma: no cover
        raise ValueError(mode)
    return y.transpose(1, 2).reshape(b, n, d) @ w_proj.T


def _repair_masks(module: nn.Module, n_ctx: int) -> bool:
    """Give every bool (n_ctx, n_ctx) buffer of ``module`` that is not the causal mask the
    causal mask's values; True when one changed."""
    right = _tril(n_ctx, 0)
    changed = False
    for name, buf in list(module.named_buffers()):
        if buf.dtype != torch.bool or tuple(buf.shape) != (n_ctx, n_ctx) \
                or torch.equal(buf, right):
            continue
        *path, leaf = name.split(".")
        owner = module
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, leaf, right.clone())
        changed = True
    return changed


def _with_right_mask(body, module: nn.Module, n_ctx: int) -> None:
    """``body()``; when it fails and ``module`` holds a causal-mask buffer with wrong values
    (``causal_mask``'s mistake, graded by day12_causal_mask_values), ``body()`` again with
    the right values in place. A wrong ``causal_mask`` costs its own test only; a learner
    whose code stores the mask in another convention keeps the first failure."""
    try:
        body()
        return
    except CheckFailure as exc:
        first = exc
    if not _repair_masks(module, n_ctx):
        raise first
    try:
        body()
    except CheckFailure:
        raise first from None


def _attention_right(attn: nn.Module, heads: int) -> bool:
    """Whether a CausalSelfAttention inside a model computes causal attention with its own
    weights (what day12_attention_matches_sdpa grades)."""
    w_qkv, w_proj = attn.qkv.weight.detach().double(), attn.proj.weight.detach().double()
    x = torch.randn(2, 5, w_proj.shape[0], generator=rng(17), dtype=torch.float64)
    got = attn(x.to(attn.proj.weight.dtype))
    return matches(got, _reference_attention(x, w_qkv, w_proj, heads), rtol=1e-4, atol=1e-5)


def _attention_first(modules, heads: int):
    """``upstream`` for a check of a model built on the learner's CausalSelfAttention."""
    return upstream(("your CausalSelfAttention fails day12_attention_matches_sdpa",
                     lambda: all(_attention_right(m.attn, heads) for m in modules)))


@value_check
def check_attention_matches_sdpa(CausalSelfAttention) -> None:
    """Same weights, float64: equal to F.scaled_dot_product_attention(is_causal=True)."""
    d, heads, n_ctx, n = 24, 3, 10, 7
    attn = expect_module(CausalSelfAttention, d, heads, n_ctx)
    qkv, proj = getattr(attn, "qkv", None), getattr(attn, "proj", None)
    if not isinstance(qkv, nn.Linear) or (qkv.in_features, qkv.out_features) != (d, 3 * d):
        raise CheckFailure("CausalSelfAttention needs `self.qkv = nn.Linear(d_model, 3 * d_model, "
                           f"bias=False)`; got {shown(qkv)}.")
    if not isinstance(proj, nn.Linear) or (proj.in_features, proj.out_features) != (d, d):
        raise CheckFailure("CausalSelfAttention needs `self.proj = nn.Linear(d_model, d_model, "
                           f"bias=False)`; got {shown(proj)}.")
    if qkv.bias is not None or proj.bias is not None:
        raise CheckFailure("qkv and proj must have no bias: nn.Linear(..., bias=False).")
    buffers = dict(attn.named_buffers())
    if not any(b.dtype == torch.bool or b.shape[-2:] == (n_ctx, n_ctx) for b in buffers.values()):
        raise CheckFailure("the causal mask is not a registered buffer: use "
                           "self.register_buffer('mask', causal_mask(n_ctx)) so that it moves "
                           "with model.to(device) and is saved with the model.")
    g = rng(12)
    attn = attn.double()
    w_qkv = torch.randn(3 * d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    w_proj = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    with torch.no_grad():
        qkv.weight.copy_(w_qkv)
        proj.weight.copy_(w_proj)
    x = torch.randn(2, n, d, generator=g, dtype=torch.float64)
    _with_right_mask(lambda: _attention_values(attn, x, w_qkv, w_proj, heads), attn, n_ctx)


def _attention_values(attn, x, w_qkv, w_proj, heads) -> None:
    d, n = x.shape[-1], x.shape[1]
    with torch.no_grad():
        out = call(attn, x, name="CausalSelfAttention(24, 3, n_ctx=10)(x of shape (2, 7, 24))")
    expect_tensor(out, "attention output", shape=(2, n, d))
    expected = _reference_attention(x, w_qkv, w_proj, heads)
    candidates = {
        "no causal mask: every position attends to the future. Fill the scores above the "
        "diagonal with -inf": _reference_attention(x, w_qkv, w_proj, heads, "none"),
        "you zeroed the weights after the softmax: fill the masked scores with -inf before the "
        "softmax so that each row still sums to 1":
            _reference_attention(x, w_qkv, w_proj, heads, "zero-after"),
        "masked scores were filled with 0, not -inf: fill them with -inf before the softmax":
            _reference_attention(x, w_qkv, w_proj, heads, "zero-before"),
        "your mask is off by one: each position sees one step into the future":
            _reference_attention(x, w_qkv, w_proj, heads, "off-by-one"),
        "you scaled by sqrt(d_model); scale by sqrt(d_k) = sqrt(d_model // num_heads) per head":
            _reference_attention(x, w_qkv, w_proj, heads, scale=1 / math.sqrt(d)),
        "you did not scale the scores: divide by sqrt(d_k)":
            _reference_attention(x, w_qkv, w_proj, heads, scale=1.0),
        "heads were split with view(B, H, N, d_k) instead of view(B, N, H, d_k).transpose(1, 2)":
            _reference_attention(x, w_qkv, w_proj, heads, "no-head-transpose"),
        "heads were merged with reshape(B, N, D) straight from (B, H, N, d_k): transpose(1, 2) "
        "back to (B, N, H, d_k) first (then .contiguous().view(B, N, D)); without it, "
        "positions mix, which looks like seeing the future":
            _reference_attention(x, w_qkv, w_proj, heads, "no-merge-transpose"),
    }
    compare(out, expected, "CausalSelfAttention output", candidates, rtol=1e-7, atol=1e-9)
    # A single token (N = 1) must attend only to itself: output = proj(v).
    x1 = x[:1, :1]
    with torch.no_grad():
        out1 = call(attn, x1, name="CausalSelfAttention on one token")
    v1 = (x1 @ w_qkv.T).split(d, dim=2)[2]
    compare(out1, v1 @ w_proj.T, "output for a single token", rtol=1e-7, atol=1e-9,
            hint="one token attends only to itself, so its output is proj(v).")


@value_check
def check_block_pre_ln(Block) -> None:
    """Block(x) == x + attn(ln1(x)), then + mlp(ln2(.)), on the judge's weights."""
    d, heads, n_ctx = 16, 2, 12
    block = expect_module(Block, d, heads, n_ctx)
    for name in ("ln1", "attn", "ln2", "mlp"):
        if not isinstance(getattr(block, name, None), nn.Module):
            raise CheckFailure(f"Block needs a sub-module `self.{name}`.")
    mlp = block.mlp
    layers = list(mlp) if isinstance(mlp, nn.Sequential) else []
    linears = [m for m in layers if isinstance(m, nn.Linear)]
    if (len(linears) != 2 or (linears[0].in_features, linears[0].out_features) != (d, 4 * d)
            or (linears[1].in_features, linears[1].out_features) != (4 * d, d)
            or not any(isinstance(m, nn.GELU) for m in layers)):
        raise CheckFailure("block.mlp should be nn.Sequential(nn.Linear(D, 4D), nn.GELU(), "
                           f"nn.Linear(4D, D)); got {shown(mlp)}.")
    block = block.double().eval()
    with _attention_first([block], heads):
        _with_right_mask(lambda: _block_values(block, d), block, n_ctx)


def _mlp_linears(w: dict, prefix: str) -> list[str]:
    """The prefixes of the two Linear layers of ``prefix + "mlp."`` (nn.Sequential indices)."""
    idx = sorted({int(k[len(prefix) + 4:].split(".")[0]) for k in w
                  if k.startswith(prefix + "mlp.") and k.endswith(".weight")})
    return [f"{prefix}mlp.{i}." for i in idx]


def _block_ref(w: dict, prefix: str, x: torch.Tensor, heads: int,
               variant: str = "", gelu: str = "none") -> torch.Tensor:
    """Day 12's Pre-LN block on the judge's weights: x + attn(ln1(x)), then + mlp(ln2(.));
    ``variant`` makes a classic mistake ("post", "no-res", "ln1-twice"). ``gelu``: "none"
    (exact, ``nn.GELU()``) or "tanh" (GPT-2's approximation), both right."""
    first, second = _mlp_linears(w, prefix)

    def ln(name, t):
        return ref.layer_norm(w, f"{prefix}{name}.", t)

    def attn(t):
        return _reference_attention(t, w[f"{prefix}attn.qkv.weight"],
                                    w[f"{prefix}attn.proj.weight"], heads)

    def mlp(t):
        return ref.linear(w, second, F.gelu(ref.linear(w, first, t), approximate=gelu))

    if variant == "post":
        h = ln("ln1", x + attn(x))
        return ln("ln2", h + mlp(h))
    if variant == "no-res":
        return mlp(ln("ln2", attn(ln("ln1", x))))
    h = x + attn(ln("ln1", x))
    return h + mlp(ln("ln1" if variant == "ln1-twice" else "ln2", h))


def _block_values(block, d) -> None:
    w = randomize(block, 13)
    x = torch.randn(3, 5, d, generator=rng(18), dtype=torch.float64)
    with torch.no_grad():
        out = call(block, x, name="Block(16, 2, 12)(x of shape (3, 5, 16))")
        expected = _block_ref(w, "", x, 2)
        tanh = _block_ref(w, "", x, 2, gelu="tanh")
        if matches(out, tanh, rtol=1e-7, atol=1e-9):   # GPT-2's own GELU is right too
            expected = tanh
        candidates = {
            "this is Post-LN, ln(x + sublayer(x)): normalise the sub-layer's input instead, "
            "x + attn(ln1(x))": _block_ref(w, "", x, 2, "post"),
            "the residual connections are missing: add the input back, x = x + attn(ln1(x))":
                _block_ref(w, "", x, 2, "no-res"),
            "you used ln1 twice: the MLP branch must use ln2": _block_ref(w, "", x, 2,
                                                                          "ln1-twice"),
        }
    compare(out, expected, "Block output", candidates, rtol=1e-7, atol=1e-9)


def _tinygpt_ref(w: dict, idx: torch.Tensor, heads: int, gelu: str = "none") -> torch.Tensor:
    """TinyGPT's logits (B, N, vocab) on the judge's weights: tok + pos, the blocks, ln_f,
    head (``gelu`` as in :func:`_block_ref`)."""
    n = idx.shape[1]
    h = F.embedding(idx, w["tok.weight"]) + w["pos.weight"][:n]            # (B, N, D)
    for i in range(len({k.split(".")[1] for k in w if k.startswith("blocks.")})):
        h = _block_ref(w, f"blocks.{i}.", h, heads, gelu=gelu)
    return F.linear(ref.layer_norm(w, "ln_f.", h), w["head.weight"])       # (B, N, vocab)


def _double(model: nn.Module) -> nn.Module:
    return model.double().eval()


@value_check
def check_tinygpt_causal(TinyGPT) -> None:
    """Changing tokens after t leaves logits at <= t unchanged (float64, atol 1e-9), and the
    logits equal the contract (tok + pos, Pre-LN blocks, ln_f, head) on the judge's weights."""
    vocab, n, t = 13, 11, 4
    model = _double(expect_module(TinyGPT, vocab, d_model=32, num_heads=4, num_layers=2,
                                  n_ctx=16))
    with _attention_first(getattr(model, "blocks", []), 4):
        _with_right_mask(lambda: _causal(model, vocab, n, t), model, 16)


def _causal(model, vocab, n, t) -> None:
    w = randomize(model, 19)
    g = rng(14)
    idx = torch.randint(0, vocab, (2, n), generator=g)
    changed = idx.clone()
    changed[:, t + 1:] = torch.randint(0, vocab, (2, n - t - 1), generator=g)
    changed[:, t + 1] = (idx[:, t + 1] + 1) % vocab
    with torch.no_grad():
        a = call(model, idx, name="TinyGPT(13, d_model=32, ...)(idx of shape (2, 11))")
        b = call(model, changed, name="TinyGPT on the changed sequence")
    expect_tensor(a, "TinyGPT logits", shape=(2, n, vocab), dtype=torch.float64)
    diff = (a - b).abs().amax(dim=(0, 2))                 # (N,)
    leaked = [i for i in range(t + 1) if diff[i] > 1e-9]
    if leaked:
        raise CheckFailure(
            f"the logits at position(s) {leaked} changed when only tokens after position {t} "
            f"changed (max change {float(diff[:t + 1].max()):.2e}): your model looks at the "
            "future. Is the causal mask applied in every block, sliced to [:N, :N], and filled "
            "with -inf before the softmax?")
    if float(diff[t + 1:].max()) < 1e-9:
        raise CheckFailure("changing tokens after position t changed no logit at all after t: "
                           "does forward use idx (tok embedding) at every position?")
    with torch.no_grad():
        expected = _tinygpt_ref(w, idx, 4)
        tanh = _tinygpt_ref(w, idx, 4, gelu="tanh")
    if matches(a, tanh, rtol=1e-6, atol=1e-8):   # GPT-2's own GELU is right too
        expected = tanh
    compare(a, expected, "TinyGPT logits", rtol=1e-6, atol=1e-8,
            hint="the contract: tok(idx) + pos(arange(N)), the blocks, ln_f, then head.")


def _expected_count(vocab: int, d: int, layers: int, n_ctx: int) -> int:
    return layers * (12 * d * d + 9 * d) + 2 * vocab * d + n_ctx * d + 2 * d


@observed_check
def check_tinygpt_parameters(TinyGPT) -> None:
    """3,221,504 parameters for TinyGPT(65); the formula for another configuration."""
    model = expect_module(TinyGPT, 65)
    for name in ("tok", "pos", "blocks", "ln_f", "head"):
        if not isinstance(getattr(model, name, None), nn.Module):
            raise CheckFailure(f"TinyGPT needs a sub-module `self.{name}`.")
    if not isinstance(model.head, nn.Linear) or model.head.bias is not None:
        raise CheckFailure("head must be nn.Linear(d_model, vocab_size, bias=False).")
    for (vocab, d, heads, layers, n_ctx) in ((65, 256, 4, 4, 128), (50, 48, 6, 3, 20)):
        if (vocab, d) != (65, 256):
            model = expect_module(TinyGPT, vocab, d_model=d, num_heads=heads, num_layers=layers,
                                  n_ctx=n_ctx)
        got = sum(p.numel() for p in model.parameters())
        want = _expected_count(vocab, d, layers, n_ctx)
        if got == want:
            continue
        delta = got - want
        hints = {
            vocab * d: "you have one vocab_size x d_model table too many",
            -vocab * d: "you tied the head to the token embedding; Day 12's TinyGPT keeps them "
                        "separate",
            vocab: "the head has a bias: use bias=False",
            layers * 4 * d: "qkv and proj have biases: use bias=False",
            layers * 3 * d: "qkv has a bias: use bias=False",
            layers * d: "proj has a bias: use bias=False",
            -2 * d: "the final LayerNorm ln_f is missing",
            -n_ctx * d: "the position embedding is missing",
            -layers * 5 * d: "the MLP's Linear layers lost their biases (they keep them)",
        }
        hint = hints.get(delta, "recount with the table: 12D² + 9D per block, plus V·D (tok), "
                                "n_ctx·D (pos), 2D (ln_f) and V·D (head)")
        raise CheckFailure(
            f"TinyGPT({vocab}, d_model={d}, num_heads={heads}, num_layers={layers}, "
            f"n_ctx={n_ctx}) has {got:,} parameters, expected {want:,} "
            f"(difference {delta:+,}): {hint}.")


@observed_check
def check_tinygpt_n_ctx(TinyGPT) -> None:
    """N == n_ctx works; N == n_ctx + 1 raises ValueError naming both numbers."""
    vocab, n_ctx = 7, 9
    model = expect_module(TinyGPT, vocab, d_model=16, num_heads=2, num_layers=1, n_ctx=n_ctx)
    with _attention_first(getattr(model, "blocks", []), 2):
        _with_right_mask(lambda: _n_ctx(model, vocab, n_ctx), model, n_ctx)


def _n_ctx(model, vocab, n_ctx) -> None:
    g = rng(15)
    with torch.no_grad():
        out = call(model, torch.randint(0, vocab, (1, n_ctx), generator=g),
                   name=f"TinyGPT with exactly n_ctx = {n_ctx} tokens")
    expect_tensor(out, "logits for N = n_ctx", shape=(1, n_ctx, vocab))
    too_long = torch.randint(0, vocab, (2, n_ctx + 3), generator=g)
    try:
        with torch.no_grad():
            model(too_long)
    except ValueError as exc:
        text = str(exc)
        if str(n_ctx + 3) not in text or str(n_ctx) not in text.replace(str(n_ctx + 3), ""):
            raise CheckFailure(f"the ValueError for 12 tokens with n_ctx = 9 should name both "
                               f"numbers; its message was {shown(text)}.") from None
        return
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
        raise CheckFailure(
            f"12 tokens with n_ctx = 9 raised {type(exc).__name__}: {exc}; check the length "
            "first in forward and raise ValueError(f'sequence length {N} exceeds n_ctx = "
            "{self.n_ctx}').") from None
    raise CheckFailure("12 tokens with n_ctx = 9 raised no error: raise a ValueError naming both "
                       "numbers (the position table has only n_ctx rows).")


@observed_check
def check_tinygpt_any_device(TinyGPT) -> None:
    """No tensor created on the wrong device (CUDA when available, else 'meta')."""
    model = expect_module(TinyGPT, 11, d_model=16, num_heads=2, num_layers=2, n_ctx=8)
    idx = torch.randint(0, 11, (2, 6), generator=rng(16))
    with _attention_first(getattr(model, "blocks", []), 2):
        check_runs_on_any_device(model.eval(), lambda: (idx,), "TinyGPT")
