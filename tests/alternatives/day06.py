"""Day 6 written another way: the FFN as einsum with the Linear weights and GELU written with
erf; LayerNorm from E[x^2] - E[x]^2 accumulated in float64 and rsqrt; the encoder layer as one
loop over its two (norm, sublayer) pairs."""

# %% day06_ffn
class FeedForward(nn.Module):
    """Position-wise feed-forward block: linear1 -> GELU -> dropout -> linear2."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.linear1 = nn.Linear(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model)."""
        hidden = torch.einsum("...c,fc->...f", x, self.linear1.weight) + self.linear1.bias
        # exact GELU: x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2
        hidden = 0.5 * hidden * (1.0 + torch.erf(hidden * (1.0 / math.sqrt(2.0))))
        hidden = self.dropout(hidden)
        return torch.einsum("...f,cf->...c", hidden, self.linear2.weight) + self.linear2.bias


# %% day06_layer_norm
class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension (Ba et al., 2016)."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d_model) -> same shape; each vector has mean 0 and variance 1 before γ, β."""
        wide = x.to(torch.float64)
        mean = wide.mean(dim=-1, keepdim=True)
        mean_sq = (wide * wide).mean(dim=-1, keepdim=True)
        var = (mean_sq - mean * mean).clamp_min(0.0)          # biased variance
        normed = ((wide - mean) * torch.rsqrt(var + self.eps)).to(x.dtype)
        return torch.addcmul(self.bias, normed, self.weight)


# %% day06_encoder_layer
class TransformerEncoderLayer(nn.Module):
    """Pre-LN encoder layer: x + attn(norm1(x)), then + ffn(norm2(.))."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = LayerNorm(d_model)
        self.attn = MultiHeadSelfAttention(d_model, num_heads)
        self.norm2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, d_model); mask: bool, broadcastable to (B, H, T, T) -> (B, T, d_model)."""
        sublayers = (
            (self.norm1, lambda h: self.attn(h, mask)),
            (self.norm2, self.ffn),
        )
        stream = x
        for norm, sublayer in sublayers:
            stream = stream + self.dropout(sublayer(norm(stream)))
        return stream
