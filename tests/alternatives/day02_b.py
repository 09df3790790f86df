"""Day 2, a second way: softmax with max-shift and the division done in float64, cast back;
attention with matmul, scores scaled after the product, and the mask turned into an additive
log-mask (log 1 = 0, log 0 = -inf)."""

# %% day02_softmax
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax of ``x`` along ``dim``.

    Args:
        x: float tensor of any shape.
        dim: the dimension whose entries become probabilities.

    Returns:
        A tensor of the same shape and dtype; entries along ``dim`` are >= 0 and sum to 1.
        ``-inf`` inputs get weight 0. No NaN for inputs as large as 1000.
    """
    wide = x.to(torch.float64)
    e = (wide - wide.max(dim=dim, keepdim=True).values).exp()
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


# %% day02_attention
def scaled_dot_product_attention(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V  (Vaswani et al., 2017, eq. 1).

    Args:
        Q: (..., seq_q, d_k) queries.
        K: (..., seq_k, d_k) keys.
        V: (..., seq_k, d_v) values.
        mask: optional bool tensor broadcastable to (..., seq_q, seq_k); True = may attend.

    Returns:
        output: (..., seq_q, d_v).
        attn_weights: (..., seq_q, seq_k), each row sums to 1.
    """
    scores = torch.matmul(Q, K.transpose(-1, -2)) * Q.size(-1) ** -0.5
    if mask is not None:
        scores = scores + mask.to(scores.dtype).log()     # 0 where allowed, -inf where not
    weights = softmax(scores, dim=-1)
    return torch.matmul(weights, V), weights
