"""Day 4 written another way: Q, K and V from one F.linear with the three weights concatenated,
split into heads with reshape + permute; scores and blend with einsum, the mask with torch.where,
heads merged with permute + reshape; divisibility tested with divmod."""

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
        per_head, leftover = divmod(d_model, num_heads)
        if leftover:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads} "
                f"({d_model} = {num_heads} * {per_head} + {leftover})"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = int(per_head)
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Linear(d_model, d_model) for _ in range(4))
        self.attn_weights = None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, C); mask: bool, broadcastable to (B, H, T, T), True = may attend.

        Returns (B, T, C) and stores self.attn_weights (B, H, T, T).
        """
        B, T, C = x.shape
        stacked_w = torch.cat((self.W_Q.weight, self.W_K.weight, self.W_V.weight), dim=0)
        stacked_b = torch.cat((self.W_Q.bias, self.W_K.bias, self.W_V.bias), dim=0)
        qkv = torch.nn.functional.linear(x, stacked_w, stacked_b)            # (B, T, 3C)
        # (B, T, 3, H, d_k) -> (3, B, H, T, d_k): each token's features cut into heads
        qkv = qkv.reshape(B, T, 3, self.num_heads, self.d_k).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(self.d_k)  # (B, H, T, T)
        if mask is not None:
            scores = torch.where(mask, scores, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        self.attn_weights = weights
        heads = torch.einsum("bhij,bhjd->bhid", weights, v)                   # (B, H, T, d_k)
        merged = heads.permute(0, 2, 1, 3).reshape(B, T, C)
        return self.W_O(merged)
