"""What the judge puts in the place of a learner's function or model while it grades another.

One mistake should cost one exercise: a learner's attention is graded with PyTorch's softmax in
place of theirs (``ReferenceSoftmax``), Day 1's gradient experiment with ``nn.RNN`` in place of
their ``rnn_forward``, Day 8's training loop on the course's classifier, and the learner's
classifier with the course's loop. These objects must live where the learner's code runs (the
graded kernel), so unlike the stand-ins (:mod:`course.standins`, of earlier days only) they are
in every kernel; each is a working answer of an exercise. The judge therefore reads every
submitted cell in the grading process, and a cell that reaches this module (or any other of the
course's internals) earns nothing for what it defines (:mod:`autograder.judge.internals`).

Letters in shape comments: B batch, T sequence length, C = d_model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ReferenceRNNForward", "ReferenceSequenceClassifier", "ReferenceSoftmax",
           "reference_fit"]


class ReferenceSoftmax:
    """``torch.softmax(x, dim)`` as a plain callable: what the judge puts in the place of a
    learner's ``softmax`` while it grades a function that calls it (:class:`GlobalSwapped`),
    so that a wrong softmax costs the softmax exercise alone."""

    def __call__(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return torch.softmax(x, dim=dim)


class ReferenceRNNForward:
    """Day 1's ``rnn_forward(x, h0, W_xh, W_hh, b_h) -> (outputs, h_last)`` computed by
    ``torch.nn.RNN`` (tanh, the same weights: it stores them transposed), differentiable with
    respect to ``x``. What the judge puts in the place of a learner's ``rnn_forward`` while it
    grades ``gradient_norms_through_time`` (:class:`GlobalSwapped`).

    Shapes: x (B, T, d_in), h0 (B, d_h), W_xh (d_in, d_h), W_hh (d_h, d_h), b_h (d_h,);
    outputs (B, T, d_h), h_last (B, d_h).
    """

    def __call__(self, x, h0, W_xh, W_hh, b_h):
        d_in, d_h = W_xh.shape
        rnn = nn.RNN(d_in, d_h, batch_first=True, dtype=x.dtype)
        with torch.no_grad():
            rnn.weight_ih_l0.copy_(W_xh.T)
            rnn.weight_hh_l0.copy_(W_hh.T)
            rnn.bias_ih_l0.copy_(b_h)
            rnn.bias_hh_l0.zero_()
        outputs, h_n = rnn(x, h0.unsqueeze(0))           # (B, T, d_h), (1, B, d_h)
        return outputs, h_n.squeeze(0)


def reference_fit(model: nn.Module, loader, optimizer: torch.optim.Optimizer) -> None:
    """One pass of the plainest training loop over ``loader`` (cross-entropy, backward, step):
    what Day 8's hidden tests train a learner's ``SequenceClassifier`` with (Day 9's loop is
    not in Day 8's kernel). A learner's answer cell that reaches it earns nothing."""
    model.train()
    for inputs, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()


class ReferenceSequenceClassifier(nn.Module):
    """Day 8's ``SequenceClassifier``, built on the stand-ins of Days 5 and 6 (imported when
    one is made, so that this module loads in every kernel): the model Day 8's hidden tests
    hand a learner's ``overfit_one_batch``, and :class:`course.standins.day08.SequenceClassifier`.
    A learner's answer cell that reaches it earns nothing for its exercise.

    ``input_proj`` (Linear input_dim -> d_model), ``cls_token`` (1, 1, d_model),
    ``pos_encoding`` (sinusoidal, for max_len + 1 positions), ``layers`` (ModuleList of Pre-LN
    encoder layers), ``norm`` (final LayerNorm), ``head`` (Linear d_model -> num_classes).
    ``forward(x)``: (B, T, input_dim) -> logits (B, num_classes), read at the CLS position 0.
    """

    def __init__(self, input_dim: int, num_classes: int, d_model: int, num_heads: int,
                 d_ff: int, num_layers: int, max_len: int) -> None:
        super().__init__()
        from course.standins.day05 import SinusoidalPositionalEncoding
        from course.standins.day06 import TransformerEncoderLayer

        self.input_proj = nn.Linear(input_dim, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_encoding = SinusoidalPositionalEncoding(d_model, max_len + 1)
        self.layers = nn.ModuleList(TransformerEncoderLayer(d_model, num_heads, d_ff)
                                    for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.input_proj(x)                                       # (B, T, C)
        h = torch.cat([self.cls_token.expand(len(h), -1, -1), h], 1)  # (B, T + 1, C)
        h = self.pos_encoding(h)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h)[:, 0])                         # (B, classes)
