"""Bounded views of what a kernel answered, for the hidden checks' messages and labels.

A message quotes what the kernel answered; the answer may be a list of a million items, a
64 MB string, a 43-million-element tensor or an int of 4,300 digits. Nothing here ever
formats more than it shows, and never calls an object's own ``__repr__`` except the proxy's
(which names the claimed class, at most 200 characters) and those of bounded builtins. Ids the
kernel returned are checked against the judge's own range before a size is derived from them
(:func:`token_ids`). :mod:`autograder.judge.checks` re-exports every name here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from autograder.judge.remote import Proxy
from course import checking
from course.checking import CheckFailure, expect_tensor

__all__ = ["SHOWN", "call", "expect_module", "shown", "token_ids"]

SHOWN = 120          # characters of one quoted value


def shown(value: Any, limit: int = SHOWN) -> str:
    """``repr(value)`` cut to at most ``limit`` characters (a final "..." when cut), made
    piece by piece so that no longer string is ever built: lists, tuples and dicts show their
    first items, strings their first characters, tensors their values when they have at most
    8 (else shape and dtype), other objects their type's name."""
    out, size = [], 0
    for piece in _pieces(value, 0):
        out.append(piece)
        size += len(piece)
        if size > limit:
            break
    text = "".join(out)
    return text if len(text) <= limit else text[:max(0, limit - 3)] + "..."


def _pieces(v: Any, depth: int) -> Iterator[str]:
    if v is None or type(v) in (bool, float, complex, torch.dtype, torch.device, Proxy):
        yield repr(v)             # bounded: a proxy names the class the kernel claims
    elif type(v) is int:
        yield repr(v) if -10**40 < v < 10**40 else f"<an int of {v.bit_length()} bits>"
    elif type(v) is str:
        yield repr(v[:SHOWN]) + ("..." if len(v) > SHOWN else "")
    elif issubclass(type(v), torch.Tensor):     # type(), not isinstance: a proxy may claim
        yield (f"tensor({_cut(v.tolist())})" if v.device.type != "meta" and v.numel() <= 8
               else f"<tensor of shape {tuple(v.shape)}, {v.dtype}>")
    elif type(v) in (list, tuple, dict, torch.Size) and depth >= 3:
        yield "[...]" if type(v) is list else "(...)" if type(v) is not dict else "{...}"
    elif type(v) in (list, tuple, torch.Size):
        yield "[" if type(v) is list else "("
        for i, item in enumerate(itertools.islice(v, SHOWN // 2)):
            yield ", " if i else ""
            yield from _pieces(item, depth + 1)
        yield "]" if type(v) is list else ",)" if len(v) == 1 else ")"
    elif type(v) is dict:
        yield "{"
        for i, (k, item) in enumerate(itertools.islice(v.items(), SHOWN // 4)):
            yield ", " if i else ""
            yield from _pieces(k, depth + 1)
            yield ": "
            yield from _pieces(item, depth + 1)
        yield "}"
    elif isinstance(v, torch.nn.Module) and type(v).__module__.startswith("torch."):
        yield repr(v)[:SHOWN]     # a module the judge made (a kernel's is a proxy)
    else:
        yield f"<{type(v).__name__[:60]} object>"


def _cut(items: list) -> str:
    return shown(items, SHOWN)


def call(fn: Callable[..., Any], *args: Any, name: str | None = None, **kwargs: Any) -> Any:
    """:func:`course.checking.call` with a label that is bounded whatever ``fn`` is: ``name``
    when given, else the function's ``__name__`` (a string the kernel chose, cut to 60
    characters), never ``repr(fn)`` of a kernel value.

    Raises:
        CheckFailure: ``fn`` raised; the message names the function, the error and a hint.
    """
    return checking.call(fn, *args, name=name or _label(fn), **kwargs)


def expect_module(cls: Any, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
    """Instantiate a learner's ``nn.Module`` subclass, with advice if that fails (as
    :func:`course.checking.expect_module`, with bounded labels: see :func:`call`).

    Raises:
        CheckFailure: the class raised, or what it made is no ``nn.Module``.
    """
    label = name or _label(cls)
    module = checking.call(cls, *args, name=f"{label}({', '.join(shown(a) for a in args)})",
                           **kwargs)
    if not isinstance(module, torch.nn.Module):
        raise CheckFailure(f"{label} should be an nn.Module subclass, got "
                           f"{type(module).__name__[:60]}.")
    return module


def _label(fn: Any) -> str:
    try:
        name = getattr(fn, "__name__", None)
    except Exception:  # noqa: BLE001 - a kernel object may refuse the read
        name = None
    return name[:60] if isinstance(name, str) else shown(fn, 60)


def token_ids(ids: Any, vocab: int, name: str) -> torch.Tensor:
    """``ids`` (a tensor the kernel returned) checked to be integer token ids in
    ``[0, vocab)`` before any size is derived from them (``bincount``, ``one_hot``, an
    index): an id of 150,000,000 would otherwise make the judge allocate 1.2 GB.

    Returns: ``ids`` as a local tensor. Raises: CheckFailure naming the first bad id.
    """
    ids = expect_tensor(ids, name)
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise CheckFailure(f"{name} should hold integer token ids, got dtype {ids.dtype}.")
    bad = (ids < 0) | (ids >= vocab)
    if bool(bad.any()):
        first = int(ids.flatten()[bad.flatten().nonzero()[0, 0]])
        raise CheckFailure(f"{name} holds the token id {first}, outside the vocabulary "
                           f"(ids 0 to {vocab - 1}).")
    return ids
