"""Day 12 written another way: the mask from an arange comparison, attention with einsum,
torch.where and a hand-written stable softmax, heads split by one reshape + permute of the fused
output, the block as a loop over (norm, sub-layer) pairs, positions by slicing the table."""

# %% day12_causal_mask
def causal_mask(seq_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean causal mask: entry [i, j] is True when query i may attend to key j (j <= i).

    Args:
        seq_len: number of positions N.
        device: where to create the mask (default: the CPU).

    Returns:
        A bool tensor of shape (N, N), True on and below the diagonal.
    """
    positions = torch.arange(seq_len, device=device)
    return positions.unsqueeze(1) >= positions.unsqueeze(0)    # [i, j] = (i >= j)


# %% day12_causal_self_attention
class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position i only sees positions j <= i.

    Args:
        d_model: width D of the input and output; must be divisible by num_heads.
        num_heads: number of heads H; each head has width d_k = D // H.
        n_ctx: the longest sequence accepted; the mask buffer is (n_ctx, n_ctx).

    Attributes:
        qkv: nn.Linear(D, 3D, bias=False), the fused query/key/value projection.
        proj: nn.Linear(D, D, bias=False), the output projection.
        mask: bool buffer (n_ctx, n_ctx) from causal_mask.

    forward(x): x (B, N, D) with N <= n_ctx -> (B, N, D).
    """

    def __init__(self, d_model: int, num_heads: int, n_ctx: int) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model = {d_model} is not divisible by num_heads = {num_heads}")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.register_buffer("mask", causal_mask(n_ctx))
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h, dk = self.num_heads, self.head_dim
        # (B, N, 3D) = (B, N, [q|k|v], H, d_k) -> (3, B, H, N, d_k)
        q, k, v = self.qkv(x).reshape(b, n, 3, h, dk).permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(dk)
        allowed = self.mask[:n, :n]
        scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))
        # softmax by hand: the diagonal is always allowed, so every row max is finite
        shifted = scores - scores.amax(dim=-1, keepdim=True)
        expo = shifted.exp()
        weights = expo / expo.sum(dim=-1, keepdim=True)
        mixed = torch.einsum("bhqk,bhkd->bqhd", weights, v)     # heads merged below
        return self.proj(mixed.reshape(b, n, d))


# %% day12_block
class Block(nn.Module):
    """One Pre-LN Transformer decoder block.

    Attributes: ln1, attn (CausalSelfAttention), ln2, mlp (Linear(D, 4D), GELU, Linear(4D, D)).

    forward(x): x (B, N, D) -> (B, N, D).
    """

    def __init__(self, d_model: int, num_heads: int, n_ctx: int) -> None:
        super().__init__()
        hidden = 4 * d_model
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, num_heads, n_ctx)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(),
                                 nn.Linear(hidden, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for norm, sublayer in ((self.ln1, self.attn), (self.ln2, self.mlp)):
            x = x + sublayer(norm(x))
        return x


# %% day12_tinygpt
class TinyGPT(nn.Module):
    """A small decoder-only Transformer (GPT-2 style, Pre-LN, learned positions).

    Args:
        vocab_size: V, the number of distinct tokens.
        d_model: D, the width of the residual stream.
        num_heads: H, attention heads per block.
        num_layers: number of blocks L.
        n_ctx: the longest sequence accepted.

    Attributes: tok, pos, blocks, ln_f, head, n_ctx.

    forward(idx): idx (B, N) long with N <= n_ctx -> logits (B, N, V).
    Raises ValueError (naming N and n_ctx) when N > n_ctx.
    """

    def __init__(self, vocab_size: int, d_model: int = 256, num_heads: int = 4,
                 num_layers: int = 4, n_ctx: int = 128) -> None:
        super().__init__()
        self.n_ctx = n_ctx
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(n_ctx, d_model)
        self.blocks = nn.ModuleList(Block(d_model, num_heads, n_ctx) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        # GPT-2's initialisation: small normal weights, zero biases
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        length = idx.shape[-1]
        if length > self.n_ctx:
            raise ValueError(f"sequence length {length} exceeds n_ctx = {self.n_ctx}")
        x = self.tok(idx) + self.pos.weight[:length]       # (B, N, D) + (N, D)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))
