"""The kernel's side of grading: answers the judge's requests about the learner's code.

The judge (``autograder.judge``, a separate trusted process) never sends code. It sends
requests, each a small JSON document in the :mod:`course.wire` format: look up a name of the
notebook, read or set an attribute, call something with values it chose, iterate, fetch a
tensor, or run the device audit of :mod:`course.device`. This module performs them on the
learner's objects and answers with values, or with references to what cannot travel (a
module, a function, a tensor that still needs its graph). Nothing here decides a grade: a
kernel may answer anything, and the judge treats every answer as a claim to check.

The judge opens a conversation per hidden test with a silent ``execute_request`` that calls
:func:`serve`: each answer, a base64 string, goes back as the prompt of an input request, and
the reply is the next request (``autograder.grading.judge_session``).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import torch

from course import wire

_objects: dict[int, Any] = {}   # reference id -> object (kept alive while grading)
USER_NS: dict | None = None     # the names of the notebook (default: IPython's user_ns)
_ids: dict[int, int] = {}       # id(object) -> reference id


def _tensor(t: torch.Tensor) -> dict:
    """A tensor without a graph travels by value; one that needs its graph stays here."""
    return wire.encode(t) if not t.requires_grad else _ref(t)


def _enc(value: Any) -> Any:
    return wire.encode(value, _ref, tensor=_tensor)


def _ref(obj: Any) -> dict:
    if type(obj).__name__ in ("generator", "dict_keys", "dict_values", "dict_items") \
            or type(obj).__name__.endswith("iterator"):
        return {"$l": [_enc(v) for v in list(obj)[:wire.MAX_ITEMS]]}
    key = id(obj)
    if key not in _ids or _objects.get(_ids[key]) is not obj:
        _ids[key] = len(_objects) + 1
        _objects[_ids[key]] = obj
    kind = ("tensor" if isinstance(obj, torch.Tensor) else
            "module" if isinstance(obj, torch.nn.Module) else
            "callable" if callable(obj) else "object")
    cls = [f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__]
    out = {"$r": _ids[key], "cls": cls, "kind": kind}
    if kind == "tensor" and obj.numel() <= 1_000_000:
        out["v"] = wire.encode(obj.detach())  # saves the judge a round trip to read it
    return out


# What the judge may ask the kernel to make (:func:`course.checking.in_kernel`): public
# probes and stand-ins of the course, PyTorch's layers, optimizers and schedulers, generators.
MAKEABLE_MODULES = ("course.probes", "course.references", "course.standins", "torch.nn",
                    "torch.optim")
MAKEABLE = {"torch._C.Generator": "torch.Generator"}


def _makeable(path: str) -> Any:
    path = MAKEABLE.get(path, path)
    module, _, name = path.rpartition(".")
    allowed = path in MAKEABLE.values() or module in MAKEABLE_MODULES or module.startswith(
        tuple(m + "." for m in MAKEABLE_MODULES))
    if not allowed or any(part.startswith("_") for part in path.split(".")):
        raise PermissionError(f"the judge may not make {path!r}")
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise PermissionError(f"the judge may not make {path!r}: {exc}") from None


def _resolve(obj: Any) -> Any:
    """Replace references nested in decoded lists, tuples and dicts by the objects."""
    return wire.tree_map(lambda v: _objects[v.id] if isinstance(v, wire.Ref) else v, obj)


def namespace() -> dict:
    if USER_NS is not None:
        return USER_NS
    from IPython import get_ipython

    return get_ipython().user_ns


def _do(req: dict) -> Any:
    from course.checking import forbid, quiet

    op = req.get("op")
    if op == "get":
        ns = namespace()
        if req["name"] not in ns:
            raise NameError(f"name {req['name']!r} is not defined in the notebook")
        return ns[req["name"]]
    obj = _objects[int(req["ref"])] if "ref" in req else None
    if op == "getattr":
        return getattr(obj, req["name"])
    if op == "setattr":
        setattr(obj, req["name"], _resolve(wire.decode(req["value"])))
        return None
    if op == "getitem":
        return obj[_resolve(wire.decode(req["key"]))]
    if op == "len":
        return len(obj)
    if op == "iter":
        return list(obj)[:wire.MAX_ITEMS]
    if op == "value":
        if not isinstance(obj, torch.Tensor):
            raise TypeError(f"a {type(obj).__name__} is not a tensor")
        return {"$value": obj}
    if op == "call":
        args = _resolve(wire.decode(req.get("args", {"$u": []})))
        kwargs = _resolve(wire.decode(req.get("kwargs", {"$d": []})))
        with quiet(), forbid(*req.get("forbid", [])):
            return obj(*args, **kwargs)
    if op == "make":
        args = _resolve(wire.decode(req.get("args", {"$u": []})))
        kwargs = _resolve(wire.decode(req.get("kwargs", {"$d": []})))
        return _makeable(str(req["path"]))(*args, **kwargs)
    if op == "audit":
        from course.device import check_runs_on_any_device

        inputs = tuple(_resolve(wire.decode(req["inputs"])))
        return check_runs_on_any_device(obj, lambda: inputs, name=str(req.get("name")))
    raise ValueError(f"unknown request {op!r}")


def handle(request: str) -> str:
    """Perform one base64 JSON request; return the base64 JSON answer."""
    try:
        req = json.loads(base64.b64decode(request))
        with torch.set_grad_enabled(bool(req.get("grad", True))):
            out = _do(req)
            if isinstance(out, dict) and set(out) == {"$value"}:
                enc = wire.encode(out["$value"].detach())
            else:
                enc = _enc(out)
    except Exception as exc:  # noqa: BLE001 - the learner's error, reported as data
        enc = {"$x": [type(exc).__name__, str(exc)[:4000]]}
    return base64.b64encode(wire.dumps(enc).encode()).decode("ascii")


def serve(request: str) -> None:
    """Answer the judge's requests, starting with ``request``, until an empty one: each
    answer goes out as the prompt of an input request on the kernel's stdin channel, and the
    judge's reply is the next request."""
    from IPython import get_ipython

    ask = get_ipython().kernel.raw_input
    while request:
        request = ask(handle(request))


def reset() -> None:
    """Forget every reference (a new grading run)."""
    _objects.clear()
    _ids.clear()
