"""Day 14 written another way: RMS through vector_norm, one fused gate/up matmul, RoPE as 2x2
rotation matrices applied with einsum, attention by hand (einsum + masked softmax) with the mask
from positions, GQA by grouping the query heads (no repeat), generation collecting pieces."""

# %% day14_rmsnorm
class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, with a learned gain ``weight``.

    forward(x): x (..., d_model) -> (..., d_model). Equal to torch.nn.RMSNorm(d_model, eps).
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.d_model = d_model
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # mean of squares = |x|^2 / D, from the Euclidean norm of each vector
        sq_norm = torch.linalg.vector_norm(x, ord=2, dim=-1, keepdim=True).square()   # (..., 1)
        rms = torch.sqrt(sq_norm / x.shape[-1] + self.eps)                             # (..., 1)
        return self.weight * (x / rms)


# %% day14_swiglu
class SwiGLU(nn.Module):
    """Gated feed-forward network: w_down(silu(w_gate(x)) * w_up(x)); no biases.

    Attributes: w_gate (D -> d_ff), w_up (D -> d_ff), w_down (d_ff -> D), all nn.Linear.
    forward(x): x (..., d_model) -> (..., d_model).
    """

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w_down = nn.Linear(d_ff, d_model, bias=False)
        self.w_up = nn.Linear(d_model, d_ff, bias=False)
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one matmul for both input projections: stacked weight (2 d_ff, D)
        both = F.linear(x, torch.cat((self.w_gate.weight, self.w_up.weight), dim=0))
        gate, up = both.chunk(2, dim=-1)                                  # (..., d_ff) each
        hidden = up * (gate * torch.sigmoid(gate))                        # silu on the gate only
        return self.w_down(hidden)


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
        # angles in float64: theta_i = exp(-(2i / head_dim) ln base)
        two_i = torch.arange(0, head_dim, 2, dtype=torch.float64)                # (head_dim/2,)
        theta = torch.exp(-math.log(base) * two_i / head_dim)
        m = torch.arange(max_len, dtype=torch.float64)[:, None]                   # (max_len, 1)
        angle = m * theta[None, :]                                                # (max_len, h)
        self.register_buffer("cos", angle.cos().to(torch.get_default_dtype()))
        self.register_buffer("sin", angle.sin().to(torch.get_default_dtype()))

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate x (..., T, head_dim) for the positions (T,)."""
        half = self.head_dim // 2
        c = self.cos[positions].to(x.dtype)                                       # (T, half)
        s = self.sin[positions].to(x.dtype)
        # rotation matrices R[t, i] = [[c, -s], [s, c]]: (T, half, 2, 2)
        rot = torch.stack((torch.stack((c, -s), dim=-1), torch.stack((s, c), dim=-1)), dim=-2)
        pairs = x.unflatten(-1, (2, half))                    # (..., T, 2, half): row 0 = x1
        turned = torch.einsum("tiab,...tbi->...tai", rot, pairs)
        return turned.flatten(-2)                             # (..., T, head_dim)

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
        B, T, D = x.shape
        # (B, T, 3, H, d_k) -> (3, B, H, T, d_k): q, k, v in the order of the qkv columns
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.d_k).permute(2, 0, 3, 1, 4)
        q, k = self.q_norm(q), self.k_norm(k)
        past = 0 if cache is None else cache[0].shape[-2]
        q_pos = torch.arange(past, past + T, device=x.device)                    # (T,)
        q, k = self.rope.apply_rope(q, k, q_pos)
        if cache is not None:
            k = torch.cat((cache[0], k), dim=-2)                                 # (B, H, S, d_k)
            v = torch.cat((cache[1], v), dim=-2)
        k_pos = torch.arange(k.shape[-2], device=x.device)                       # (S,)
        hidden = k_pos[None, :] > q_pos[:, None]                                 # (T, S) future
        scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(self.d_k)
        weights = scores.masked_fill(hidden, float("-inf")).softmax(dim=-1)     # (B, H, T, S)
        merged = torch.einsum("bhts,bhsd->bthd", weights, v).reshape(B, T, D)
        return self.proj(merged), (k, v)


# %% day14_modern_gpt
class ModernBlock(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then + mlp(norm2(x)). forward(x, cache) -> (x, cache)."""

    def __init__(self, d_model: int, num_heads: int, max_len: int, d_ff: int) -> None:
        super().__init__()
        self.norm1 = RMSNorm(d_model)
        self.attn = CachedCausalSelfAttention(d_model, num_heads, max_len)
        self.norm2 = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, d_ff)

    def forward(self, x: torch.Tensor, cache=None):
        update, new_cache = self.attn(self.norm1(x), cache)
        h = x + update
        h = h + self.mlp(self.norm2(h))
        return h, new_cache


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
        self.blocks = nn.ModuleList()
        for _ in range(num_layers):
            self.blocks.append(ModernBlock(d_model, num_heads, max_len, d_ff))
        self.norm_f = RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight
        # GPT-2/LLaMA initialisation N(0, 0.02): with a tied head, PyTorch's default N(0, 1)
        # embedding would make the first logits huge (an initial loss far above ln V).
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, cache=None):
        caches = [None] * len(self.blocks) if cache is None else list(cache)
        h = self.tok(idx)                                               # (B, T, D)
        for layer, block in enumerate(self.blocks):
            h, caches[layer] = block(h, caches[layer])
        return self.head(self.norm_f(h)), caches


# %% day14_generate_with_cache
@torch.no_grad()
def generate_with_cache(model: nn.Module, idx: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Greedy decoding with a KV cache: idx (B, T) -> (B, T + max_new_tokens).

    ``model(idx, cache)`` returns (logits, new_cache); the prompt is processed once, then one
    token per step.
    """
    if max_new_tokens <= 0:
        return idx
    logits, cache = model(idx)                                   # prefill: (B, T, V)
    pieces = [idx]
    for step in range(max_new_tokens):
        newest = logits[:, -1, :].argmax(dim=-1).unsqueeze(-1)   # (B, 1)
        pieces.append(newest)
        if step < max_new_tokens - 1:                            # no call after the last token
            logits, cache = model(newest, cache)                 # (B, 1, V)
    return torch.cat(pieces, dim=1)


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
    counts = {"weights": num_params, "gradients": trainable_params,
              "optimizer": optimizer_states * trainable_params}
    sizes = {part: int(n) * int(bytes_per_value) for part, n in counts.items()}
    sizes["total"] = sum(sizes.values())
    return sizes


def lora_params(d_in: int, d_out: int, rank: int) -> int:
    """Trainable parameters of a LoRA adapter B (d_out, rank) @ A (rank, d_in) on one matrix."""
    shapes = ((d_out, rank), (rank, d_in))                       # B, then A
    return sum(rows * cols for rows, cols in shapes)


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
        B, T, D = x.shape
        G, group, d_k = self.num_kv_heads, self.num_heads // self.num_kv_heads, self.d_k
        q = self.q_proj(x).view(B, T, self.num_heads, d_k).transpose(1, 2)       # (B, H, T, d_k)
        kv = self.kv_proj(x).view(B, T, 2, G, d_k)                               # keys first
        k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)          # (B, G, T, d_k)
        past = 0 if cache is None else cache[0].shape[-2]
        positions = torch.arange(past, past + T, device=x.device)
        q, k = self.rope.apply_rope(q, k, positions)
        if cache is not None:
            k = torch.cat((cache[0], k), dim=-2)                                 # (B, G, S, d_k)
            v = torch.cat((cache[1], v), dim=-2)
        S = k.shape[-2]
        # query head h = g * group + j reads shared head g: group the queries, no repeat
        qg = q.reshape(B, G, group, T, d_k)                                      # (B, G, r, T, d_k)
        bias = torch.zeros(T, S, dtype=q.dtype, device=x.device)
        bias = bias.masked_fill(torch.arange(S, device=x.device)[None, :] > positions[:, None],
                                float("-inf"))                                   # (T, S)
        scores = torch.einsum("bgjtd,bgsd->bgjts", qg, k) * d_k ** -0.5 + bias
        weights = torch.softmax(scores, dim=-1)                                  # (B, G, r, T, S)
        out = torch.einsum("bgjts,bgsd->btgjd", weights, v).reshape(B, T, D)     # heads g, j
        return self.proj(out), (k, v)
