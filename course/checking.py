"""Small checking helpers with messages that teach.

Both the visible checks a learner runs (``course.checks``) and the hidden tests
(``autograder.judge.checks``) are built from these helpers, so a failure always reads the same
way: which function, what was expected, what came back, and the likely mistake.

Every check raises :class:`CheckFailure` (an ``AssertionError``), so nbgrader scores a failed
check as a failed test cell and shows the message.

The advice a message carries (a hint for a PyTorch error, where two tensors differ) comes from
:mod:`course.advice`. What the judge knows while one hidden check runs (how to make an object
in the kernel, the check's key, what it forbade, how many values it compared, any grader bug)
is one :class:`JudgeContext`, set by ``autograder.judge.run`` for that check
(:func:`judging`) and read at call time (:func:`context`); without a judge, one process-wide
context stands for "no kernel". This module imports no other module of the course but
:mod:`course.advice`; :mod:`course.probes` imports it.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# Re-exported: `from course.checking import localise, _hint_for` keeps working.
from course.advice import _hint_for, localise

__all__ = [
    "CheckFailure",
    "assert_close",
    "call",
    "expect_module",
    "expect_tensor",
    "forbid",
    "quiet",
    "passed",
]


class CheckFailure(AssertionError):
    """A check failed; the message says what was expected and the likely mistake."""


class GraderBug(Exception):
    """A hidden check broke a rule of the judge (an expected value computed from the kernel's
    word): the grader's fault, never the learner's. The judge reports it as such."""


class KernelTensor(torch.Tensor):
    """A tensor whose values the learner's kernel sent: the kernel's word, not a fact.

    The judge (``autograder.judge.remote``) marks every tensor that comes back from the kernel as
    one, and PyTorch's subclass propagation keeps the mark on every result computed from it
    (``F.linear(x, module.W_Q.weight)`` is a KernelTensor when the weight came from the
    kernel). :func:`assert_close` refuses one as an *expected* value (:class:`GraderBug`), so
    a check that builds what it expects from what the kernel reports fails on the answer key
    in ``verify`` instead of paying a forged module. Copying one into the judge's own tensor
    in place (``ref.weight.copy_(module.W_O.weight)``, ``load_state_dict``, ``t[i] = ...``),
    which would wash the mark off, raises :class:`GraderBug` too.
    """

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if (name.endswith("_") and not name.endswith("__")) or name in (
                "__setitem__", "__ior__", "__iand__", "__iadd__", "__isub__", "__imul__",
                "__itruediv__"):
            target = args[0] if args else None
            if isinstance(target, torch.Tensor) and not isinstance(target, KernelTensor) \
                    and any(isinstance(a, KernelTensor) for a in (*args[1:],
                                                                  *kwargs.values())):
                raise _bug(f"{name} would copy values the learner's kernel reported "
                           "into one of the judge's own tensors")
        return super().__torch_function__(func, types, args, kwargs)


def _identity(value: Any) -> Any:
    return value


@dataclass
class JudgeContext:
    """What the judge knows while one hidden check runs; :func:`judging` sets one per check.

    - ``make(factory, args, kwargs)`` makes an object where the learner's code runs and
      returns a proxy of it (:func:`in_kernel`); None when checks run in one process;
    - ``local_value`` fetches a tensor that still lives in the kernel (identity here);
    - ``key`` is the check's key, ``seed_map`` derives from it the seeds sent to the kernel
      (``autograder.judge.checks.seeded``; identity without a judge);
    - ``forbid`` the functions the innermost :func:`forbid` blocks (sent with each call into
      the kernel), ``forbidden`` every path any ``forbid`` of the check named (the verdict's
      record, which the host's static review backs);
    - ``value_checks`` counts the comparisons of a learner's values with expected values;
    - ``bugs`` every :class:`GraderBug` raised, kept even if a check (or PyTorch, as
      ``load_state_dict`` does) catches it: the judge then reports the grader's error.
    """

    make: Callable[..., Any] | None = None
    local_value: Callable[[Any], Any] = _identity
    key: bytes = b""
    seed_map: Callable[[int], int] = _identity
    forbid: list[str] = field(default_factory=list)
    forbidden: list[str] = field(default_factory=list)
    value_checks: int = 0
    bugs: list[str] = field(default_factory=list)


_ONE_PROCESS = JudgeContext()                 # checks run without a judge (visible checks)
_JUDGE: contextvars.ContextVar[JudgeContext | None] = contextvars.ContextVar(
    "course_judge_context", default=None)


def context() -> JudgeContext:
    """The running check's :class:`JudgeContext` (the one-process context without a judge)."""
    return _JUDGE.get() or _ONE_PROCESS


@contextlib.contextmanager
def judging(ctx: JudgeContext) -> Iterator[JudgeContext]:
    """Run the block as one hidden check of the judge, with ``ctx`` as its context."""
    token = _JUDGE.set(ctx)
    try:
        yield ctx
    finally:
        _JUDGE.reset(token)


def _bug(message: str) -> GraderBug:
    context().bugs.append(message)
    return GraderBug(message)


def from_kernel(value: Any) -> bool:
    """True when ``value`` is (computed from) a tensor the learner's kernel sent."""
    return isinstance(value, KernelTensor)


def trusted(value: torch.Tensor) -> torch.Tensor:
    """``value`` as a plain tensor, for a check that must use the kernel's numbers on
    purpose (an invariant of the learner's own outputs, a diagnosis): never an expected value."""
    return value.as_subclass(torch.Tensor) if isinstance(value, KernelTensor) else value


def note_value_checked() -> None:
    """Count one successful comparison of a learner's values with expected values."""
    context().value_checks += 1


def in_kernel(factory: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``factory(*args, **kwargs)``, made where the learner's code runs.

    A check hands the learner's function objects it made (an optimizer over a model's
    parameters, a random generator, a probe model). In grading the learner's code runs in
    another process, so the judge asks that process to make the object (``factory`` must
    be a public class or function of ``course.probes``, ``course.references``,
    ``course.standins``, ``torch.nn`` or ``torch.optim``, or ``torch.Generator``) and gets
    back a proxy of it. Without a judge this is a plain call.
    """
    make = context().make
    if make is None:
        return factory(*args, **kwargs)
    return make(factory, args, kwargs)


def generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with the judge's ``seed_map(seed)``, where the learner's
    code runs.

    In grading the kernel makes the generator and seeds it (its ``manual_seed`` returns it).
    This module imports nothing of :mod:`course.probes` (which imports it).
    """
    return in_kernel(torch.Generator).manual_seed(context().seed_map(seed))


def twin(module: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
    """An equal copy of ``module`` where the learner's code runs: same class, weights
    (parameters and buffers), gradients and train/eval mode.

    ``args``/``kwargs`` are its constructor arguments; a ``course.probes.Probe`` remembers
    its own. Without a judge this is ``copy.deepcopy(module)``.
    """
    import copy

    make = context().make
    if make is None:
        return copy.deepcopy(module)
    if not args and not kwargs:
        args, kwargs = getattr(module, "init_args", ((), {}))
    other = make(type(module), args, kwargs)
    with torch.no_grad():
        other.load_state_dict({k: v.detach() for k, v in module.state_dict().items()})
    grads = {n: p.grad for n, p in module.named_parameters() if p.grad is not None}
    if grads:
        params = dict(other.named_parameters())
        for name, grad in grads.items():
            params[name].grad = grad
    other.train(module.training)
    return other


def observe(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` where the learner's code runs, for a fact only that process can tell
    (the hooks still registered on a model): in grading, the kernel's word (a check that
    reads one is declared ``observed``)."""
    return in_kernel(fn, *args)


def record(probe: Any, name: str) -> Any:
    """A probe's record (``probe.modes``, ``probe.inputs``): what the learner's process says
    happened. In grading it is the kernel's word: a check whose verdict rests on it is
    declared ``observed`` (see ``autograder.judge.gate``)."""
    return getattr(probe, name)



@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence Python warnings and stderr while a check runs.

    nbgrader scores a test cell that writes anything to stderr as failed, so a PyTorch
    deprecation warning raised inside a learner's correct code must not reach stderr.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()):
            yield


def call(fn: Callable[..., Any], *args: Any, name: str | None = None, **kwargs: Any) -> Any:
    """Call a learner's function or class; turn a crash into a :class:`CheckFailure` with advice.

    Raises:
        CheckFailure: if ``fn`` raised; the message names the function, the error and a hint.
    """
    label = name or getattr(fn, "__name__", repr(fn))
    try:
        with quiet():
            return fn(*args, **kwargs)
    except CheckFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - any learner error becomes a readable failure
        raise CheckFailure(
            f"{label} raised {type(exc).__name__}: {exc}\nHint: {_hint_for(exc)}"
        ) from exc


def expect_tensor(
    value: Any,
    name: str,
    shape: Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    finite: bool = True,
) -> torch.Tensor:
    """Check, in this order, type -> shape -> dtype -> finite values. Returns ``value``.

    The type must be exactly ``torch.Tensor`` (or ``nn.Parameter``): an object that merely
    pretends (a subclass whose ``__eq__`` or ``allclose`` always says yes) is rejected.
    """
    value = context().local_value(value)
    if type(value) not in (torch.Tensor, torch.nn.Parameter, KernelTensor):
        raise CheckFailure(
            f"{name} should be a torch.Tensor, got {type(value).__module__}."
            f"{type(value).__qualname__}."
            + (" Did you return a tuple or forget to return?" if value is None or
               isinstance(value, tuple) else "")
        )
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise CheckFailure(
            f"{name} has shape {tuple(value.shape)}, expected {tuple(shape)}."
        )
    if dtype is not None and value.dtype != dtype:
        raise CheckFailure(f"{name} has dtype {value.dtype}, expected {dtype}.")
    if finite and value.is_floating_point() and not bool(torch.isfinite(value).all()):
        n_nan = int(torch.isnan(value).sum())
        n_inf = int(torch.isinf(value).sum())
        raise CheckFailure(
            f"{name} contains {n_nan} NaN and {n_inf} infinite values. Hint: large inputs "
            "overflow exp(); subtract the row maximum before exponentiating, and never "
            "multiply 0 by -inf."
        )
    return value


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    name: str,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    hint: str = "",
    step: str = "",
    labels: Sequence[str] | None = None,
) -> None:
    """Compare values with stated tolerances; report the worst element, the first step of
    the computation that differs (``step``, see ``autograder.judge.checks.first_difference``),
    how the values differ (``localise``) and a hint.

    ``labels`` names the entries of a 1-D value (the keys of a dictionary): the message then
    names the entries that differ instead of locating indices, which mean nothing there.

    Raises:
        GraderBug: ``expected`` was computed from values the learner's kernel sent.
        CheckFailure: the values differ (or ``actual`` is no tensor of that shape).
    """
    refuse_kernel_expected(expected, name)
    actual = expect_tensor(actual, name, shape=tuple(expected.shape))
    a = trusted(actual).detach().to(torch.float64)
    e = trusted(expected).detach().to(torch.float64)
    if torch.allclose(a, e, rtol=rtol, atol=atol):
        note_value_checked()
        return
    diff = (a - e).abs()
    worst = int(diff.argmax())
    if labels is not None and a.dim() == 1 and len(labels) == a.numel():
        off = ~torch.isclose(a, e, rtol=rtol, atol=atol)                  # (N,)
        differ = [labels[i] for i in off.nonzero().flatten().tolist()]
        raise CheckFailure(
            f"{name} differs from the expected values (rtol={rtol}, atol={atol}) for "
            f"{', '.join(repr(n) for n in differ)}: the largest difference is at "
            f"{labels[worst]!r} (got {float(a[worst]):.6g}, expected {float(e[worst]):.6g})."
            + (f"\nStep: {step}." if step else "")
            + (f"\nHint: {hint}" if hint else ""))
    idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), a.shape))
    where = localise(a, e, rtol=rtol, atol=atol)
    raise CheckFailure(
        f"{name} differs from the expected values (rtol={rtol}, atol={atol}): "
        f"max abs difference {float(diff.max()):.3g} at index {idx} "
        f"(got {float(a[idx]):.6g}, expected {float(e[idx]):.6g})."
        + (f"\nStep: {step}." if step else "")
        + (f"\nWhere: {where}." if where else "")
        + (f"\nHint: {hint}" if hint else "")
    )


def refuse_kernel_expected(expected: Any, name: str) -> None:
    """Raise :class:`GraderBug` when ``expected`` comes from the kernel's word."""
    if from_kernel(expected):
        raise _bug(f"the expected value of {name} was computed from values the "
                   "learner's kernel reported; a check must build it from what the "
                   "judge chose and kept")



def matches(actual: Any, expected: torch.Tensor, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    """True when ``actual`` is a real tensor equal to ``expected`` (used to name mistakes)."""
    actual = context().local_value(actual)
    if type(actual) not in (torch.Tensor, torch.nn.Parameter, KernelTensor):
        return False
    if tuple(actual.shape) != tuple(expected.shape):
        return False
    return bool(
        torch.allclose(trusted(actual).detach().double(), trusted(expected).detach().double(),
                       rtol=rtol, atol=atol)
    )


def expect_module(cls: Any, *args: Any, name: str | None = None, **kwargs: Any) -> torch.nn.Module:
    """Instantiate a learner's ``nn.Module`` subclass, with advice if that fails."""
    label = name or getattr(cls, "__name__", repr(cls))
    module = call(cls, *args, name=f"{label}({', '.join(map(repr, args))})", **kwargs)
    if not isinstance(module, torch.nn.Module):
        raise CheckFailure(f"{label} should be an nn.Module subclass, got {type(module)}.")
    return module


@contextlib.contextmanager
def forbid(*paths: str) -> Iterator[list[str]]:
    """Make library functions raise while a check runs, to grade "write it yourself" exercises.

    ``paths`` are dotted names such as ``"torch.softmax"`` or ``"torch.Tensor.softmax"``.
    Yields the list of forbidden names that were called.
    """
    called: list[str] = []
    saved: list[tuple[Any, str, Any]] = []

    def _make(path: str) -> Callable[..., Any]:
        def _blocked(*_args: Any, **_kwargs: Any) -> Any:
            called.append(path)
            raise CheckFailure(
                f"this exercise asks you to write it yourself, but your code called {path}."
            )

        return _blocked

    import importlib

    for path in paths:
        owner_path, attr = path.rsplit(".", 1)
        parts = owner_path.split(".")
        owner: Any = importlib.import_module(parts[0])
        for part in parts[1:]:
            owner = getattr(owner, part)
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, _make(path))
    ctx = context()
    ctx.forbidden.extend(p for p in paths if p not in ctx.forbidden)
    outer = list(ctx.forbid)
    ctx.forbid[:] = [*outer, *paths]
    try:
        yield called
    finally:
        ctx.forbid[:] = outer
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


def passed(message: str) -> None:
    """Print a one-line success message for a visible check."""
    print(f"\u2705 {message}")
