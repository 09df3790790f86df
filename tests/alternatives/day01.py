"""Day 1 written another way: the input projections of all steps computed at once with einsum
and the recurrence stepped with addmm into a preallocated tensor; the gradient norms taken with
torch.autograd.grad and torch.linalg.vector_norm instead of backward and x.grad."""

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
    n_batch, n_steps, _ = x.shape
    # the input part does not depend on the past: all steps in one product, bias folded in
    driven = torch.einsum("bti,ih->bth", x, W_xh) + b_h           # (batch, seq_len, d_h)
    outputs = driven.new_empty(n_batch, n_steps, W_hh.shape[1])
    state = h0
    for step in range(n_steps):
        # addmm(M, A, B) = M + A @ B: the recurrent term added to this step's input part
        state = torch.tanh(torch.addmm(driven[:, step], state, W_hh))
        outputs[:, step] = state
    return outputs, state


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
    inputs = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        _, last = rnn_forward(inputs, h0, W_xh, W_hh, b_h)
        (grad_x,) = torch.autograd.grad(last.sum(), inputs)
    # one norm per step, over batch (dim 0) and features (dim 2)
    return torch.linalg.vector_norm(grad_x.detach(), ord=2, dim=(0, 2))
