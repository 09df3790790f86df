"""Day 12, a second way: the mask as the complement of triu(1), attention by matmul with a float
bias of -inf added and torch.softmax, q/k/v by chunk, the MLP built by Sequential.append, the block
written in two lines, positions through torch.arange on idx's device."""

# %% day12_causal_mask
def causal_mask(seq_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean causal mask: entry [i, j] is True when query i may attend to key j (j <= i).

    Args:
        seq_len: number of positions N.
        device: where to create the mask (default: the CPU).

    Returns:
        A bool tensor of shape (N, N), True on and below the diagonal.
    """
    future = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu(diagonal=1)
    return ~future


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
        assert d_model % num_heads == 0, "d_model must be divisible by num_heads"
        self.d_model, self.n_heads = d_model, num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.register_buffer("mask", causal_mask(n_ctx), persistent=True)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, -1).transpose(1, 2)     # (B, H, N, d_k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (self._heads(t) for t in self.qkv(x).chunk(3, dim=-1))
        d_k = q.shape[-1]
        q = q * d_k ** -0.5                                       # scale the queries first
        bias = torch.zeros(n, n, dtype=q.dtype, device=q.device)
        bias = bias.masked_fill(~self.mask[:n, :n], float("-inf"))
        weights = torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(b, n, self.d_model)
        return self.proj(out)


# %% day12_block
class Block(nn.Module):
    """One Pre-LN Transformer decoder block.

    Attributes: ln1, attn (CausalSelfAttention), ln2, mlp (Linear(D, 4D), GELU, Linear(4D, D)).

    forward(x): x (B, N, D) -> (B, N, D).
    """

    def __init__(self, d_model: int, num_heads: int, n_ctx: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, num_heads, n_ctx)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential()
        self.mlp.append(nn.Linear(d_model, 4 * d_model))
        self.mlp.append(nn.GELU())
        self.mlp.append(nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        after_attn = x + self.attn(self.ln1(x))
        return after_attn + self.mlp(self.ln2(after_attn))


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
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.ln_f = nn.LayerNorm(d_model)
        self.blocks = nn.ModuleList([Block(d_model, num_heads, n_ctx)
                                     for _ in range(num_layers)])
        self.pos = nn.Embedding(n_ctx, d_model)
        self.tok = nn.Embedding(vocab_size, d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        n = idx.size(1)
        if n > self.n_ctx:
            raise ValueError(f"got {n} tokens but the context window is n_ctx = {self.n_ctx}")
        positions = torch.arange(n, device=idx.device)
        h = self.pos(positions).unsqueeze(0) + self.tok(idx)
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))
