"""The grading library that hidden tests call.

Expected values come from PyTorch built-ins (``F.scaled_dot_product_attention``, ``nn.RNN``,
``nn.MultiheadAttention``...) with weights copied from the learner's module, from invariants,
or from weights injected into it; never from a solutions module. Each check stops at the first
failure (type -> shape -> dtype/device -> finite -> values) and names the likely mistake by
comparing a wrong answer with the classic mistakes computed the same way.

Every check returns ``None`` so that nbgrader never reads a test cell's output as partial
credit.
"""

from __future__ import annotations

import functools

import torch

from course.checking import (
    CheckFailure,
    assert_close,
    call,
    expect_module,
    expect_tensor,
    matches,
    note_value_checked,
)

__all__ = [
    "CheckFailure",
    "assert_close",
    "call",
    "compare",
    "diagnose",
    "expect_module",
    "expect_tensor",
    "rng",
    "trusted_mnist",
    "trusted_tinyshakespeare",
]


@functools.cache
def trusted_mnist():
    """The MNIST split, loaded here from the course's verified dataset files.

    Checks that need real digits use this, never the notebook's ``mnist``: what the kernel
    holds is the learner's word (it could be any tensors).
    """
    from course.data import load_mnist

    return load_mnist()


@functools.cache
def trusted_tinyshakespeare() -> str:
    """Tiny Shakespeare, read here from the course's verified dataset file (see
    ``trusted_mnist``: the notebook's ``text`` is the kernel's word)."""
    from course.data import load_tinyshakespeare

    return load_tinyshakespeare()


def rng(seed: int) -> torch.Generator:
    """A CPU generator with a fixed seed: hidden tests never depend on global RNG state."""
    return torch.Generator().manual_seed(seed)


def diagnose(actual: object, candidates: dict[str, torch.Tensor], rtol: float = 1e-4,
             atol: float = 1e-5) -> str:
    """The diagnosis of the first candidate mistake whose result equals ``actual``, else ''."""
    for diagnosis, wrong in candidates.items():
        if matches(actual, wrong, rtol=rtol, atol=atol):
            return diagnosis
    return ""


def compare(actual: torch.Tensor, expected: torch.Tensor, name: str,
            candidates: dict[str, torch.Tensor] | None = None, rtol: float = 1e-5,
            atol: float = 1e-6, hint: str = "") -> None:
    """``assert_close`` whose hint names the classic mistake that reproduces ``actual``."""
    actual = expect_tensor(actual, name, shape=tuple(expected.shape))
    if matches(actual, expected, rtol=rtol, atol=atol):
        note_value_checked()
        return
    found = diagnose(actual, candidates or {})
    assert_close(actual, expected, name, rtol=rtol, atol=atol, hint=found or hint)
