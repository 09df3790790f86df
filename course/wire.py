"""The format of the values that cross between the grading judge and a learner's kernel.

Plain JSON, base64 inside it, nothing executable: no pickle, no ``torch.load``, no eval. A
tensor travels as its dtype, shape and raw little-endian bytes (decoded with
``torch.frombuffer`` after checking that the byte count matches); anything that is not plain
data stays in the kernel and travels as a *reference* (an integer the kernel hands out) with
the names of its type's classes, which the judge treats as a claim, not a fact.

Encodings (``enc`` = an encoded value):

- ``null``, booleans, integers, strings: themselves; floats: themselves, or ``{"$f": "nan" |
  "inf" | "-inf"}``;
- ``{"$t": [dtype, shape, base64 bytes]}``: a tensor (CPU, contiguous, detached), with
  ``"g": true`` for a leaf that requires grad;
- ``{"$l": [enc...]}`` a list, ``{"$u": [enc...]}`` a tuple, ``{"$d": [[key, enc]...]}`` a
  dict with string or integer keys, ``{"$s": [start, stop, step]}`` a slice, ``{"$e": true}``
  the Ellipsis;
- ``{"$m": [dtype, shape]}``: a tensor on PyTorch's ``meta`` device (no data);
- ``{"$z": [ints]}`` a ``torch.Size``, ``{"$dt": name}`` a dtype, ``{"$dv": name}`` a device;
- ``{"$r": id, "cls": [class names, most derived first], "kind": kind}``: a reference (for a
  tensor, ``"v"`` may hold its values);
- ``{"$x": [exception type name, message]}``: what learner code raised (replies only).

:func:`decode` checks every field and raises :class:`WireError` on anything else, and the
reply as a whole is capped (:data:`MAX_REPLY` characters, :data:`MAX_NODES` values counted
before the JSON is parsed), so decoding never holds more than a bounded number of objects.
"""

from __future__ import annotations

import base64
import json
import math
import reprlib
from typing import Any

import torch

MAX_REPLY = 64 * 1024 * 1024      # characters of one encoded reply
# A meta tensor (a shape, no data) costs one decoded value per this many elements: with the
# budgets of one answer and one test, the judge never makes more than 16M (32M) elements from
# shapes the kernel chose (a TinyGPT of the course's size holds 3.2M).
META_PER_VALUE = 16
MAX_DEPTH = 8                     # nesting of lists, tuples and dicts
MAX_ITEMS = 100_000               # elements of one container
# Values of one reply, all levels together: bytes and items per list alone let 46 MB of
# 4.6 million empty lists through, which Python holds in about 1.5 GB. A legitimate answer
# holds at most a few hundred thousand (one list of MAX_ITEMS ints is the largest).
MAX_NODES = 1_000_000

DTYPES = {name: getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
    "bool", "complex64", "complex128")}


class WireError(ValueError):
    """An encoded value that breaks the format (malformed, oversized, unknown dtype...)."""


class Ref:
    """A reference to an object that stays in the kernel; for a tensor that needs its graph,
    ``value`` may carry its current values (sent along to save a round trip)."""

    __slots__ = ("id", "cls", "kind", "value")

    def __init__(self, id: int, cls: list[str], kind: str, value: Any = None):
        self.id, self.cls, self.kind, self.value = id, cls, kind, value

    def __repr__(self) -> str:
        return f"Ref({self.id}, {self.cls[:1]}, {self.kind})"


class RemoteException(Exception):
    """Learner code raised ``type_name``; carried as text."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


def _tensor_bytes(t: torch.Tensor) -> tuple[str, list[int], str]:
    t = t.detach().to("cpu").contiguous()
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise WireError(f"tensors of dtype {t.dtype} cannot be sent")
    if dtype == "bfloat16":
        raw = t.view(torch.int16).numpy().tobytes()
    elif dtype == "bool":
        raw = t.to(torch.uint8).numpy().tobytes()
    else:
        raw = t.numpy().tobytes()
    return dtype, list(t.shape), base64.b64encode(raw).decode("ascii")


def encode(value: Any, ref=None, depth: int = 0, pre=None, tensor=None) -> Any:
    """The JSON-ready encoding of ``value``.

    ``pre(obj)``, when given, is asked first and may return an encoding (the judge's own
    references); ``tensor(t)`` encodes tensors (default: by value); ``ref(obj)`` encodes
    what is not plain data (without it, such a value raises WireError).
    """
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    if pre is not None:
        done = pre(value)
        if done is not None:
            return done
    if isinstance(value, torch.Tensor) and tensor is not None:
        return tensor(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return {"$f": "nan"}
        if math.isinf(value):
            return {"$f": "inf" if value > 0 else "-inf"}
        return float(value)
    if isinstance(value, torch.Size):
        return {"$z": [int(v) for v in value]}
    if isinstance(value, torch.dtype):
        return {"$dt": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"$dv": str(value)}
    if type(value) is slice:
        return {"$s": [encode(v, ref, depth + 1, pre, tensor)
                       for v in (value.start, value.stop, value.step)]}
    if value is Ellipsis:
        return {"$e": True}
    if isinstance(value, torch.Tensor) and value.device.type == "meta":
        return {"$m": [str(value.dtype).removeprefix("torch."), list(value.shape)]}
    if isinstance(value, torch.Tensor):
        out = {"$t": list(_tensor_bytes(value))}
        if value.requires_grad:
            out["g"] = True  # a leaf the other side should track gradients for
        return out
    if type(value) in (list, tuple):
        key = "$l" if type(value) is list else "$u"
        return {key: [encode(v, ref, depth + 1, pre, tensor) for v in value]}
    if type(value) is dict and all(isinstance(k, (str, int)) for k in value):
        return {"$d": [[k, encode(v, ref, depth + 1, pre, tensor)] for k, v in value.items()]}
    if ref is None:
        raise WireError(f"a {type(value).__name__} cannot be sent by value")
    return ref(value)


def _tensor(dtype: Any, shape: Any, data: Any) -> torch.Tensor:
    if dtype not in DTYPES or not isinstance(shape, list) or not isinstance(data, str):
        raise WireError("malformed tensor")
    if len(shape) > 16 or not all(isinstance(n, int) and 0 <= n < 2**31 for n in shape):
        raise WireError("malformed tensor shape")
    n = math.prod(shape)
    size = {"bool": 1, "bfloat16": 2}.get(dtype) or DTYPES[dtype].itemsize
    if len(data) != 4 * -(-n * size // 3):   # the size is known before anything is decoded
        raise WireError(f"tensor of shape {shape} and dtype {dtype} has {len(data)} characters")
    # One copy of the bytes: b64decode reads the str itself (ASCII only), and the tensor
    # keeps the bytearray as its storage.
    try:
        raw = bytearray(base64.b64decode(data, validate=True))
    except ValueError as exc:
        raise WireError("malformed tensor data") from exc
    if len(raw) != n * size:
        raise WireError(f"tensor of shape {shape} and dtype {dtype} has {len(raw)} bytes")
    if n == 0:
        return torch.empty(shape, dtype=DTYPES[dtype])
    if dtype == "bool":
        return torch.frombuffer(raw, dtype=torch.uint8).reshape(shape).bool()
    if dtype == "bfloat16":
        return torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16).reshape(shape)
    return torch.frombuffer(raw, dtype=DTYPES[dtype]).reshape(shape)


class Nodes:
    """What is left of a budget of decoded values (:data:`MAX_NODES` per reply by default);
    one budget may span several replies (the judge keeps one per hidden test)."""

    __slots__ = ("left",)

    def __init__(self, left: int = MAX_NODES):
        self.left = left

    def take(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise WireError("the value holds too many items in all")


def decode(data: Any, depth: int = 0, nodes: Nodes | None = None) -> Any:
    """The value of an encoding; references come back as :class:`Ref`.

    ``nodes``: the budget of values this decoding may make (each value, key and torch.Size
    entry counts one; a fresh :data:`MAX_NODES` when None), taken before each is made, so
    a list under construction never holds more.
    Raises WireError (malformed, too deep, over the budget).
    """
    if depth > MAX_DEPTH:
        raise WireError("value nested too deeply")
    if nodes is None:
        nodes = Nodes()
    nodes.take()
    if data is None or isinstance(data, (bool, str, int)):
        return data
    if isinstance(data, float):
        return data
    if isinstance(data, dict) and len(data) >= 1:
        key = next(iter(data))
        body = data[key]
        if key == "$f" and body in ("nan", "inf", "-inf"):
            return float(body)
        if key == "$t" and isinstance(body, list) and len(body) == 3:
            t = _tensor(*body)
            if data.get("g") is True and t.is_floating_point():
                t.requires_grad_(True)
            return t
        if key == "$m" and isinstance(body, list) and len(body) == 2 and body[0] in DTYPES \
                and isinstance(body[1], list) and len(body[1]) <= 16 \
                and all(isinstance(n, int) and 0 <= n < 2**31 for n in body[1]):
            # No data, but the judge may make one of this shape (random weights to inject):
            # its elements come out of the same budget, one value per META_PER_VALUE.
            numel = 1
            for n in body[1]:
                numel *= n
            nodes.take(numel // META_PER_VALUE)
            return torch.empty(body[1], dtype=DTYPES[body[0]], device="meta")
        if key in ("$l", "$u") and isinstance(body, list) and len(body) <= MAX_ITEMS:
            items = [decode(v, depth + 1, nodes) for v in body]
            return items if key == "$l" else tuple(items)
        if key == "$d" and isinstance(body, list) and len(body) <= MAX_ITEMS:
            out = {}
            for pair in body:
                if not (isinstance(pair, list) and len(pair) == 2
                        and isinstance(pair[0], (str, int))):
                    raise WireError("malformed dict")
                nodes.take()            # the key
                out[pair[0]] = decode(pair[1], depth + 1, nodes)
            return out
        if key == "$z" and isinstance(body, list) and len(body) <= 16 \
                and all(isinstance(v, int) and 0 <= v < 2**63 for v in body):
            nodes.take(len(body))
            return torch.Size(body)
        if key == "$dt" and body in DTYPES:
            return DTYPES[body]
        if key == "$dv" and isinstance(body, str) and len(body) < 32:
            try:
                return torch.device(body)
            except RuntimeError as exc:
                raise WireError(f"unknown device {body!r}") from exc
        if key == "$s" and isinstance(body, list) and len(body) == 3:
            parts = [decode(v, depth + 1, nodes) for v in body]
            if not all(p is None or isinstance(p, int) for p in parts):
                raise WireError("malformed slice")
            return slice(*parts)
        if key == "$e" and body is True:
            return Ellipsis
        if key == "$r" and isinstance(body, int):
            nodes.take(3)      # the judge makes a proxy for it: a few hundred bytes, not 30
            cls = data.get("cls", [])
            kind = data.get("kind", "object")
            if not (isinstance(cls, list) and all(isinstance(c, str) and len(c) < 200
                                                  for c in cls[:50])
                    and isinstance(kind, str)):
                raise WireError("malformed reference")
            if "v" in data and kind != "tensor":
                raise WireError("a value came with a reference that is not a tensor's")
            value = decode(data["v"], depth + 1, nodes) if "v" in data else None
            if value is not None and not isinstance(value, torch.Tensor):
                raise WireError("malformed reference value")
            return Ref(body, [c for c in cls[:50]], kind[:20], value)
        if key == "$x" and isinstance(body, list) and len(body) == 2 \
                and all(isinstance(v, str) for v in body):
            return RemoteException(body[0][:100], body[1][:4000])
    raise WireError(f"not a value of the wire format: {reprlib.repr(data)[:80]}")


def tree_map(leaf, value: Any) -> Any:
    """``value`` with ``leaf`` applied to everything that is not a list, tuple or dict."""
    if type(value) is list:
        return [tree_map(leaf, v) for v in value]
    if type(value) is tuple:
        return tuple(tree_map(leaf, v) for v in value)
    if type(value) is dict:
        return {k: tree_map(leaf, v) for k, v in value.items()}
    return leaf(value)


def dumps(value: Any) -> str:
    """JSON text of an already encoded value."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def count_values(text: str) -> int:
    """An upper bound on the JSON values in ``text`` without parsing it: every value but the
    outermost follows a '[', '{', ',' or ':' (those inside strings only add to the bound)."""
    return 1 + sum(text.count(c) for c in "[{,:")


def loads(text: str, max_nodes: int = MAX_NODES) -> Any:
    """The encoded value in ``text``: at most :data:`MAX_REPLY` characters and ``max_nodes``
    JSON values, both checked before ``json`` makes a single object. Raises WireError."""
    if not isinstance(text, str) or len(text) > MAX_REPLY:
        raise WireError("the reply is missing or larger than the limit")
    if count_values(text) > max_nodes:
        raise WireError(f"the reply holds more than {max_nodes:,} values")
    try:
        return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(
            WireError(f"bare {c} in a reply")))
    except (ValueError, RecursionError) as exc:
        raise WireError(f"the reply is not valid JSON: {str(exc)[:100]}") from exc
