"""The judge's view of a learner's kernel: values come back, objects stay behind proxies.

A :class:`Conn` sends :mod:`course.agent` requests through a transport (a function from
request text to answer text: a conversation over the kernel's stdin channel in grading
(``autograder.grading.judge_session``), a direct call in unit
tests) and decodes every answer with :mod:`course.wire`'s checks. Plain values and tensors
without a graph come back as themselves (real ``torch.Tensor`` objects built by the judge);
anything else comes back as a :class:`Proxy`, so that the hidden checks, written as if the
learner's objects were local, run unchanged:

- attribute reads, calls, indexing, iteration and ``len`` become requests;
- ``isinstance`` sees the class the kernel claims (a local class of the same name when
  ``torch`` has one, else a stand-in subclass of the nearest local base);
- a proxied tensor used by a torch function, an operator or :mod:`course.checking` is
  fetched by value first, so every comparison runs on the judge's own tensors and torch.

Each request carries the judge's grad mode (``torch.no_grad()`` in a check reaches the
kernel) and the functions the check has forbidden (:func:`course.checking.forbid`).
"""

from __future__ import annotations

import base64
import builtins
import importlib
import json
from collections.abc import Callable
from typing import Any

import torch

from course import checking, wire

# Exceptions of learner code that the judge re-raises as themselves (hints key on them).
BUILTIN_ERRORS = {name: getattr(builtins, name) for name in (
    "NotImplementedError", "TypeError", "ValueError", "RuntimeError", "AttributeError",
    "IndexError", "KeyError", "NameError", "ZeroDivisionError", "AssertionError",
    "ArithmeticError", "OverflowError", "StopIteration")}


class JudgeError(Exception):
    """The kernel did not answer as the protocol requires (dead, silent, malformed).

    ``stopped`` says why the notebook cannot go on: "timeout" (it did not answer in the
    cell's time), "died" (its process ended), or "" (a bad answer; the next test may run).
    """

    def __init__(self, message: str, stopped: str = ""):
        super().__init__(message)
        self.stopped = stopped


# What the kernel may send the judge: per request (course.wire.MAX_REPLY), per hidden test and
# per notebook, in characters of answer text. A legitimate check reads a few MB (Day 13's
# TinyGPT state is 13 MB); past a bound the test fails with a JudgeError that says so.
MAX_TEST_BYTES = 256 * 1024 * 1024
MAX_NOTEBOOK_BYTES = 1024 * 1024 * 1024
# Values decoded in one hidden test (each answer is held to course.wire.MAX_NODES before it
# is parsed): what a check may keep of a test's answers is bounded in objects as well as in
# characters. The largest legitimate test decodes a few hundred thousand.
MAX_TEST_NODES = 2_000_000
# The base64 text of the largest answer the wire accepts: a longer one is refused before it
# is decoded (the judge's client takes zmq messages of up to this plus 8 MiB).
MAX_ANSWER_TEXT = 4 * -(-wire.MAX_REPLY // 3)


class Budget:
    """Characters of answers one notebook's kernel has sent the judge (shared by its tests)."""

    def __init__(self, limit: int = MAX_NOTEBOOK_BYTES):
        self.limit, self.used = limit, 0


def _mark(t: torch.Tensor) -> torch.Tensor:
    """A tensor the kernel sent, marked as the kernel's word (:class:`KernelTensor`)."""
    if type(t) is checking.KernelTensor:
        return t
    marked = t.detach().as_subclass(checking.KernelTensor)
    return marked.requires_grad_(True) if t.requires_grad else marked


class Conn:
    """One grading conversation with one kernel: one hidden test (its proxies, values and
    received bytes are released with it)."""

    def __init__(self, transport: Callable[[str], str], budget: Budget | None = None,
                 test_limit: int = MAX_TEST_BYTES):
        self.transport = transport
        self.budget = budget if budget is not None else Budget()
        self.test_limit = test_limit
        self.received = 0  # characters of answers in this test
        self.nodes = wire.Nodes(MAX_TEST_NODES)  # values this test may still decode
        self._classes: dict[tuple[str, ...], type] = {}
        self._proxies: dict[int, Proxy] = {}
        self._attrs: dict[tuple, Any] = {}
        self.epoch = 0  # bumped by every request that may change the kernel's state
        self.requests = 0
        # The transport's JudgeError that ended the notebook ("timeout", "died"), kept even
        # when a check turns it into a failure of the learner's call (judge.run reads it).
        self.stopped: JudgeError | None = None

    # -- requests -------------------------------------------------------------------
    def request(self, req: dict) -> Any:
        """One request; attribute reads are remembered until the next call or assignment
        (the only requests that run code meant to change state), values likewise."""
        key = (req.get("ref"), req.get("name")) if req.get("op") == "getattr" else None
        if key is not None and key in self._attrs:
            return self._attrs[key]
        if req.get("op") in ("call", "setattr", "audit", "make"):
            self.epoch += 1
            self._attrs.clear()
        req = {**req, "grad": torch.is_grad_enabled()}
        self.requests += 1
        try:
            text = self.transport(base64.b64encode(json.dumps(req).encode()).decode("ascii"))
        except JudgeError as exc:
            if exc.stopped:
                self.stopped = self.stopped or exc
            raise
        self.received += len(text)
        self.budget.used += len(text)
        if self.received > self.test_limit or self.budget.used > self.budget.limit:
            over = ("this test" if self.received > self.test_limit else "this notebook")
            limit = self.test_limit if over == "this test" else self.budget.limit
            raise JudgeError(f"the kernel sent the judge more than {limit // 2**20} MiB in "
                             f"{over}: the judge reads no more of it")
        bad = None
        try:
            if len(text) > MAX_ANSWER_TEXT:
                raise ValueError(f"an answer is larger than {wire.MAX_REPLY // 2**20} MiB")
            raw = base64.b64decode(text, validate=True).decode("utf-8")
            text = None                   # each copy is dropped once the next one is made
            parsed, raw = wire.loads(raw), None
            value = wire.decode(parsed, nodes=self.nodes)
            parsed = None
        except (ValueError, UnicodeError) as exc:
            bad = str(exc)[:200]
        if bad is not None:
            # Raised with no cause and with the answer's text dropped: a test keeps its
            # error, and the error's frames would otherwise keep every refused answer alive.
            text = raw = None
            raise JudgeError(f"the kernel's answer is not in the grading format: {bad}")
        if isinstance(value, wire.RemoteException):
            raise _local_exception(value)
        value = self._wrap(value)
        if key is not None:
            self._attrs[key] = value
        return value



    def _wrap(self, value: Any) -> Any:
        return wire.tree_map(self._proxy, value)

    def _proxy(self, value: Any) -> Any:
        if isinstance(value, wire.Ref):  # one proxy per kernel object: `is` keeps its meaning
            proxy = self._proxies.get(value.id)
            if proxy is None:
                proxy = self._proxies[value.id] = Proxy(self, value)
            if value.value is not None:
                value.value = _mark(value.value)
            object.__setattr__(proxy, "_ref", value)  # the latest values it came with
            object.__setattr__(proxy, "_epoch", self.epoch)
            return proxy
        if isinstance(value, torch.Tensor):
            return _mark(value)
        return value

    def encode(self, value: Any) -> Any:
        """A judge-side value for a request: tensors and plain data by value, proxies as the
        kernel's own references. Anything else cannot be sent (WireError)."""
        return wire.encode(value, pre=lambda v: {"$r": v._ref.id}
                           if type(v) is Proxy else None)

    def get(self, name: str) -> Any:
        """The notebook's global ``name``."""
        return self.request({"op": "get", "name": name})

    def call(self, target: Proxy, args: tuple, kwargs: dict) -> Any:
        return self.request({"op": "call", "ref": target._ref.id,
                             "args": self.encode(tuple(args)),
                             "kwargs": self.encode(dict(kwargs)),
                             "forbid": list(checking.context().forbid)})

    def make(self, factory: Any, args: tuple, kwargs: dict) -> Any:
        """``factory(*args, **kwargs)`` made in the kernel (see ``course.checking.in_kernel``)."""
        path = f"{factory.__module__}.{factory.__qualname__}"
        return self.request({"op": "make", "path": path, "args": self.encode(tuple(args)),
                             "kwargs": self.encode(dict(kwargs))})

    # -- classes --------------------------------------------------------------------
    def local_class(self, names: list[str]) -> type:
        """A local class for the kernel's claimed class names (most derived first)."""
        key = tuple(names)
        if key not in self._classes:
            found = None
            for i, name in enumerate(names):
                cls = _resolve_class(name)
                if cls is not None:
                    found = cls if i == 0 else _stand_in(names[0], cls)
                    break
            self._classes[key] = found or _stand_in(names[0] if names else "object", object)
        return self._classes[key]


def _resolve_class(name: str) -> type | None:
    """A class of torch or builtins by its qualified name; never imports anything else."""
    module, _, attr = name.rpartition(".")
    if not (module == "builtins" or module == "torch" or module.startswith("torch.")):
        return None
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj if isinstance(obj, type) else None


def _stand_in(name: str, base: type) -> type:
    short = name.rpartition(".")[2][:100] or "object"
    if not short.isidentifier():
        short = "LearnerObject"
    try:
        return type(short, (base,), {"__module__": "kernel"})
    except TypeError:  # a base that cannot be subclassed (bool, function...)
        return base


def _local_exception(exc: wire.RemoteException) -> BaseException:
    name = exc.type_name
    if name == "CheckFailure":
        return checking.CheckFailure(str(exc))
    if name in BUILTIN_ERRORS:
        return BUILTIN_ERRORS[name](str(exc))
    short = name if name.isidentifier() else "LearnerError"
    return type(short, (wire.RemoteException,), {})(name, str(exc))


def _local(value: Any) -> Any:
    return value._fetch_value() if type(value) is Proxy else value


def _local_tree(value: Any) -> Any:
    return wire.tree_map(_local, value)


# Reads of a kernel tensor answered from the values it came with (no state changes since).
LOCAL_TENSOR_READS = frozenset({"shape", "dtype", "ndim", "numel", "size", "dim",
                                "is_floating_point"})


class Proxy:
    """An object that lives in the kernel (see the module docstring)."""

    __slots__ = ("_conn", "_ref", "_epoch")

    def __init__(self, conn: Conn, ref: wire.Ref):
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_epoch", conn.epoch)

    @property
    def __class__(self):  # what isinstance() consults after type(): the kernel's claim
        return self._conn.local_class(self._ref.cls)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__") and name not in (
                "__name__", "__qualname__", "__doc__"):
            raise AttributeError(name)
        if name in LOCAL_TENSOR_READS and self._ref.kind == "tensor" \
                and self._ref.value is not None and self._epoch == self._conn.epoch:
            return getattr(self._ref.value, name)  # what the values it came with say
        return self._conn.request({"op": "getattr", "ref": self._ref.id, "name": name})

    def __setattr__(self, name: str, value: Any) -> None:
        self._conn.request({"op": "setattr", "ref": self._ref.id, "name": name,
                            "value": self._conn.encode(value)})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._conn.call(self, args, kwargs)

    def __iter__(self):
        return iter(self._conn.request({"op": "iter", "ref": self._ref.id}))

    def __len__(self) -> int:
        n = self._conn.request({"op": "len", "ref": self._ref.id})
        if not isinstance(n, int) or n < 0:
            raise JudgeError("len() of a kernel object is not a count")
        return n

    def __getitem__(self, key: Any) -> Any:
        return self._conn.request({"op": "getitem", "ref": self._ref.id,
                                   "key": self._conn.encode(key)})

    def __bool__(self) -> bool:
        return bool(self._fetch_value()) if self._ref.kind == "tensor" else True

    def __repr__(self) -> str:
        return f"<{self._ref.cls[0] if self._ref.cls else 'object'} in the learner's kernel>"

    def _fetch_value(self) -> Any:
        """A kernel tensor by value (detached), or this proxy for anything else."""
        if self._ref.kind != "tensor":
            return self
        if self._ref.value is not None and self._epoch == self._conn.epoch:
            return self._ref.value
        value = self._conn.request({"op": "value", "ref": self._ref.id})
        if not isinstance(value, torch.Tensor):
            raise JudgeError("the kernel sent no tensor for a tensor")
        return value

    def _remote_audit(self, inputs: tuple, name: str) -> Any:
        """:func:`course.device.check_runs_on_any_device`, run in the kernel: an observation
        of the kernel's process, which the judge can only take on trust (a check that makes
        one is declared ``observed``; see the gate)."""
        return self._conn.request({"op": "audit", "ref": self._ref.id,
                                   "inputs": self._conn.encode(tuple(inputs)), "name": name})

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*_local_tree(tuple(args)), **_local_tree(dict(kwargs or {})))


def _operator(name: str):
    def op(self, *args):
        return getattr(_local(self), name)(*(_local(a) for a in args))
    op.__name__ = name
    return op


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__pow__",
              "__neg__", "__abs__", "__invert__", "__lt__", "__le__", "__gt__", "__ge__",
              "__float__", "__int__", "__index__"):
    setattr(Proxy, _name, _operator(_name))


def local_value(value: Any) -> Any:
    """A proxied tensor fetched by value (anything else as it is): the judge's
    ``course.checking.JudgeContext.local_value``."""
    return _local(value)
