"""Day 2 written another way: softmax as exp(x - logsumexp(x)) with the log-sum-exp written by
hand around the maximum; attention with einsum, the 1/sqrt(d_k) scale applied to the queries,
and the mask applied with torch.where."""

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
    peak = torch.amax(x, dim=dim, keepdim=True)
    centred = x - peak                                   # every entry <= 0, the largest is 0
    # log of the normaliser: log sum exp(centred) >= log 1 = 0, never -inf
    log_norm = torch.log(torch.sum(torch.exp(centred), dim=dim, keepdim=True))
    return torch.exp(centred - log_norm)


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
    head_dim = K.shape[-1]
    scaled_q = Q / math.sqrt(head_dim)
    scores = torch.einsum("...qd,...kd->...qk", scaled_q, K)         # (..., seq_q, seq_k)
    if mask is not None:
        scores = torch.where(mask, scores, float("-inf"))
    attn_weights = softmax(scores, dim=-1)
    output = torch.einsum("...qk,...kv->...qv", attn_weights, V)     # (..., seq_q, d_v)
    return output, attn_weights
