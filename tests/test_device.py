"""Does the device check name the operator that creates a tensor on the wrong device?"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course.checking import CheckFailure
from course.device import check_runs_on_any_device


class StrayArange(nn.Module):
    def forward(self, x):
        return x + torch.arange(x.shape[-1])          # CPU tensor, whatever x's device


class StrayTril(nn.Module):
    def forward(self, x):
        mask = torch.tril(torch.ones(x.shape[1], x.shape[1])).bool()
        return (x @ x.transpose(-2, -1)).masked_fill(~mask, 0.0)


class PlainAttribute(nn.Module):
    def __init__(self):
        super().__init__()
        self.pe = torch.zeros(1, 8, 4)                # not a buffer: .to(device) skips it

    def forward(self, x):
        return x + self.pe[:, : x.shape[1]]


class GoodBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("pe", torch.zeros(1, 8, 4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        n = x.shape[1]
        causal = torch.tril(torch.ones(n, n, device=x.device, dtype=torch.bool))
        scale = torch.tensor(2.0)                     # a 0-dim CPU scalar mixes with any device
        return self.lin(x + self.pe[:, :n]).masked_fill(~causal[:, :4], 0.0) / scale


def _inputs():
    return (torch.randn(2, 4, 4),)


@pytest.mark.parametrize(
    "module, op",
    [(StrayArange(), "aten.arange"), (StrayTril(), "aten.ones"), (PlainAttribute(), "aten.")],
)
def test_stray_tensors_are_named(module, op):
    """Is a tensor created without device= reported with the operator that made it?"""
    with pytest.raises(CheckFailure, match=op.replace(".", r"\.")):
        check_runs_on_any_device(module, _inputs, name="model")


def test_a_device_safe_module_passes_and_is_left_untouched():
    """Does a module with buffers and device= pass, keeping its weights on the CPU?"""
    module = GoodBuffer()
    before = module.lin.weight.clone()
    assert check_runs_on_any_device(module, _inputs, name="model") in ("meta", "cuda")
    assert module.lin.weight.device.type == "cpu"
    assert torch.equal(module.lin.weight, before)
