"""Day 5 written another way: the sinusoid table built in float64 with torch.outer and the
sin/cos columns interleaved by stack + reshape, sliced with narrow; the learned table sliced
from the embedding's weight instead of looked up with arange."""

# %% day05_sinusoidal
class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sine/cosine position vectors added to the input (Vaswani et al., 2017, 3.5).

    Attributes:
        pe: buffer (1, max_len, d_model).
        max_len: the longest sequence forward accepts.
    """

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        if d_model % 2 == 1:
            raise ValueError(f"d_model must be even for sin/cos pairs, got {d_model}")
        self.max_len = max_len
        # wavelengths 10000^(2i/d_model) for the even columns 2i, in float64
        even_cols = torch.arange(0, d_model, 2, dtype=torch.float64)          # (d_model/2,)
        wavelength = torch.pow(torch.tensor(10000.0, dtype=torch.float64), even_cols / d_model)
        positions = torch.arange(max_len, dtype=torch.float64)                # (max_len,)
        angles = torch.outer(positions, wavelength.reciprocal())              # (max_len, d/2)
        # (max_len, d/2, 2) -> (max_len, d): column 2i = sin, column 2i+1 = cos
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(max_len, d_model)
        self.register_buffer("pe", table.to(torch.get_default_dtype())[None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> x + PE of positions 0..T-1, same shape."""
        seq_len = x.size(1)
        if seq_len > self.max_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_len {self.max_len}")
        return self.pe.narrow(1, 0, seq_len) + x


# %% day05_learned
class LearnedPositionalEncoding(nn.Module):
    """One trainable vector per position (BERT, GPT-2, ViT).

    Attributes:
        embedding: nn.Embedding(max_len, d_model).
    """

    def __init__(self, d_model: int, max_len: int = 5000) -> None:
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, d_model) -> x + embedding of positions 0..T-1, same shape."""
        # all positions' vectors, then keep the first T: (max_len, d_model) -> (T, d_model)
        table = self.embedding.weight[: x.shape[1]]
        return x + table.unsqueeze(0)                 # (B, T, d_model) + (1, T, d_model)
