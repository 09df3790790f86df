"""Visible checks for Day 14: small, friendly examples (the hidden tests use others)."""

from __future__ import annotations

import torch
import torch.nn as nn

from course.checking import CheckFailure, assert_close, call, expect_tensor, passed


def check_rmsnorm(RMSNorm) -> None:
    """(2, 4) input: each row rescaled to root mean square 1 (gain 1, tiny eps)."""
    norm = call(RMSNorm, 4, name="RMSNorm(4)")
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [-2.0, 0.0, 2.0, 0.0]])
    out = expect_tensor(call(norm, x, name="RMSNorm forward"), "RMSNorm(x)", shape=(2, 4))
    assert_close(out.pow(2).mean(-1), torch.ones(2), "mean square of each output row", rtol=1e-4,
                 atol=1e-4, hint="divide by sqrt(mean(x²) + eps) over the last dimension.")
    assert_close(out, nn.RMSNorm(4, eps=1e-6)(x), "RMSNorm(x)", rtol=1e-5, atol=1e-6)
    passed("RMSNorm: rows rescaled to unit root mean square, equal to torch.nn.RMSNorm")


def check_swiglu(SwiGLU) -> None:
    """Shapes and parameter count for d_model 8, d_ff 12."""
    mlp = call(SwiGLU, 8, 12, name="SwiGLU(8, 12)")
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0))
    expect_tensor(call(mlp, x, name="SwiGLU forward"), "SwiGLU(x)", shape=(2, 3, 8))
    n = sum(p.numel() for p in mlp.parameters())
    if n != 3 * 8 * 12:
        raise CheckFailure(f"SwiGLU(8, 12) has {n} parameters, expected 3 x 8 x 12 = 288 "
                           "(three matrices, no biases).")
    passed("SwiGLU: (2, 3, 8) -> (2, 3, 8), 288 parameters")


def check_rope(RotaryEmbedding) -> None:
    """Position 0 is the identity; a rotation keeps the norm."""
    rope = call(RotaryEmbedding, 4, 10, name="RotaryEmbedding(4, 10)")
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]]])     # (1, T=2, 4)
    q, k = call(rope.apply_rope, x, x, torch.tensor([0, 0]), name="apply_rope at position 0")
    assert_close(q, x, "q at position 0", hint="position 0 must leave q unchanged.")
    q, _ = call(rope.apply_rope, x, x, torch.tensor([1, 5]), name="apply_rope")
    assert_close(q.norm(dim=-1), x.norm(dim=-1), "norms after rotation", rtol=1e-5, atol=1e-6)
    expected = torch.tensor([torch.cos(torch.tensor(1.0)), 0.0, torch.sin(torch.tensor(1.0)), 0.0])
    assert_close(q[0, 0], expected, "e_0 rotated to position 1", rtol=1e-5, atol=1e-6,
                 hint="half-split pairs: dimension 0 pairs with dimension head_dim/2 = 2, and "
                      "theta_0 = 1, so e_0 at position 1 becomes (cos 1, 0, sin 1, 0).")
    passed("RotaryEmbedding: identity at 0, norms kept, dimension 0 pairs with dimension 2")


def check_cached_attention(CachedCausalSelfAttention) -> None:
    """Prefill 3 tokens + decode 1 equals a full pass over 4 tokens."""
    torch.manual_seed(0)
    attn = call(CachedCausalSelfAttention, 8, 2, 16, name="CachedCausalSelfAttention(8, 2, 16)")
    x = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, (k, v) = call(attn, x, name="forward without a cache")
        expect_tensor(full, "output", shape=(1, 4, 8))
        expect_tensor(k, "cached k", shape=(1, 2, 4, 4))
        _, cache = call(attn, x[:, :3], name="prefill of 3 tokens")
        last, cache = call(attn, x[:, 3:], cache, name="decoding one token with the cache")
    expect_tensor(cache[0], "cached k after 4 tokens", shape=(1, 2, 4, 4))
    assert_close(last[:, 0], full[:, 3], "output of the cached step", rtol=1e-4, atol=1e-5,
                 hint="rotate the new token for position `past`, append its k and v, and let it "
                      "attend to every cached key.")
    passed("CachedCausalSelfAttention: prefill + one cached step equals the full pass")


def check_qk_norm(CachedCausalSelfAttention) -> None:
    """With qk_norm=True, queries and keys 10 times larger give the same output."""
    torch.manual_seed(0)
    attn = call(CachedCausalSelfAttention, 16, 2, 8, qk_norm=True).eval()
    for name in ("q_norm", "k_norm"):
        if tuple(getattr(getattr(attn, name, None), "weight", torch.empty(0)).shape) != (8,):
            raise CheckFailure(f"with qk_norm=True, self.{name} should be RMSNorm(d_k = 8)")
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        before, _ = attn(x)
        attn.qkv.weight[:32] *= 10                     # rows of W_q and W_k: (32, 16)
        after, _ = attn(x)
    assert_close(after, before, "output after scaling W_q and W_k by 10", rtol=1e-4, atol=1e-5,
                 hint="apply q, k = self.q_norm(q), self.k_norm(k) after the head split")
    passed("with qk_norm=True, queries and keys 10x larger give the same output: the norms fix "
           "the scale of the logits")


def check_training_memory(training_memory, lora_params) -> None:
    """A 1,000-parameter model in float32 with AdamW; one LoRA adapter."""
    out = call(training_memory, 1000, 1000)
    want = {"weights": 4000, "gradients": 4000, "optimizer": 8000, "total": 16000}
    if out != want:
        raise CheckFailure(f"training_memory(1000, 1000) should be {want}, got {out!r}")
    frozen = call(training_memory, 1000, 10, 2)
    if frozen.get("gradients") != 20 or frozen.get("optimizer") != 40:
        raise CheckFailure("with 10 trainable of 1,000 parameters in 2 bytes, gradients are 20 "
                           f"bytes and optimizer states 40, got {frozen!r}")
    if call(lora_params, 768, 768, 8) != 12288:
        raise CheckFailure("lora_params(768, 768, 8) should be 8 * (768 + 768) = 12,288")
    passed("AdamW in float32 holds 4 copies of the model; LoRA r = 8 on a 768 x 768 matrix trains "
           "12,288 values")


def check_gqa(GroupedQueryAttention) -> None:
    """8 query heads sharing 2 key/value heads: cache (1, 2, T, 2); prefill + decode = full."""
    torch.manual_seed(0)
    attn = call(GroupedQueryAttention, 16, 8, 2, 16,
                name="GroupedQueryAttention(16, 8, 2, 16)").eval()
    kv = getattr(getattr(attn, "kv_proj", None), "weight", torch.empty(0))
    if tuple(kv.shape) != (8, 16):
        raise CheckFailure("kv_proj should map d_model 16 to 2 * num_kv_heads * d_k = 2 * 2 * 2 "
                           f"= 8 outputs (weight (8, 16)), got weight {tuple(kv.shape)}")
    x = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, (k, v) = call(attn, x, name="forward without a cache")
        expect_tensor(full, "output", shape=(1, 5, 16))
        expect_tensor(k, "cached k", shape=(1, 2, 5, 2))
        expect_tensor(v, "cached v", shape=(1, 2, 5, 2))
        _, cache = call(attn, x[:, :4], name="prefill of 4 tokens")
        last, cache = call(attn, x[:, 4:], cache, name="decoding one token with the cache")
    expect_tensor(cache[0], "cached k after 5 tokens", shape=(1, 2, 5, 2))
    assert_close(last[:, 0], full[:, 4], "output of the cached step", rtol=1e-4, atol=1e-5,
                 hint="cache the 2 shared heads, then repeat them for the 8 query heads.")
    passed("GroupedQueryAttention: the cache holds 2 heads, not 8; prefill + one cached step "
           "equals the full pass")


def check_modern_gpt(ModernGPT) -> None:
    """Logits shape; head tied to the embedding."""
    model = call(ModernGPT, 20, d_model=32, num_heads=4, num_layers=2, max_len=16,
                 name="ModernGPT(20, d_model=32, num_heads=4, num_layers=2, max_len=16)")
    idx = torch.randint(0, 20, (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = call(model, idx, name="ModernGPT forward")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("forward should return (logits, new_cache).")
    expect_tensor(out[0], "logits", shape=(2, 7, 20))
    if getattr(getattr(model, "head", None), "weight", None) is not getattr(
            getattr(model, "tok", None), "weight", 0):
        raise CheckFailure("tie the head to the embedding: self.head.weight = self.tok.weight.")
    passed("ModernGPT: logits (2, 7, 20), head tied to the embedding")


def check_generate_with_cache(generate_with_cache, ModernGPT) -> None:
    """With your ModernGPT: the same tokens as recomputing, for 10 new tokens."""
    torch.manual_seed(3)
    model = call(ModernGPT, 30, d_model=32, num_heads=4, num_layers=2, max_len=32,
                 name="ModernGPT(30, ...)").eval()
    prompt = torch.randint(0, 30, (2, 4), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = call(generate_with_cache, model, prompt, 10, name="generate_with_cache")
        idx = prompt
        for _ in range(10):
            idx = torch.cat([idx, model(idx)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    expect_tensor(got, "generated tokens", shape=(2, 14), dtype=torch.long)
    if not torch.equal(got, idx):
        raise CheckFailure(f"cached generation {got[0].tolist()} differs from recomputation "
                           f"{idx[0].tolist()}: feed only the newest token with the cache.")
    passed("generate_with_cache: 10 tokens identical to recomputing the whole sequence")
