"""The grading library that hidden tests call.

Expected values come only from what the judge chose and kept: its inputs, the weights it
injects into the learner's module (:func:`inject`, and keeps its own copy of), PyTorch
built-ins (``F.scaled_dot_product_attention``, ``nn.RNN``, ``nn.MultiheadAttention``...) run
on those, and its own data; never from anything the kernel reports (every tensor the kernel
sends is a :class:`course.checking.KernelTensor`, and :func:`compare` refuses one as the
expected value), never from a solutions module. Each check stops at the first failure (type ->
shape -> dtype/device -> finite -> values) and names the likely mistake by comparing a wrong
answer with the classic mistakes computed the same way.

Every random input comes from :func:`rng` or :func:`manual_seed`, whose seeds the judge
derives from a secret of the grader's and the submission (:func:`seeded`): nobody knows a
check's inputs in advance, and the same submission graded twice gets the same inputs.

Every check declares its kind where it is written: :func:`value_check` (it compares the
learner's results with values computed here) or :func:`observed_check` (it takes the
kernel's word: structure, counts, the device audit, probe records, training history), which
the judge pays only when the value checks of the same names passed.

Every check returns ``None`` so that nbgrader never reads a test cell's output as partial
credit.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from autograder.judge.bounded import SHOWN, call, expect_module, shown, token_ids
from course import checking
from course.checking import (
    CheckFailure,
    GraderBug,
    assert_close,
    expect_tensor,
    from_kernel,
    matches,
    note_value_checked,
    trusted,
)

__all__ = [
    "CheckFailure",
    "GraderBug",
    "Step",
    "assert_close",
    "call",
    "compare",
    "derive",
    "diagnose",
    "expect_module",
    "expect_tensor",
    "expect_unchanged",
    "first_difference",
    "from_kernel",
    "inject",
    "manual_seed",
    "observed_check",
    "permutation",
    "randomize",
    "seeded",
    "SHOWN",
    "shown",
    "token_ids",
    "trusted",
    "upstream",
    "value_check",
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


def value_check(fn: Callable) -> Callable:
    """Declare ``fn`` a value check: it compares the learner's results with values the judge
    computed from what it chose and kept."""
    fn.kind = "value"
    return fn


def observed_check(fn: Callable) -> Callable:
    """Declare ``fn`` an observation: it takes the kernel's word (structure, counts, the
    device audit, a probe's record, hooks, a training history). Paid only when every value
    check judging one of the same names passed (``autograder.judge.gate``)."""
    fn.kind = "observed"
    return fn


def leans_on(*checks: str) -> Callable[[Callable], Callable]:
    """Declare which value checks (function names) an observed check's code path needs: the
    gate then withholds it only when one of those fails, not for every failure of the same
    name. An observed check of ``generate``'s cropping leans on the plain sampling check, not
    on top-p (``autograder.judge.gate``)."""
    def mark(fn: Callable) -> Callable:
        fn.leans_on = checks
        return fn
    return mark


@contextlib.contextmanager
def seeded(key: bytes) -> Iterator[None]:
    """Derive every seed of the checks run inside from ``key`` (the judge's, per submission
    and test), in the judge and in what it asks the kernel to make
    (``course.checking.generator``): the running check's context holds the key (b"" when
    checks run in one process without a judge)."""
    ctx = checking.context()
    saved_key, saved_map = ctx.key, ctx.seed_map
    ctx.key, ctx.seed_map = key, derive
    try:
        yield
    finally:
        ctx.key, ctx.seed_map = saved_key, saved_map


def derive(seed: int | str) -> int:
    """The seed a check's ``seed`` stands for under the running key (63 bits)."""
    digest = hmac.new(checking.context().key, f"seed:{seed}".encode(),
                      hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def rng(seed: int) -> torch.Generator:
    """A CPU generator for one of a check's random inputs: its seed is derived from ``seed``
    and the judge's key (:func:`seeded`), so no one knows the inputs in advance; the same
    key gives the same inputs. Hidden tests never depend on global RNG state."""
    return torch.Generator().manual_seed(derive(seed))


def manual_seed(seed: int) -> None:
    """Seed this process's global RNG (modules the judge builds, its own init) like
    :func:`rng`."""
    torch.manual_seed(derive(seed))


def permutation(n: int, seed: int) -> torch.Tensor:
    """A random order of ``range(n)`` (int64), drawn like :func:`rng`."""
    return torch.randperm(n, generator=rng(seed))


def inject(module: Any, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Load the judge's ``weights`` ({state_dict name: tensor}) into the learner's module and
    return the judge's own copy, from which every expected value is computed.

    Raises:
        CheckFailure: the module has no parameter or buffer of one of those names or shapes.
    """
    kept = {name: trusted(w).detach().clone() for name, w in weights.items()}
    state = _state(module)
    for name, w in kept.items():
        if name not in state:
            raise CheckFailure(f"the module has no parameter or buffer {name!r} (its names: "
                               f"{', '.join(list(state)[:12])})")
        if not isinstance(state[name], torch.Tensor):
            raise CheckFailure(f"{name} in the module's state_dict() is not a tensor")
        if tuple(state[name].shape) != tuple(w.shape):
            raise CheckFailure(f"{name} has shape {tuple(state[name].shape)}, expected "
                               f"{tuple(w.shape)}")
    with torch.no_grad():
        module.load_state_dict(kept, strict=False)
    return kept


def _state(module: Any) -> dict[str, Any]:
    """The module's ``state_dict()`` as a local {name: tensor} dict, for shape and "unchanged"
    checks only (never an expected value). A kernel's state dict (an ``OrderedDict``, which
    travels as a reference) is read with one ``items()`` request instead of a request per
    ``in`` and per ``[name]``; names that are not strings are left out."""
    return {k: v for k, v in module.state_dict().items() if isinstance(k, str)}


def randomize(module: Any, seed: int, dtype: torch.dtype = torch.float64,
              skip: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """Inject fresh random weights of the judge's into every parameter of the learner's module
    (names and shapes as the module lists them; values drawn like :func:`rng`) and return the
    judge's copy. Matrices get ``randn / sqrt(fan_in)``, vectors named ``...weight`` (norm
    gains) ``1 + 0.2 randn``, other vectors (biases) ``0.2 randn``: non-default everywhere, so
    a forgotten gain or bias shows. Parameters whose name starts with one of ``skip`` keep
    their values (and stay out of the copy)."""
    g = rng(seed)
    weights = {}
    for name, p in module.named_parameters():
        if name.startswith(skip) if skip else False:
            continue
        shape = tuple(p.shape)
        if len(shape) >= 2:
            w = torch.randn(shape, generator=g, dtype=dtype) / max(1, shape[-1]) ** 0.5
        elif name.endswith("weight"):
            w = 1 + 0.2 * torch.randn(shape, generator=g, dtype=dtype)
        else:
            w = 0.2 * torch.randn(shape, generator=g, dtype=dtype)
        weights[name] = w
    return inject(module, weights)


def expect_unchanged(module: Any, kept: dict[str, torch.Tensor], when: str = "forward") -> None:
    """Fail when the module's weights are no longer what the judge injected (:func:`inject`):
    "forward changed the module's parameters (W_Q.weight)". Read back only to say so: the
    expected values never come from what is read here."""
    state = _state(module)
    changed = [name for name, w in kept.items()
               if name not in state or not matches(state[name], w, rtol=0, atol=0)]
    if changed:
        raise CheckFailure(f"{when} changed the module's parameters ({', '.join(changed[:4])}): "
                           "a forward pass must use the weights it holds, not change them")


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
            where: str = "", labels: Sequence[str] | None = None) -> None:
    """``assert_close`` whose hint names the classic mistake that reproduces ``actual``.

    When no catalogued mistake does, ``steps`` (the quantities computed before this value,
    in order) and ``where`` (where the mistake is when they all match) name the first step
    of the computation that differs (see ``first_difference``). ``labels`` names the entries
    of a 1-D value (a dictionary's keys, in order): the message names those that differ.
    """
    checking.refuse_kernel_expected(expected, name)
    actual = expect_tensor(actual, name, shape=tuple(expected.shape))
    if matches(actual, expected, rtol=rtol, atol=atol):
        note_value_checked()
        return
    found = diagnose(actual, candidates or {})
    step = "" if found else first_difference(steps, name, where, rtol=rtol, atol=atol)
    assert_close(actual, expected, name, rtol=rtol, atol=atol, hint=found or hint, step=step,
                 labels=labels)


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
