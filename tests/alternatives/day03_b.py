"""Day 3, a second way: the loop takes the mean of the slice x[b, :t+1]; the matmul divides
tril(ones) by its row sums and multiplies from the right (x^T W^T, transposed back); the softmax
masks zeros with masked_fill. SelfAttention writes the projections as x @ W^T + b by hand,
masks with masked_fill and divides the scores by sqrt(d_model)."""

# %% day03_averages
def average_past_loop(x: torch.Tensor) -> torch.Tensor:
    """out[b, t] = mean of x[b, 0..t], with Python loops. x (B, T, C) -> (B, T, C)."""
    rows = []
    for b in range(x.shape[0]):
        rows.append(torch.stack([x[b, : t + 1].mean(dim=0) for t in range(x.shape[1])]))
    return torch.stack(rows).reshape(x.shape)


def average_past_matmul(x: torch.Tensor) -> torch.Tensor:
    """The same running mean as one product with a (T, T) lower-triangular weight matrix."""
    T = x.size(1)
    W = torch.tril(torch.ones(T, T, dtype=x.dtype, device=x.device))
    W = W / W.sum(dim=-1, keepdim=True)
    # (B, C, T) @ (T, T) then back to (B, T, C): the same product, written from the right
    return (x.transpose(1, 2) @ W.T).transpose(1, 2)


def average_past_softmax(x: torch.Tensor) -> torch.Tensor:
    """The same running mean: softmax of zero scores, -inf above the diagonal."""
    T = x.size(1)
    allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    scores = torch.zeros(T, T, dtype=x.dtype, device=x.device).masked_fill(~allowed,
                                                                          float("-inf"))
    return torch.softmax(scores, dim=-1) @ x


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
        self.W_Q = nn.Linear(d_model, d_model, bias=True)
        self.W_K = nn.Linear(d_model, d_model, bias=True)
        self.W_V = nn.Linear(d_model, d_model, bias=True)

    @staticmethod
    def _project(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return x @ layer.weight.T + layer.bias

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (batch, seq_len, d_model); mask: bool, broadcastable to (batch, seq_len, seq_len),
        True = may attend. Returns (batch, seq_len, d_model)."""
        q = self._project(self.W_Q, x)
        k = self._project(self.W_K, x)
        v = self._project(self.W_V, x)
        scores = q @ k.mT / math.sqrt(x.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), float("-inf"))
        weights = F.softmax(scores, dim=-1)
        self.attn_weights = weights
        return weights @ v
