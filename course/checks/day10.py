"""Visible checks for Day 10."""

from __future__ import annotations

import math

import torch
from torch import nn

from course.checking import CheckFailure, assert_close, call, expect_tensor, passed

BUG_KEYS = ("no_zero_grad", "lr_too_high", "shuffled_labels", "mask_blocks_attention",
            "dropout_at_eval", "unnormalized_inputs")


def check_gradient_norms(gradient_norms) -> None:
    """A linear layer with a known gradient."""
    layer = nn.Linear(2, 1)
    layer.weight.grad = torch.tensor([[3.0, 4.0]])
    out = call(gradient_norms, layer)
    if not isinstance(out, dict) or "weight" not in out:
        raise CheckFailure(f"expected a dict with key 'weight', got {out!r}")
    if "bias" in out:
        raise CheckFailure("bias has no gradient (.grad is None): leave it out")
    assert_close(torch.tensor([float(out["weight"])]), torch.tensor([5.0]), "norm of [[3, 4]]")
    passed("gradient [[3, 4]] has norm 5; a parameter without .grad is left out")


def check_activation_stats(activation_stats) -> None:
    """Two layers; entries for both and no hooks left."""
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    out = call(activation_stats, model, torch.randn(10, 3))
    if not isinstance(out, dict) or set(out) != {"0", "1"}:
        raise CheckFailure(f"expected keys '0' and '1' (the submodules), got {out!r}")
    if any(len(m._forward_hooks) for m in model.modules()):
        raise CheckFailure("hooks are still registered: call handle.remove() on each")
    if out["1"][0] < 0:
        raise CheckFailure("the ReLU's output mean is negative: record the output, not input")
    passed("stats for submodules '0' and '1'; no hook left behind")


def check_attention_entropy(attention_entropy) -> None:
    """A uniform row and a one-hot row."""
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])
    out = expect_tensor(call(attention_entropy, p), "attention_entropy(p)", shape=(2,))
    assert_close(out, torch.tensor([math.log(4), 0.0]), "entropies", rtol=1e-5, atol=1e-6)
    passed("uniform over 4 keys -> ln 4 = 1.386 nats; one-hot -> 0 (no NaN)")


class _FirstOnly(nn.Module):
    """Two layers, of which forward calls only the first."""

    def __init__(self, used: nn.Module, unused: nn.Module) -> None:
        super().__init__()
        self.used, self.unused = used, unused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def check_one_step_changes(one_step_changes) -> None:
    """A linear layer and a parameter the loss never reaches; stale gradients present."""
    torch.manual_seed(0)
    model = _FirstOnly(nn.Linear(3, 2), nn.Linear(4, 4))
    model.used.weight.grad = torch.ones(2, 3)                     # stale: must be zeroed
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])
    reference = nn.Linear(3, 2)
    reference.load_state_dict(model.used.state_dict())
    torch.nn.functional.cross_entropy(reference(x), y).backward()
    want = {"used.weight": 0.1 * reference.weight.grad.abs().max().item(),
            "used.bias": 0.1 * reference.bias.grad.abs().max().item(), "unused.weight": 0.0,
            "unused.bias": 0.0}
    out = call(one_step_changes, model, x, y)
    if not isinstance(out, dict) or set(out) != set(want):
        raise CheckFailure(f"expected a dict with keys {sorted(want)} (every parameter), "
                           f"got {out!r}")
    if out["used.weight"] == 0 and out["used.bias"] == 0:
        raise CheckFailure("nothing moved: copy the parameters with p.detach().clone() before "
                           "the step (a copy that shares memory changes with them)")
    assert_close(torch.tensor([float(out[k]) for k in want]), torch.tensor(list(want.values())),
                 "changes of used.weight, used.bias, unused.weight, unused.bias",
                 rtol=1e-4, atol=1e-7)
    passed("the linear layer moved by lr x its largest gradient entry; the unused layer did "
           "not move (0.0)")


class _OneFeedForward(nn.Module):
    """``ffn.linear1`` (3 -> 4) -> GELU -> ``ffn.linear2`` (4 -> 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.ffn = nn.Module()
        self.ffn.linear1, self.ffn.linear2 = nn.Linear(3, 4), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn.linear2(torch.nn.functional.gelu(self.ffn.linear1(x)))


def check_dead_units(dead_units) -> None:
    """One feed-forward block: unit 1 can never switch on, unit 3 sits at -1 (GELU' = -0.08)."""
    model = _OneFeedForward()
    with torch.no_grad():
        model.ffn.linear1.weight.fill_(0.1)
        model.ffn.linear1.weight[3] = 0.0
        model.ffn.linear1.bias.copy_(torch.tensor([1.0, -50.0, 1.0, -1.0]))
    x = torch.randn(2, 5, 3)
    out = call(dead_units, model, x)
    if out != {"ffn.linear1": 1}:
        hint = (" (unit 3 sits at -1, where GELU still passes gradient: count only units at or "
                "below threshold, -3 by default)" if out == {"ffn.linear1": 2} else "")
        raise CheckFailure(f"expected {{'ffn.linear1': 1}} (unit 1's bias is -50), got {out!r}"
                           + hint)
    relu_rule = call(dead_units, model, x, threshold=0.0)
    if relu_rule != {"ffn.linear1": 2}:
        raise CheckFailure("with threshold=0.0 (the ReLU rule) units 1 and 3 are both dead: "
                           f"expected {{'ffn.linear1': 2}}, got {relu_rule!r}")
    if any(len(m._forward_hooks) for m in model.modules()):
        raise CheckFailure("hooks are still registered: call handle.remove() on each")
    passed("unit 1 (bias -50) is dead, unit 3 (at -1) is not; with threshold=0.0 both are; "
           "no hook left behind")


def check_diagnosis_format(DIAGNOSIS) -> None:
    """Six letters, each mapped to one of the bug keys (not whether they are right)."""
    if not isinstance(DIAGNOSIS, dict) or sorted(DIAGNOSIS) != list("ABCDEF"):
        raise CheckFailure("DIAGNOSIS should map each of 'A'..'F' to a bug key")
    bad = {k: v for k, v in DIAGNOSIS.items() if v not in BUG_KEYS}
    if bad:
        raise CheckFailure(f"not bug keys: {bad}; choose from {BUG_KEYS}")
    passed("DIAGNOSIS names one bug key for each of A-F (the hidden test checks them)")
