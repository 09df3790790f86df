"""What a failed check says beyond "wrong": advice for PyTorch's error texts, and where two
tensors differ.

:func:`_hint_for` maps the exception a learner's code raised (a shape mismatch, a forgotten
``super().__init__()``, a float size, ``NotImplementedError``) to the likely mistake;
:func:`localise` names how a wrong tensor differs from the expected one (swapped dimensions, a
view for a transpose, a scale, an offset, an off-by-one, a few bad rows). :mod:`course.checking`
builds its messages from both; this module depends on nothing else of the course.
"""

from __future__ import annotations

import re

import torch

__all__ = ["localise"]


# Error texts that PyTorch raises for classic mistakes, mapped to advice.
# Checked in order; the first pattern found in the exception text wins.
_HINTS: list[tuple[str, str]] = [
    (
        r"self must be a matrix|both arguments to mm|expected 2D tensor|must be a matrix",
        "torch.mm only multiplies 2-D matrices; for batched (3-D or 4-D) tensors use "
        "`@` or torch.matmul.",
    ),
    (
        r"cannot assign module before Module.__init__\(\) call|"
        r"cannot assign parameters before Module.__init__\(\) call|"
        r"object has no attribute '_(modules|parameters|buffers)'",
        "did you forget to call super().__init__() first in your __init__?",
    ),
    (
        r"view size is not compatible with input tensor's size and stride",
        "view() needs a contiguous tensor: call .contiguous() after transpose(), or use "
        "reshape().",
    ),
    (
        r"'float' object cannot be interpreted as an integer|"
        r"received an invalid combination of arguments.*float|"
        r"must be tuple of ints,\s*but got float",
        "a size became a float: use integer division `//` (for example d_k = d_model // "
        "num_heads), not `/`.",
    ),
    (
        r"mat1 and mat2 shapes cannot be multiplied|size of tensor a .* must match the size "
        r"of tensor b|shapes cannot be multiplied|batch2 tensor|batch1 tensor",
        "a matrix product got incompatible shapes: check the transpose (K.transpose(-2, -1)) "
        "and which dimension you multiply over.",
    ),
    (
        r"Expected all tensors to be on the same device",
        "a tensor was created on the CPU while the inputs are elsewhere: pass device=x.device "
        "when you create tensors inside forward, or register them as buffers.",
    ),
    (
        r"NotImplementedError|^$",
        "this exercise still raises NotImplementedError: replace `raise NotImplementedError()` "
        "with your code.",
    ),
]


def _hint_for(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NotImplementedError):
        return _HINTS[-1][1]
    for pattern, advice in _HINTS[:-1]:
        if re.search(pattern, text):
            return advice
    return "read the error above and compare the shapes at each step with the docstring."


def _plain(value: torch.Tensor) -> torch.Tensor:
    """``value`` as a plain tensor: a subclass (a tensor the learner's kernel sent, see
    :class:`course.checking.KernelTensor`) loses its mark, so only plain arithmetic runs."""
    if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
        return value.as_subclass(torch.Tensor)
    return value


def localise(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-5,
             atol: float = 1e-6) -> str:
    """Where and how ``actual`` differs from ``expected``, for mistakes no catalogue lists.

    Tried in order: the last two dimensions swapped, the same values in another arrangement
    (a ``view`` where a ``transpose`` was needed), a sign flip, one factor or one offset for
    every value, a shift by one index along a dimension (an off-by-one), and differences
    confined to some indices of one dimension (a position, a head, a batch element).
    Returns '' when none fits.
    """
    a = _plain(actual).detach().to(torch.float64)
    e = _plain(expected).detach().to(torch.float64)
    if a.shape != e.shape or a.numel() < 2 or not bool(torch.isfinite(a).all()):
        return ""

    def close(x: torch.Tensor, y: torch.Tensor) -> bool:
        return bool(torch.allclose(x, y, rtol=rtol, atol=atol))

    if a.dim() >= 2 and a.shape[-1] == a.shape[-2] and close(a, e.transpose(-2, -1)):
        return "your values are the expected ones with the last two dimensions swapped"
    if close(a.flatten().sort().values, e.flatten().sort().values):
        return ("your tensor holds exactly the expected values, in another arrangement: a "
                "reshape or view where a transpose/permute was needed (or the reverse), or "
                "dimensions split or merged in the wrong order")
    if close(a, -e):
        return "every value has the wrong sign"
    denom = float((e * e).sum())
    if denom > 0:
        factor = float((a * e).sum()) / denom
        if abs(factor - 1) > 1e-3 and close(a, factor * e):
            return (f"every value is the expected one times {factor:.4g}: a scale mistake "
                    "(a wrong or missing divisor, or a factor applied twice)")
    offset = float((a - e).mean())
    if abs(offset) > atol and close(a - offset, e):
        return (f"every value is off by the same {offset:+.4g}: an offset added or not "
                "removed (a bias, a mean)")
    for d in range(a.dim()):
        n = a.shape[d]
        if n < 3:
            continue
        for k in (1, -1):
            got = a.narrow(d, 0, n - 1) if k == 1 else a.narrow(d, 1, n - 1)
            want = e.narrow(d, 1, n - 1) if k == 1 else e.narrow(d, 0, n - 1)
            if close(got, want):
                return (f"your values are the expected ones shifted by one along dimension {d}"
                        f": index i holds what belongs at index i {'+' if k == 1 else '-'} 1 "
                        "(an off-by-one: a range that starts at 1 instead of 0, or a shift "
                        "the wrong way)")
    bad = ~torch.isclose(a, e, rtol=rtol, atol=atol)
    best = None
    for d in range(a.dim()):
        if a.shape[d] < 2:
            continue
        rows = bad.transpose(0, d).reshape(a.shape[d], -1).any(1)      # (size of dim d,)
        n = int(rows.sum())
        if 0 < n < a.shape[d] and (best is None or n / a.shape[d] < best[0]):
            best = (n / a.shape[d], d, rows.nonzero().flatten().tolist())
    if best is not None:
        _, d, idx = best
        shown = ", ".join(map(str, idx[:6])) + (", ..." if len(idx) > 6 else "")
        return (f"only indices {shown} of dimension {d} (size {a.shape[d]}) differ; the "
                "others match: look at what is special about them (the first or last "
                "position, padding, one head, one batch element)")
    return ""
