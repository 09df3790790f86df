"""Day 12: a Block with GPT-2's own tanh-approximate GELU, nn.GELU(approximate="tanh"),
within 5e-4 of the exact one (the grader once compared with the exact GELU only)."""

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
        self.mlp.append(nn.GELU(approximate="tanh"))            # GPT-2's GELU
        self.mlp.append(nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        after_attn = x + self.attn(self.ln1(x))
        return after_attn + self.mlp(self.ln2(after_attn))
