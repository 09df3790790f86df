"""Day 3 written another way: the loop keeps a running sum instead of re-averaging; the matmul
weights are built as tril(ones) times 1/(t+1) from arange and applied with einsum; the softmax
weights come from a triu(-inf) table. SelfAttention adds a 0/-inf bias instead of masked_fill
and scales the queries before the product."""

# %% day03_averages
def average_past_loop(x: torch.Tensor) -> torch.Tensor:
    """out[b, t] = mean of x[b, 0..t], with Python loops. x (B, T, C) -> (B, T, C)."""
    n_batch, n_steps, _ = x.shape
    out = torch.empty_like(x)
    for b in range(n_batch):
        running = torch.zeros_like(x[b, 0])              # (C,)
        for t in range(n_steps):
            running = running + x[b, t]
            out[b, t] = running / (t + 1)
    return out


def average_past_matmul(x: torch.Tensor) -> torch.Tensor:
    """The same running mean as one product with a (T, T) lower-triangular weight matrix."""
    n_steps = x.shape[1]
    counts = torch.arange(1, n_steps + 1, dtype=x.dtype, device=x.device)       # 1..T
    lower = torch.ones(n_steps, n_steps, dtype=x.dtype, device=x.device).tril()
    weights = lower / counts.unsqueeze(1)               # row t: 1/(t+1) in columns 0..t
    return torch.einsum("ts,bsc->btc", weights, x)


def average_past_softmax(x: torch.Tensor) -> torch.Tensor:
    """The same running mean: softmax of zero scores, -inf above the diagonal."""
    n_steps = x.shape[1]
    # -inf strictly above the diagonal, 0 on and below it
    scores = torch.full((n_steps, n_steps), float("-inf"), dtype=x.dtype, device=x.device)
    scores = scores.triu(diagonal=1)
    weights = F.softmax(scores, dim=1)
    return torch.matmul(weights, x)


# %% day03_self_attention
class SelfAttention(nn.Module):
    """Single-head self-attention (Vaswani et al., 2017, section 3.2.1).

    Args:
        d_model: width of the token vectors; one head, so d_k = d_model.

    Attributes:
        W_Q, W_K, W_V: nn.Linear(d_model, d_model), with bias.
        attn_weights: (batch, seq_len, seq_len) weights of the last forward call.
    """

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model
        self.W_V = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_Q = nn.Linear(d_model, d_model)
        self.attn_weights = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (batch, seq_len, d_model); mask: bool, broadcastable to (batch, seq_len, seq_len),
        True = may attend. Returns (batch, seq_len, d_model)."""
        values = self.W_V(x)
        keys = self.W_K(x)
        queries = self.W_Q(x) * (1.0 / math.sqrt(self.d_model))
        scores = torch.bmm(queries, keys.transpose(1, 2))        # (batch, seq_len, seq_len)
        if mask is not None:
            # an additive bias: 0 where the key may be read, -inf where it may not
            bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
            bias = bias.masked_fill(~mask.to(scores.device), float("-inf"))
            scores = scores + bias
        self.attn_weights = scores.softmax(dim=-1)
        return torch.matmul(self.attn_weights, values)
