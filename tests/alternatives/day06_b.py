"""Day 6, second way: the FFN through F.linear and F.gelu on the layers' tensors; LayerNorm with
torch.var_mean(correction=0) in the input's dtype and a division by sqrt; the encoder layer with
named intermediate residual states."""

# %% day06_ffn
class FeedForward(nn.Module):
    """Position-wise feed-forward block: linear1 -> GELU -> dropout -> linear2."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = nn.Linear(in_features=d_model, out_features=d_ff, bias=True)
        self.linear2 = nn.Linear(in_features=d_ff, out_features=d_model, bias=True)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> (B, T, d_model)."""
        up = F.gelu(F.linear(x, self.linear1.weight, self.linear1.bias), approximate="none")
        return F.linear(self.dropout(up), self.linear2.weight, self.linear2.bias)


# %% day06_layer_norm
class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension (Ba et al., 2016)."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., d_model) -> same shape; each vector has mean 0 and variance 1 before γ, β."""
        var, mu = torch.var_mean(x, dim=-1, correction=0, keepdim=True)
        return (x - mu) / torch.sqrt(var + self.eps) * self.weight + self.bias


# %% day06_encoder_layer
class TransformerEncoderLayer(nn.Module):
    """Pre-LN encoder layer: x + attn(norm1(x)), then + ffn(norm2(.))."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.attn = MultiHeadSelfAttention(d_model, num_heads)
        self.ffn = FeedForward(d_model, d_ff, dropout=dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, d_model); mask: bool, broadcastable to (B, H, T, T) -> (B, T, d_model)."""
        attended = self.attn(self.norm1(x), mask=mask)
        after_attn = x + self.dropout(attended)
        transformed = self.ffn(self.norm2(after_attn))
        return after_attn + self.dropout(transformed)
