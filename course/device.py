"""Device helpers: pick a device, and check that a model runs on any device.

The classic device bug is a tensor created inside ``forward`` without ``device=``
(``torch.arange(n)``, ``torch.tril(torch.ones(n, n))``) or a table kept as a plain attribute
instead of a registered buffer: it works on a laptop and crashes on the GPU. On a machine with
CUDA, :func:`check_runs_on_any_device` runs the model on the GPU and compares with the CPU.
Without CUDA it moves the model to PyTorch's ``meta`` device (shapes only, no memory) and runs
it under a dispatch mode that records the device of every operator's output: any tensor that
lands on another device is reported with the operator that created it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from course.checking import CheckFailure, assert_close, quiet

__all__ = ["get_device", "check_runs_on_any_device"]


def get_device() -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


class _DeviceRecorder(TorchDispatchMode):
    """Records (operator, device) for every tensor an operator outputs off the target device."""

    def __init__(self, target: torch.device) -> None:
        super().__init__()
        self.target = target
        self.strays: list[tuple[str, str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(out)
        for t in flat:
            # A 0-dim CPU tensor (a scalar) mixes with tensors on any device, so it is no bug.
            if isinstance(t, torch.Tensor) and t.device != self.target and t.dim() > 0:
                self.strays.append((str(func.overloadpacket.__name__), str(t.device),
                                    tuple(t.shape)))
        return out


def _to(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple | list):
        return type(obj)(_to(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    return obj


def check_runs_on_any_device(
    fn: Callable[..., Any],
    make_inputs: Callable[[], tuple],
    name: str = "your model",
) -> str:
    """Check that ``fn(*inputs)`` creates no tensor on a device other than its inputs'.

    Args:
        fn: a module (a copy is moved between devices; the original is left untouched) or a
            plain function of tensors.
        make_inputs: returns a tuple of CPU inputs (tensors or plain values).
        name: how to call ``fn`` in messages.

    Returns:
        ``"cuda"`` or ``"meta"``: where the check ran.

    Raises:
        CheckFailure: naming the operator (``aten.arange``, ``aten.ones``...) that created a
        stray tensor, or the error raised on the other device.
    """
    audit = getattr(type(fn), "_remote_audit", None)
    if audit is not None:  # the grading judge: the audit runs in the learner's kernel
        return audit(fn, make_inputs(), name)

    def on(device: torch.device) -> Callable[..., Any]:
        if isinstance(fn, torch.nn.Module):
            return copy.deepcopy(fn).to(device)
        return fn

    if torch.cuda.is_available():
        with quiet():
            expected = fn(*make_inputs())
        cuda = torch.device("cuda")
        try:
            with quiet():
                got = on(cuda)(*_to(make_inputs(), cuda))
        except Exception as exc:  # noqa: BLE001 - the learner's module may raise anything on the GPU: reported
            raise CheckFailure(f"{name} fails on the GPU: {type(exc).__name__}: {exc}") from exc
        got_flat, _ = tree_flatten(got)
        exp_flat, _ = tree_flatten(expected)
        for g, e in zip(got_flat, exp_flat, strict=False):
            if isinstance(e, torch.Tensor) and e.is_floating_point():
                assert_close(g.cpu(), e, f"{name} on the GPU", rtol=1e-3, atol=1e-4)
        return "cuda"

    meta = torch.device("meta")
    recorder = _DeviceRecorder(meta)
    try:
        moved = on(meta)
        inputs = _to(make_inputs(), meta)
        with quiet(), recorder:
            moved(*inputs)
    except CheckFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's module may raise anything: reported
        if not recorder.strays:
            raise CheckFailure(
                f"{name} could not run on another device (checked on PyTorch's 'meta' "
                f"device): {type(exc).__name__}: {exc}. Hint: create tensors with "
                "device=x.device and avoid reading tensor values (.item(), if tensor:) in "
                "forward."
            ) from exc
        # Otherwise the stray tensor reported below is the cause of the crash.
    if recorder.strays:
        op, dev, shape = recorder.strays[0]
        raise CheckFailure(
            f"{name} created a tensor of shape {shape} on '{dev}' with aten.{op} while its "
            "inputs were on another device: it will crash on a GPU. Hint: pass "
            "device=x.device when you create it, or register a fixed table as a buffer "
            "(self.register_buffer) so .to(device) moves it."
        )
    return "meta"
