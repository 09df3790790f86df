"""Day 4, a second way: a Python loop over the heads, each attending on its own slice of the
projected features, the mask broadcast to (B, H, T, T) and indexed per head; the heads' outputs
concatenated along the features and the weights stacked along dim 1."""

# %% day04_mha
class MultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention (Vaswani et al., 2017, section 3.2.2).

    Letters: B batch, T seq_len, C = d_model, H = num_heads, d_k = C // H.

    Attributes:
        W_Q, W_K, W_V, W_O: nn.Linear(d_model, d_model), bias on.
        d_k: int, features per head.
        attn_weights: (B, H, T, T) weights of the last forward call.
    """

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        if num_heads * (d_model // num_heads) != d_model:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.d_model = d_model
        self.d_k = d_model // num_heads
        self.W_O = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_Q = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, C); mask: bool, broadcastable to (B, H, T, T), True = may attend.

        Returns (B, T, C) and stores self.attn_weights (B, H, T, T).
        """
        B, T, _ = x.shape
        Q, K, V = self.W_Q(x), self.W_K(x), self.W_V(x)          # each (B, T, C)
        if mask is not None:
            mask = torch.broadcast_to(mask, (B, self.num_heads, T, T))
        outs, maps = [], []
        for h in range(self.num_heads):
            cols = slice(h * self.d_k, (h + 1) * self.d_k)
            q, k, v = Q[..., cols], K[..., cols], V[..., cols]   # each (B, T, d_k)
            s = q @ k.transpose(1, 2) / math.sqrt(self.d_k)       # (B, T, T)
            if mask is not None:
                s = s.masked_fill(~mask[:, h], float("-inf"))
            w = s.softmax(dim=-1)
            maps.append(w)
            outs.append(w @ v)                                    # (B, T, d_k)
        self.attn_weights = torch.stack(maps, dim=1)              # (B, H, T, T)
        return self.W_O(torch.cat(outs, dim=-1))
