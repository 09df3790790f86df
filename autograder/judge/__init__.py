"""The judge: runs a hidden test cell's check in the grading process, never in the kernel.

Every hidden test cell has one shape::

    ### BEGIN HIDDEN TESTS
    from autograder.judge.checks import day03 as hidden
    hidden.check_mask(SelfAttention)
    ### END HIDDEN TESTS

The judge parses that call (:func:`parse_hidden_cell`), imports the check from the course's
own ``autograder.judge.checks`` (trusted code; nothing a submission wrote), and runs it with the
notebook's names replaced by :class:`autograder.judge.remote.Proxy` objects: the check builds its
inputs, expected values and candidate mistakes here, asks the kernel only to run the
learner's code on those inputs (:mod:`course.agent`), and compares here. The hidden cell
itself is never sent to the kernel.

A :class:`Verdict` says whether the check passed, its message, the learner names it judged
and its *kind*, which the check declares where it is written
(``autograder.judge.checks.value_check``
or ``observed_check``): ``value`` when it compares the learner's results with values computed
here, ``observed`` when it takes the kernel's word (structure the kernel reports, the device
audit, a probe's record). :func:`gate` awards an observed check only when the value checks of
the same names passed. A check that forbade a built-in is backed by :func:`static_review` of
the submitted source.

Every seed a check uses is derived from ``key`` (:func:`check_key`: the grader's secret, the
submission and the test), so the judge's inputs differ from submission to submission and
nobody can know them in advance; a tensor the kernel sends is marked as the kernel's word
(``course.checking.KernelTensor``) and can never be an expected value.

Package: this module runs one check; :mod:`~autograder.judge.remote` is the judge's side of
the wire to the kernel; :mod:`~autograder.judge.checks` the hidden tests. It may import
:mod:`autograder.core` and :mod:`course` only; grading is above it.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import importlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from course import checking

CHECKS_PACKAGE = "autograder.judge.checks"


class NotJudgeable(ValueError):
    """A hidden test cell that is not one call of a check with the notebook's names."""


@dataclass
class HiddenCall:
    module: str                       # autograder.judge.checks.dayNN
    function: str                     # check_...
    args: list[tuple[str, Any]]       # ("name", notebook global) or ("const", literal)
    kwargs: dict[str, tuple[str, Any]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The notebook's globals the check judges (``mnist`` for ``mnist.heldout_labels``)."""
        return [v.split(".")[0] for k, v in [*self.args, *self.kwargs.values()]
                if k == "name"]


@dataclass
class Verdict:
    passed: bool
    message: str
    names: list[str]
    kind: str = "value"               # "value" or "observed"
    forbidden: list[str] = field(default_factory=list)
    stopped: str = ""                 # the kernel timed out ("timeout") or died ("died")
    internal: str = ""                # the grader's own failure (never the learner's)
    check: str = ""                   # the check function's name
    leans_on: list[str] = field(default_factory=list)   # observed: the value checks it needs

    def to_json(self) -> dict:
        return asdict(self)


def _hidden_part(source: str) -> str:
    m = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", source, re.S)
    return m.group(1) if m else source


def _dotted(node: ast.expr) -> str | None:
    """``a`` or ``a.b.c`` for a name or a chain of attributes of a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _arg(node: ast.expr) -> tuple[str, Any]:
    dotted = _dotted(node)
    if dotted is not None:
        return ("name", dotted)
    try:
        return ("const", ast.literal_eval(node))
    except ValueError as exc:
        raise NotJudgeable(f"argument {ast.unparse(node)!r} is neither a notebook name nor "
                           "a literal") from exc


def parse_hidden_cell(source: str) -> HiddenCall:
    """The check call of a hidden test cell. Raises NotJudgeable for any other shape."""
    try:
        tree = ast.parse(_hidden_part(source))
    except SyntaxError as exc:
        raise NotJudgeable(f"hidden test does not parse: {exc}") from exc
    alias_to_module: dict[str, str] = {}
    call = None
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == CHECKS_PACKAGE:
            for a in stmt.names:
                alias_to_module[a.asname or a.name] = f"{CHECKS_PACKAGE}.{a.name}"
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and call is None:
            call = stmt.value
        else:
            raise NotJudgeable(f"unexpected statement in a hidden test: {ast.unparse(stmt)}")
    if call is None or not (isinstance(call.func, ast.Attribute)
                            and isinstance(call.func.value, ast.Name)
                            and call.func.value.id in alias_to_module):
        raise NotJudgeable("a hidden test must call one check: hidden.check_...(names)")
    return HiddenCall(alias_to_module[call.func.value.id], call.func.attr,
                      [_arg(a) for a in call.args],
                      {k.arg: _arg(k.value) for k in call.keywords if k.arg})


def warm_up(hidden_sources: list[str]) -> None:
    """Pay this process's one-off costs before the first hidden test, while the kernel runs
    the notebook's first cells: import the check modules the hidden cells call and, when
    one of them steps an optimizer here (``JUDGE_STEPS_OPTIMIZERS``), take one step:
    PyTorch imports its compiler stack on the first ``step()``, about a second, which no
    other day needs to pay."""
    import course.probes  # noqa: F401

    names = []
    for source in hidden_sources:
        try:
            names.append(parse_hidden_cell(source).module)
        except NotJudgeable:
            continue
    modules = [importlib.import_module(name) for name in dict.fromkeys(names)]
    if not any(getattr(m, "JUDGE_STEPS_OPTIMIZERS", False) for m in modules):
        return
    param = torch.nn.Parameter(torch.zeros(2))
    loss = torch.nn.functional.cross_entropy(param[None], torch.tensor([0]))
    loss.backward()
    torch.optim.SGD([param], lr=0.1).step()


def check_key(seed: bytes, call: HiddenCall) -> bytes:
    """The key of one hidden test: the submission's ``seed`` (``pipeline.judge_seed``) and
    the check called, so that two tests of one notebook draw different inputs."""
    label = f"{call.module}.{call.function}:{call.args!r}:{sorted(call.kwargs.items())!r}"
    return hmac.new(seed, label.encode(), hashlib.sha256).digest()


def run(call: HiddenCall, conn, seed: bytes | None = None) -> Verdict:
    """Run one check against the kernel behind ``conn`` (an ``autograder.judge.remote.Conn``).

    ``seed``: the submission's seed (bytes the kernel never sees); every random input of the
    check is derived from it. None draws a fresh one (nothing is the same for everyone).
    """
    import secrets

    from autograder.judge import checks as library
    from autograder.judge.remote import JudgeError
    from course.data import DatasetError

    def value(spec: tuple[str, Any]) -> Any:
        kind, v = spec
        if kind != "name":
            return v
        root, *attrs = v.split(".")
        obj = conn.get(root)
        for attr in attrs:
            obj = getattr(obj, attr)
        return obj

    from autograder.judge.remote import local_value

    stopped = internal = ""
    module = importlib.import_module(call.module)
    check = getattr(module, call.function, None)
    if check is None:
        return Verdict(False, f"{call.module} has no check {call.function}", call.names,
                       internal="unknown check")
    kind = getattr(check, "kind", None)
    if kind not in ("value", "observed"):
        return Verdict(False, f"{call.module}.{call.function} declares no kind (value_check "
                       "or observed_check)", call.names, internal="undeclared kind")
    key = check_key(seed if seed is not None else secrets.token_bytes(32), call)
    # Everything the check does on the judge's side is recorded in its own context.
    ctx = checking.JudgeContext(make=conn.make, local_value=local_value)
    rng_state = torch.get_rng_state()
    try:
        with checking.judging(ctx), checking.quiet(), library.seeded(key):
            library.manual_seed("judge")   # modules the judge builds: no fixed init either
            check(*[value(a) for a in call.args],
                  **{k: value(v) for k, v in call.kwargs.items()})
        passed, message = True, ""
    except checking.GraderBug as exc:
        passed, message = False, f"internal error of the grader (not your code): {exc}"
        internal = "grader bug"
    except DatasetError as exc:   # the judge's own copy of a dataset: the machine's fault
        passed, message = False, f"{type(exc).__name__}: {exc}"
        internal = "dataset"
    except checking.CheckFailure as exc:
        passed, message = False, str(exc)
    except JudgeError as exc:
        passed, message = False, f"the kernel did not answer the judge: {exc}"
        stopped = exc.stopped
    except NameError as exc:
        passed, message = False, f"{exc}: run the cell that defines it"
    except Exception as exc:  # noqa: BLE001 - the learner's code failed outside call()
        passed, message = False, f"{type(exc).__name__}: {exc}"
    finally:
        torch.set_rng_state(rng_state)
    ended = getattr(conn, "stopped", None)
    if ended is not None:
        # The kernel timed out or died inside a call the check wrapped as the learner's
        # error: the notebook must still be interrupted (or given up), and the test fails.
        passed, stopped = False, ended.stopped
        message = f"the kernel did not answer the judge: {ended}"
    if ctx.bugs:
        passed, internal = False, "grader bug"
        message = f"internal error of the grader (not your code): {ctx.bugs[0]}"
    elif passed and kind == "value" and ctx.value_checks == 0:
        # A value check that compared nothing would pay on the kernel's word alone.
        passed, internal = False, "grader bug"
        message = (f"internal error of the grader (not your code): {call.function} is a value "
                   "check but compared no value")
    return Verdict(passed, message, call.names, kind, list(ctx.forbidden), stopped, internal,
                   call.function, list(getattr(check, "leans_on", ())))


def gate(verdicts: dict[str, Verdict]) -> dict[str, str]:
    """Observed checks that must not be paid: {grade_id: why}.

    An observed check is paid only when every value check judging one of its names passed
    (a value check that failed or raised before any value came back has failed); with no
    value check on its names there is nothing to lean on and it is paid as observed. An
    observed check that declares what it ``leans_on`` (``autograder.judge.checks.leans_on``: the
    value checks of the code path it observes) is withheld only for those: a wrong top-p
    does not withhold the crop test of the same ``generate``.
    """
    unpaid = {}
    for gid, v in verdicts.items():
        if v.kind != "observed" or not v.passed:
            continue
        failed = [g for g, w in verdicts.items() if w.kind == "value" and not w.passed
                  and set(w.names) & set(v.names)
                  and (not v.leans_on or w.check in v.leans_on)]
        if failed:
            names = sorted({n for g in failed for n in verdicts[g].names} & set(v.names))
            unpaid[gid] = (f"not awarded yet: this test passed, and its points count once "
                           f"{' and '.join(f'`{n}`' for n in names)} "
                           f"{'is' if len(names) == 1 else 'are'} right "
                           f"(fix what {', '.join(failed)} says first)")
    return unpaid


# Ways to reach a name unseen: dynamic lookup, and the library's own back doors (private
# functions, the operator registry, other namespaces of the same function).
DYNAMIC = re.compile(r"\b(getattr|eval|exec|compile|__import__|importlib|globals|vars|"
                     r"locals)\s*\(|__dict__|__getattribute__|__builtins__|sys\s*\.\s*modules|"
                     r"\bimport\s+\*")
ROUTES = re.compile(r"\btorch\s*\.\s*(ops|special|_C|_refs|_decomp|_prims|func|jit|compile)\b|"
                    r"\btorch\s*\.\s*_\w+|\baten\b|\b_C\s*\.\s*_nn\b|\bctypes\b|"
                    # a course helper may call the forbidden function for the learner
                    r"\b(from|import)\s+course\b|\bcourse\s*\.\s*\w+")


def static_review(sources: list[str], forbidden: list[str]) -> list[str]:
    """Places in the learner's own code that may call a forbidden built-in (for review).

    The kernel says whether a forbidden function ran; a kernel can lie, so the judge also
    reads the submitted source and reports, for the instructor to look at: an attribute whose
    name contains the function's (``torch.softmax``, ``x.softmax(...)``, ``torch._softmax``,
    ``F.log_softmax``), an import of such a name, a string that names it (``getattr(torch,
    "softmax")``), PyTorch's other routes to the same kernels (``torch.ops.aten...``,
    ``torch.special``, ``torch._C``, any private ``torch._name``), and dynamic access that could
    hide one (``getattr``, ``eval``, ``__dict__``, ``sys.modules``...). The learner's own
    function of the same name, defined and called by its bare name, is not reported.
    What no static review sees is listed in the threat model (docs/security.md) (names built at run
    time from pieces that do not spell the function, code that arrives as data).
    """
    if not forbidden:
        return []
    found = []
    names = {p.rsplit(".", 1)[1] for p in forbidden}
    for i, src in enumerate(sources, 1):
        for lineno, line in enumerate(src.splitlines(), 1):
            code = line.split("#", 1)[0]
            hit = [n for n in names
                   if re.search(rf"\.\s*\w*{re.escape(n)}\w*\b", code)
                   or re.search(rf"\bimport\b.*{re.escape(n)}", code)
                   or re.search(rf"[\"'][^\"']*{re.escape(n)}[^\"']*[\"']", code)]
            route = ROUTES.search(code)
            if hit or route or DYNAMIC.search(code):
                why = (f"refers to {', '.join(sorted(hit))}" if hit else
                       f"uses {route.group(0).strip()}, a course helper that may call it"
                       if route and "course" in route.group(0) else
                       f"uses {route.group(0).strip()}, another route into PyTorch's kernels"
                       if route else "uses dynamic attribute access or eval")
                found.append(f"cell {i} of your own code, line {lineno}, {why} where the "
                             "exercise forbids "
                             f"{', '.join(forbidden)}: {line.strip()[:100]}")
    return found
