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

import contextlib
import functools
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

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
    "Step",
    "assert_close",
    "call",
    "compare",
    "diagnose",
    "expect_module",
    "expect_tensor",
    "first_difference",
    "upstream",
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


@dataclass(frozen=True)
class Step:
    """One quantity the learner's computation produces on the way to the value checked.

    ``actual`` is the learner's value, or a function (lambda or def) that computes it
    (called only when the check fails: it may run more of the learner's code); ``expected``
    the reference value, or a function that computes it; ``where`` says where the mistake
    is when this is the first quantity that differs
    ("before or in the softmax: ..."). Steps are listed in the order the computation makes
    them.
    """

    name: str
    actual: Any
    expected: torch.Tensor | Callable[[], torch.Tensor]
    where: str


def first_difference(steps: Sequence[Step], name: str, where: str, rtol: float = 1e-5,
                     atol: float = 1e-6) -> str:
    """Which intermediate quantity differs first, for the message of a failed value check.

    ``name``/``where`` describe the checked value itself, which differs. Returns, e.g.,
    "attn_weights matches; output does not: the mistake is after the softmax: ...",
    or "self.attn_weights already differ: the mistake is before or in the softmax: ...".
    A step whose value cannot be computed (the learner's code raised) is left out.
    """
    same: list[str] = []
    for step in steps:
        try:
            with torch.no_grad():
                got = _value(step.actual)
                want = _value(step.expected)
        except Exception:  # noqa: BLE001 - the learner's code may fail here; say nothing of it
            continue
        if matches(got, want, rtol=rtol, atol=atol):
            same.append(step.name)
            continue
        if same:
            return f"{_agree(same)}; {step.name} does not: the mistake is {step.where}"
        return f"{step.name} already differs: the mistake is {step.where}"
    if not same or not where:
        return ""
    return f"{_agree(same)}; {name} does not: the mistake is {where}"


def _value(v: Any) -> Any:
    """A step's value: called when it is a function (a lambda or def written in a check);
    a proxy of the kernel's tensor is callable too, but it is a value."""
    return v() if isinstance(v, types.FunctionType) else v


def _agree(names: list[str]) -> str:
    """'a matches', 'a and b match', 'a, b and c match'."""
    if len(names) == 1:
        return f"{names[0]} matches"
    return f"{', '.join(names[:-1])} and {names[-1]} match"


def compare(actual: torch.Tensor, expected: torch.Tensor, name: str,
            candidates: dict[str, torch.Tensor] | None = None, rtol: float = 1e-5,
            atol: float = 1e-6, hint: str = "", steps: Sequence[Step] = (),
            where: str = "") -> None:
    """``assert_close`` whose hint names the classic mistake that reproduces ``actual``.

    When no catalogued mistake does, ``steps`` (the quantities computed before this value,
    in order) and ``where`` (where the mistake is when they all match) name the first step
    of the computation that differs (see ``first_difference``).
    """
    actual = expect_tensor(actual, name, shape=tuple(expected.shape))
    if matches(actual, expected, rtol=rtol, atol=atol):
        note_value_checked()
        return
    found = diagnose(actual, candidates or {})
    step = "" if found else first_difference(steps, name, where, rtol=rtol, atol=atol)
    assert_close(actual, expected, name, rtol=rtol, atol=atol, hint=found or hint, step=step)


@contextlib.contextmanager
def upstream(*parts: tuple[str, Callable[[], bool]]) -> Iterator[None]:
    """When the check inside fails, name the earlier exercise that fails first.

    ``parts`` are (what fails, a function that tells whether that part is right), in the
    order the computation uses them: "your RotaryEmbedding fails day14_rope_convention". The
    message then begins "This fails because <what fails>: fix that first." A part whose
    test raises counts as failing.
    """
    try:
        yield
    except CheckFailure as exc:
        for label, right in parts:
            try:
                with torch.no_grad():
                    ok = bool(right())
            except Exception:  # noqa: BLE001 - a part that cannot even run is not right
                ok = False
            if not ok:
                raise CheckFailure(f"This fails because {label}: fix that first.\n{exc}") \
                    from None
        raise
