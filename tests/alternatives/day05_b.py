"""Day 5, second way: the sinusoid frequencies as exp(-ln(10000) * 2i / d_model) written into
even and odd column slices of a zero table (float32 throughout); the learned table looked up with
F.embedding on positions expanded to the batch."""

# %% day05_sinusoidal
class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sine/cosine position vectors added to the input (Vaswani et al., 2017, 3.5).

    Attributes:
        pe: buffer (1, max_len, d_model).
        max_len: the longest sequence forward accepts.
    """

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        if d_model & 1:
            raise ValueError(f"odd d_model={d_model}: the last sin column has no cos partner")
        pe = torch.zeros(1, max_len, d_model)
        pos = torch.arange(max_len).unsqueeze(1).float()                       # (max_len, 1)
        inv_freq = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[0, :, 0::2] = torch.sin(pos * inv_freq)
        pe[0, :, 1::2] = torch.cos(pos * inv_freq)
        self.register_buffer("pe", pe, persistent=True)
        self.max_len = max_len

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> x + PE of positions 0..T-1, same shape."""
        _, length, _ = x.shape
        if not length <= self.max_len:
            raise ValueError(f"got {length} positions but the table holds max_len={self.max_len}")
        return torch.add(x, self.pe[:, :length, :])


# %% day05_learned
class LearnedPositionalEncoding(nn.Module):
    """One trainable vector per position (BERT, GPT-2, ViT).

    Attributes:
        embedding: nn.Embedding(max_len, d_model).
    """

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings=max_len, embedding_dim=d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> x + embedding of positions 0..T-1, same shape."""
        batch, length = x.shape[0], x.shape[1]
        idx = torch.arange(length, device=x.device).expand(batch, length)     # (B, T)
        return x + torch.nn.functional.embedding(idx, self.embedding.weight)
