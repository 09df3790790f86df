"""Day 14 another way again: RMSNorm accumulated in float64, silu through tanh, RoPE with
Hugging Face's rotate_half and float32 tables, attention through SDPA with an additive float
mask (is_causal when there is no cache), GQA with enable_gqa, head tied the other way round."""

# %% day14_rmsnorm
class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a learned gain ``weight``.

    forward(x): x (..., d_model) -> (..., d_model). Equal to torch.nn.RMSNorm(d_model, eps).
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.full((d_model,), 1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.to(torch.float64)                                        # accumulate in float64
        inv_rms = torch.rsqrt(torch.mean(wide * wide, dim=-1, keepdim=True) + self.eps)
        return (wide * inv_rms).to(x.dtype) * self.weight


# %% day14_swiglu
class SwiGLU(nn.Module):
    """Gated feed-forward network: w_down(silu(w_gate(x)) * w_up(x)); no biases.

    Attributes: w_gate (D -> d_ff), w_up (D -> d_ff), w_down (d_ff -> D), all nn.Linear.
    forward(x): x (..., d_model) -> (..., d_model).
    """

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w_gate, self.w_up = (nn.Linear(d_model, d_ff, bias=False) for _ in range(2))
        self.w_down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.w_gate(x)                                                # (..., d_ff)
        # sigmoid(z) = (1 + tanh(z / 2)) / 2, so silu(z) = z (1 + tanh(z / 2)) / 2
        silu = 0.5 * g * (1.0 + torch.tanh(0.5 * g))
        return self.w_down(silu * self.w_up(x))


# %% day14_rope
class RotaryEmbedding(nn.Module):
    """Rotary position embedding, half-split convention: dimension i pairs with i + head_dim/2.

    Pair i of the vector at position m is rotated by the angle m * theta_i,
    theta_i = base ** (-2i / head_dim), i = 0 .. head_dim/2 - 1.

    Buffers: cos, sin, each (max_len, head_dim // 2).
    apply_rope(q, k, positions): q, k (..., T, head_dim), positions (T,) long with values
    < max_len -> (q_rotated, k_rotated), same shapes.
    """

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim must be even, got {head_dim}")
        self.head_dim = head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_len).float(), inv_freq)         # (max_len, h)
        self.register_buffer("cos", freqs.cos())
        self.register_buffer("sin", freqs.sin())

    @staticmethod
    def _rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate x (..., T, head_dim) for the positions (T,)."""
        cos = self.cos.index_select(0, positions).to(x.dtype).repeat(1, 2)  # (T, head_dim)
        sin = self.sin.index_select(0, positions).to(x.dtype).repeat(1, 2)
        return x * cos + self._rotate_half(x) * sin

    def apply_rope(self, q: torch.Tensor, k: torch.Tensor,
                   positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate queries and keys: (..., T, head_dim) each, positions (T,)."""
        return self.rotate(q, positions), self.rotate(k, positions)


# %% day14_cached_attention
class CachedCausalSelfAttention(nn.Module):
    """Causal multi-head self-attention with RoPE and a KV cache.

    Attributes: qkv (D -> 3D, no bias), proj (D -> D, no bias),
    rope (RotaryEmbedding(d_k, max_len)),
    q_norm and k_norm (RMSNorm(d_k) with qk_norm=True, else nn.Identity()).

    forward(x, cache=None): x (B, T, D); cache None or (k, v), each (B, H, past, d_k).
    Returns (y, (k, v)): y (B, T, D), and the keys/values of all past + T positions.
    """

    def __init__(self, d_model: int, num_heads: int, max_len: int, qk_norm: bool = False) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.max_len = max_len
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.rope = RotaryEmbedding(self.d_k, max_len)
        # QK-norm (see below): each head's query and key rescaled to unit RMS, before RoPE
        self.q_norm = RMSNorm(self.d_k) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.d_k) if qk_norm else nn.Identity()

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        n_batch, n_new, width = x.shape
        heads = [t.unflatten(-1, (self.num_heads, self.d_k)).transpose(1, 2)
                 for t in self.qkv(x).chunk(3, dim=-1)]                       # (B, H, T, d_k)
        q, k, v = heads
        q = self.q_norm(q)
        k = self.k_norm(k)
        past = cache[0].size(-2) if cache is not None else 0
        q, k = self.rope.apply_rope(q, k, torch.arange(n_new, device=x.device) + past)
        if cache is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)    # past = 0: aligned
        else:
            k, v = torch.cat([cache[0], k], -2), torch.cat([cache[1], v], -2)
            total = k.size(-2)
            rows = torch.arange(past, total, device=x.device)[:, None]     # query positions
            cols = torch.arange(total, device=x.device)[None, :]            # key positions
            mask = torch.zeros(n_new, total, dtype=q.dtype, device=x.device)
            mask[cols.expand(n_new, total) > rows] = float("-inf")          # (T, S) additive
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = out.transpose(1, 2).flatten(2)                                  # (B, T, D)
        return self.proj(y), (k, v)


# %% day14_modern_gpt
class ModernBlock(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then + mlp(norm2(x)). forward(x, cache) -> (x, cache)."""

    def __init__(self, d_model: int, num_heads: int, max_len: int, d_ff: int) -> None:
        super().__init__()
        self.attn = CachedCausalSelfAttention(d_model, num_heads, max_len)
        self.mlp = SwiGLU(d_model, d_ff)
        self.norm1, self.norm2 = RMSNorm(d_model), RMSNorm(d_model)

    def forward(self, x: torch.Tensor, cache=None):
        a, cache = self.attn(self.norm1(x), cache=cache)
        x = a + x
        return self.mlp(self.norm2(x)) + x, cache


class ModernGPT(nn.Module):
    """LLaMA-style decoder: RMSNorm, SwiGLU, RoPE (no position table), tied embeddings.

    Attributes: tok, blocks, norm_f, head (head.weight is tok.weight), n_ctx (= max_len).
    forward(idx, cache=None): idx (B, T) long; cache None or a list of (k, v) per block.
    Returns (logits (B, T, V), new_cache).
    """

    def __init__(self, vocab_size: int, d_model: int = 256, num_heads: int = 4,
                 num_layers: int = 4, max_len: int = 512, d_ff: int | None = None) -> None:
        super().__init__()
        d_ff = d_ff or 8 * ((8 * d_model // 3 + 7) // 8)
        self.n_ctx = max_len
        self.tok = nn.Embedding(vocab_size, d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.tok.weight = self.head.weight                  # tied: one (V, D) matrix, two names
        self.blocks = nn.ModuleList(ModernBlock(d_model, num_heads, max_len, d_ff)
                                    for _ in range(num_layers))
        self.norm_f = RMSNorm(d_model)
        # GPT-2/LLaMA initialisation N(0, 0.02): with a tied head, PyTorch's default N(0, 1)
        # embedding would make the first logits huge (an initial loss far above ln V).
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, cache=None):
        x = self.tok(idx)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, layer_cache = block(x, None if cache is None else cache[i])
            new_cache.append(layer_cache)
        logits = self.head(self.norm_f(x))                  # (B, T, V)
        return logits, new_cache


# %% day14_generate_with_cache
@torch.no_grad()
def generate_with_cache(model: nn.Module, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Greedy decoding with a KV cache: idx (B, T) -> (B, T + max_new_tokens).

    ``model(idx, cache)`` returns (logits, new_cache); the prompt is processed once, then one
    token per step.
    """
    out = idx
    feed, cache = idx, None
    for _ in range(max_new_tokens):
        logits, cache = model(feed, cache)                     # prompt first, then one token
        feed = torch.argmax(logits[:, -1:], dim=-1)            # (B, 1)
        out = torch.cat((out, feed), dim=1)
    return out


# %% day14_training_memory
def training_memory(num_params: int, trainable_params: int, bytes_per_value: int = 4,
                    optimizer_states: int = 2) -> dict[str, int]:
    """Bytes that training holds besides activations.

    Args:
        num_params: every parameter of the model (frozen or not).
        trainable_params: the parameters that receive gradients and optimizer states.
        bytes_per_value: 4 for float32, 2 for bfloat16 / float16.
        optimizer_states: values the optimizer keeps per trainable parameter (AdamW: 2).

    Returns:
        {"weights", "gradients", "optimizer", "total"} in bytes (ints).
    """
    grad_bytes = trainable_params * bytes_per_value
    return {
        "weights": num_params * bytes_per_value,
        "gradients": grad_bytes,
        "optimizer": grad_bytes * optimizer_states,
        "total": (num_params + trainable_params * (1 + optimizer_states)) * bytes_per_value,
    }


def lora_params(d_in: int, d_out: int, rank: int) -> int:
    """Trainable parameters of a LoRA adapter B (d_out, rank) @ A (rank, d_in) on one matrix."""
    return rank * (d_in + d_out)


# %% day14_gqa
class GroupedQueryAttention(nn.Module):
    """Causal self-attention with RoPE, a KV cache and grouped-query attention.

    num_heads query heads share num_kv_heads key/value heads: query head h reads key/value head
    h // (num_heads // num_kv_heads). num_kv_heads = num_heads is multi-head attention,
    num_kv_heads = 1 multi-query attention.

    Attributes: q_proj (D -> D, no bias), kv_proj (D -> 2 * num_kv_heads * d_k, no bias; keys
    first, then values), proj (D -> D, no bias), rope (RotaryEmbedding(d_k, max_len)).

    forward(x, cache=None): x (B, T, D); cache None or (k, v), each (B, num_kv_heads, past, d_k).
    Returns (y, (k, v)): y (B, T, D); k, v (B, num_kv_heads, past + T, d_k), the shared heads only.

    Raises:
        ValueError: num_heads does not divide d_model, or num_kv_heads does not divide num_heads.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, max_len: int) -> None:
        super().__init__()
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"num_heads ({num_heads}) must divide d_model ({d_model}) and "
                             f"num_kv_heads ({num_kv_heads}) must divide num_heads")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.d_k = d_model // num_heads
        self.max_len = max_len
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.kv_proj = nn.Linear(d_model, 2 * num_kv_heads * self.d_k, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.rope = RotaryEmbedding(self.d_k, max_len)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        B, T, _ = x.shape

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:     # (B, T, n d_k) -> (B, n, T, d_k)
            return t.reshape(B, T, n, self.d_k).permute(0, 2, 1, 3)

        q = heads(self.q_proj(x), self.num_heads)
        k_new, v_new = self.kv_proj(x).tensor_split(2, dim=-1)       # keys first, then values
        k, v = heads(k_new, self.num_kv_heads), heads(v_new, self.num_kv_heads)
        past = 0 if cache is None else cache[1].size(2)
        q, k = self.rope.apply_rope(q, k, torch.arange(past, past + T, device=x.device))
        if cache is not None:
            k = torch.cat((cache[0], k), dim=2)
            v = torch.cat((cache[1], v), dim=2)
        S = k.size(2)
        keep = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        # enable_gqa: query head h reads key/value head h // (H / G), as repeat_interleave
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
        return self.proj(y.permute(0, 2, 1, 3).reshape(B, T, -1)), (k, v)
