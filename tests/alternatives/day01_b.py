"""Day 1, a second way: the classic stacked form h_t = tanh([x_t, h_{t-1}] W + b) with
W = [W_xh; W_hh] concatenated once, states collected in a list; the gradient norms from
x.grad, squared and summed per step in float64 and cast back."""

# %% day01_rnn_forward
def rnn_forward(
    x: torch.Tensor, h0: torch.Tensor, W_xh: torch.Tensor, W_hh: torch.Tensor, b_h: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a vanilla (Elman) RNN over a sequence: h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h).

    Args:
        x: (batch, seq_len, d_in) inputs.
        h0: (batch, d_h) initial hidden state.
        W_xh: (d_in, d_h), W_hh: (d_h, d_h), b_h: (d_h,).

    Returns:
        outputs: (batch, seq_len, d_h), the hidden state after every step.
        h_last: (batch, d_h), the hidden state after the last step (= outputs[:, -1]).
    """
    W = torch.cat([W_xh, W_hh], dim=0)                     # (d_in + d_h, d_h)
    h = h0
    hs = []
    for x_t in x.unbind(dim=1):                            # each (batch, d_in)
        h = torch.tanh(torch.cat([x_t, h], dim=-1) @ W + b_h)
        hs.append(h)
    return torch.stack(hs, dim=1), hs[-1]


# %% day01_gradient_norms
def gradient_norms_through_time(
    x: torch.Tensor, h0: torch.Tensor, W_xh: torch.Tensor, W_hh: torch.Tensor, b_h: torch.Tensor
) -> torch.Tensor:
    """For every step t, the L2 norm of d(h_last.sum()) / d x[:, t, :].

    Args: as for ``rnn_forward``.

    Returns:
        (seq_len,) float tensor; entry t is the gradient norm reaching input step t, taken over
        the batch and feature dimensions.
    """
    x_leaf = x.detach().clone()
    x_leaf.requires_grad = True
    with torch.enable_grad():
        h_last = rnn_forward(x_leaf, h0, W_xh, W_hh, b_h)[1]
        h_last.sum().backward()
    g = x_leaf.grad.to(torch.float64)
    per_step = torch.stack([g[:, t].square().sum() for t in range(g.shape[1])])
    return per_step.sqrt().to(x.dtype)
