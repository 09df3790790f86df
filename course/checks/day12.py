"""Visible checks for Day 12: quick, friendly, on small shapes (the hidden tests use others)."""

from __future__ import annotations

import torch

from course.checking import CheckFailure, call, expect_tensor, passed


def check_causal_mask(causal_mask) -> None:
    """A 4 x 4 mask: bool, True on and below the diagonal."""
    got = expect_tensor(call(causal_mask, 4), "causal_mask(4)", shape=(4, 4))
    if got.dtype != torch.bool:
        raise CheckFailure(f"causal_mask(4) has dtype {got.dtype}; return a bool tensor.")
    want = torch.ones(4, 4, dtype=torch.bool).tril()
    if not torch.equal(got, want):
        if torch.equal(got, want.tril(-1)):
            raise CheckFailure("the diagonal is False: a position must see itself (diagonal=0).")
        raise CheckFailure(f"causal_mask(4) should be\n{want.int()}\ngot\n{got.int()}")
    passed("causal_mask(4) is the lower triangle, diagonal included")


def check_causal_self_attention(CausalSelfAttention) -> None:
    """Shape (2, 5, 16) -> (2, 5, 16); the first position's output ignores later tokens."""
    attn = call(CausalSelfAttention, 16, 4, 8, name="CausalSelfAttention(16, 4, 8)")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 16, generator=g)
    with torch.no_grad():
        out = expect_tensor(call(attn, x, name="attention forward"), "output", shape=(2, 5, 16))
        x2 = x.clone()
        x2[:, 3:] = torch.randn(2, 2, 16, generator=g)
        out2 = call(attn, x2, name="attention forward")
    if not torch.allclose(out[:, :3], out2[:, :3], atol=1e-5):
        raise CheckFailure("changing positions 3 and 4 changed the output at positions 0-2: "
                           + _why_future(attn, x, out, 4))
    passed("CausalSelfAttention: (2, 5, 16) -> (2, 5, 16), and no position sees the future")


def _why_future(attn, x: torch.Tensor, out: torch.Tensor, heads: int) -> str:
    """Which mistake makes early outputs depend on later tokens: computed with the layer's own
    ``qkv`` and ``proj`` weights (the course's contract) when it has them."""
    import torch.nn.functional as F

    unmasked = ("the causal mask is not applied (fill scores above the diagonal with -inf "
                "before the softmax).")
    qkv, proj = getattr(attn, "qkv", None), getattr(attn, "proj", None)
    if not (isinstance(getattr(qkv, "weight", None), torch.Tensor)
            and isinstance(getattr(proj, "weight", None), torch.Tensor)):
        return unmasked
    b, n, d = x.shape
    with torch.no_grad():
        q, k, v = qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, n, heads, d // heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)        # (B, H, N, d_k)
        merged_wrong = proj(y.reshape(b, n, d))                             # heads not moved
    if torch.allclose(out, merged_wrong, atol=1e-5):
        return ("the heads were merged with reshape(B, N, D) straight from (B, H, N, d_k), "
                "which mixes positions (it looks like seeing the future): transpose(1, 2) back "
                "to (B, N, H, d_k) first, then .contiguous().view(B, N, D).")
    return unmasked


def check_block(Block) -> None:
    """Shape preserved, and the block is not the identity."""
    block = call(Block, 16, 4, 8, name="Block(16, 4, 8)")
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = expect_tensor(call(block, x, name="Block forward"), "Block output", shape=(2, 5, 16))
    if torch.allclose(out, x):
        raise CheckFailure("Block returned its input unchanged: add attn(ln1(x)) and "
                           "mlp(ln2(x)) to the residual stream.")
    passed("Block: (2, 5, 16) -> (2, 5, 16)")


def check_tinygpt(TinyGPT) -> None:
    """Logits shape for a small configuration, and the 3,221,504 health check."""
    model = call(TinyGPT, 20, d_model=32, num_heads=4, num_layers=2, n_ctx=16,
                 name="TinyGPT(20, d_model=32, num_heads=4, num_layers=2, n_ctx=16)")
    idx = torch.randint(0, 20, (3, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expect_tensor(call(model, idx, name="TinyGPT forward"), "logits", shape=(3, 10, 20))
    n = sum(p.numel() for p in call(TinyGPT, 65, name="TinyGPT(65)").parameters())
    if n != 3_221_504:
        raise CheckFailure(f"TinyGPT(65) has {n:,} parameters, expected 3,221,504; see the "
                           "counting table further down.")
    passed("TinyGPT: logits (3, 10, 20); TinyGPT(65) has 3,221,504 parameters")


def check_tinygpt_runs(TinyGPT) -> None:
    """What Days 13-14 need from Day 12's class: (B, N, V) logits, and causal.

    Changing the tokens after position 4 must leave the logits at positions 0-4 unchanged.
    """
    model = call(TinyGPT, 11, d_model=16, num_heads=2, num_layers=1, n_ctx=8,
                 name="TinyGPT(11, d_model=16, num_heads=2, num_layers=1, n_ctx=8)").eval()
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(0))
    changed = idx.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 11                        # (2, 8): future edited
    with torch.no_grad():
        a = expect_tensor(call(model, idx, name="TinyGPT forward"), "logits", shape=(2, 8, 11))
        b = call(model, changed, name="TinyGPT forward")
    if not torch.allclose(a[:, :5], b[:, :5], atol=1e-5):
        raise CheckFailure("TinyGPT is not causal: changing tokens 5-7 changed the logits at "
                           "positions 0-4. Mask the attention scores above the diagonal.")
    passed("TinyGPT: logits (2, 8, 11), and later tokens do not change earlier logits")
