"""Hidden tests of Day 10: gradient_norms, activation_stats (hooks), attention_entropy,
one_step_changes, dead_units, bug hunt.

Expected values come from gradients and activations injected or computed here with PyTorch,
from the entropy formula evaluated in float64, and from the known bug of each set-up.
"""

from __future__ import annotations

import math

import torch

from autograder.judge.checks import (
    CheckFailure,
    call,
    compare,
    observed_check,
    rng,
    shown,
    value_check,
)
from course.checking import note_value_checked, observe, twin
from course.probes import (
    ActivationProbe,
    BrokenForward,
    FeedForwardProbe,
    GradientProbe,
    hook_count,
)

# check_one_step_changes steps SGD and Adam here for its expected values: the judge's warm-up
# takes one optimizer step first (PyTorch's first step() imports its compiler stack, ~1 s).
JUDGE_STEPS_OPTIMIZERS = True

# ---------------------------------------------------------------------------- gradient_norms


def _grad_model():
    model = GradientProbe()                 # `extra` is never used: its .grad stays None
    g = rng(100)
    with torch.no_grad():
        for p in (model.net[0].weight, model.net[0].bias, model.net[2].weight):
            p.copy_(torch.randn(p.shape, generator=g))
            p.grad = torch.randn(p.shape, generator=g) * 3
    return model


@value_check
def check_gradient_norms(gradient_norms) -> None:
    """Injected gradients; a parameter without a gradient is left out."""
    model = _grad_model()
    out = call(gradient_norms, twin(model), name="gradient_norms(model)")
    if not isinstance(out, dict):
        raise CheckFailure(f"gradient_norms should return a dict, got {type(out).__name__}.")
    expected = {n: float(p.grad.norm()) for n, p in model.named_parameters()
                if p.grad is not None}
    if "extra" in out:
        raise CheckFailure("gradient_norms reported 'extra', whose .grad is None: leave out "
                           "parameters without a gradient (p.grad is None).")
    if set(out) != set(expected):
        raise CheckFailure(f"gradient_norms returned keys {shown(sorted(out))}, expected the "
                           "parameter "
                           f"names {sorted(expected)} (from model.named_parameters()).")
    bad = [n for n, v in out.items() if type(v) is not float]
    if bad:
        raise CheckFailure(f"gradient_norms[{shown(bad[0])}] is a {type(out[bad[0]]).__name__}: "
                           "return Python floats (.item()).")
    names = sorted(expected)
    got = torch.tensor([out[n] for n in names], dtype=torch.float64)
    want = torch.tensor([expected[n] for n in names], dtype=torch.float64)
    compare(got, want, "gradient norms",
            {"you returned squared norms: take the square root (p.grad.norm())": want ** 2,
             "you returned the norm of the weights, not of their gradients: use p.grad":
                 torch.tensor([float(dict(model.named_parameters())[n].detach().norm())
                               for n in names], dtype=torch.float64),
             "you returned the largest absolute gradient entry: use the L2 norm":
                 torch.tensor([float(dict(model.named_parameters())[n].grad.abs().max())
                               for n in names], dtype=torch.float64)},
            rtol=1e-5, atol=1e-7, labels=names)


# -------------------------------------------------------------------------- activation_stats

def _activation_probe() -> ActivationProbe:
    model = ActivationProbe()
    g = rng(101)
    with torch.no_grad():
        model.proj.weight.copy_(torch.randn(8, 6, generator=g))
        model.proj.bias.copy_(torch.randn(8, generator=g) + 2)
    return model


def _reference_stats(model, x, unbiased=True):
    with torch.no_grad():
        p = model.proj(x)
        r = model.block[0](p)
        n = model.block[1](r)
        pair = n * 2 + 1
    std = (lambda t: float(t.std())) if unbiased else (lambda t: float(t.std(unbiased=False)))
    return {"proj": (float(p.mean()), std(p)), "block.0": (float(r.mean()), std(r)),
            "block.1": (float(n.mean()), std(n)), "block": (float(n.mean()), std(n)),
            "pair": (float(pair.mean()), std(pair))}


@value_check
def check_activation_stats_values(activation_stats) -> None:
    """Names, means and stds of every submodule's output (tuple outputs: first element)."""
    model = _activation_probe().eval()
    x = torch.randn(5, 3, 6, generator=rng(102))
    out = call(activation_stats, twin(model), x,
               name="activation_stats(model, x of shape (5, 3, 6))")
    if not isinstance(out, dict):
        raise CheckFailure(f"activation_stats should return a dict, got {type(out).__name__}.")
    expected = _reference_stats(model, x)
    missing = [n for n in expected if n not in out]
    if missing:
        raise CheckFailure(
            f"activation_stats has no entry for {missing}; got keys {shown(sorted(out))}. "
            "Hook every "
            "submodule of model.named_modules() except the model itself (name ''), nested ones "
            "('block.0') included; for a tuple output use its first element.")
    if "" in out:
        raise CheckFailure("activation_stats has an entry '' (the model itself): skip it.")
    if "index" in out:
        raise CheckFailure("activation_stats reported 'index', whose output is an integer "
                           "tensor: skip outputs that are not floating point.")
    population = _reference_stats(model, x, unbiased=False)
    names = sorted(expected)
    for name in names:
        value = out[name]
        if (not isinstance(value, tuple) or len(value) != 2
                or not all(type(v) is float for v in value)):
            raise CheckFailure(f"activation_stats[{shown(name)}] should be a tuple (mean, std) of "
                               f"Python floats, got {shown(value)}.")
    got = torch.tensor([out[n] for n in names], dtype=torch.float64)
    want = torch.tensor([expected[n] for n in names], dtype=torch.float64)
    if torch.allclose(got, torch.tensor([population[n] for n in names], dtype=torch.float64),
                      rtol=1e-5, atol=1e-6):
        note_value_checked()   # population std is fine too
        return
    with torch.no_grad():
        p = model.proj(x)
        r = model.block[0](p)
        n = model.block[1](r)
    seen = {"proj": x, "block": p, "block.0": p, "block.1": r, "pair": n}
    wrong_inputs = torch.tensor([(float(seen[k].mean()), float(seen[k].std())) for k in names],
                                dtype=torch.float64)
    compare(got, want, "(mean, std) per module, rows in order " + ", ".join(names),
            {"you recorded the module's input, not its output: the hook is called as "
             "hook(module, inputs, output)": wrong_inputs},
            rtol=1e-5, atol=1e-6)


def _hook_count(model) -> int:
    return observe(hook_count, model)


@observed_check
def check_activation_stats_hooks(activation_stats) -> None:
    """No hook left behind after a normal call, nor after a forward pass that raises."""
    model = twin(_activation_probe())
    before = _hook_count(model)
    call(activation_stats, model, torch.randn(2, 6, generator=rng(103)),
         name="activation_stats(model, x)")
    left = _hook_count(model) - before
    if left:
        raise CheckFailure(
            f"{left} forward hooks are still registered after activation_stats returned: "
            "keep the handles from register_forward_hook and call handle.remove() on each "
            "(in a finally: block). Hooks left behind keep running on every forward pass.")
    broken = twin(BrokenForward())
    try:
        activation_stats(broken, torch.randn(2, 4, generator=rng(104)))
    except ValueError:
        pass
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
        raise CheckFailure(f"activation_stats raised {type(exc).__name__}: {exc} instead of "
                           "letting the model's ValueError through.") from exc
    left = _hook_count(broken)
    if left:
        raise CheckFailure(
            f"when the forward pass raises, {left} hooks stay registered: remove them in a "
            "try: ... finally: block so they are removed whatever happens.")


# ------------------------------------------------------------------------- attention_entropy

def _entropy(p: torch.Tensor) -> torch.Tensor:
    p = p.double()
    return -torch.where(p > 0, p * torch.log(torch.where(p > 0, p, torch.ones_like(p))),
                        torch.zeros_like(p)).sum(-1)


@value_check
def check_attention_entropy(attention_entropy) -> None:
    """Random 4-D rows, one-hot rows, uniform rows, rows with exact zeros."""
    g = rng(105)
    scores = torch.randn(2, 3, 4, 7, generator=g, dtype=torch.float64)
    mask = torch.ones(4, 7, dtype=torch.bool).tril(diagonal=2)       # (seq_q, seq_k)
    cases = {
        "random rows (2, 3, 4, 7)": torch.softmax(scores, -1),
        "rows with masked (exactly zero) keys": torch.softmax(
            scores.masked_fill(~mask, float("-inf")), -1),
        "one-hot rows (5, 9)": torch.eye(9, dtype=torch.float64)[:5],
        "uniform rows (3, 11)": torch.full((3, 11), 1 / 11, dtype=torch.float64),
    }
    for label, p in cases.items():
        out = call(attention_entropy, p, name=f"attention_entropy({label})")
        if (isinstance(out, torch.Tensor) and out.is_floating_point()
                and bool(torch.isnan(out).any())):
            raise CheckFailure(
                f"attention_entropy of {label} contains NaN: masked keys have p = 0 exactly, "
                "and 0 * log(0) = 0 * -inf = NaN in floating point. Treat 0 ln 0 as 0 (e.g. "
                "p * torch.log(p.clamp_min(tiny))).")
        expected = _entropy(p)
        safe = p.clamp_min(1e-300)
        compare(out, expected, f"attention_entropy of {label}",
                {"you used log base 2 (bits): use the natural log torch.log (nats)":
                     expected / math.log(2),
                 "you forgot the minus sign: H = -sum p ln p": -expected,
                 "you summed over the queries: sum over the keys (dim=-1)":
                     -(safe.log() * p).sum(-2)},
                rtol=1e-5, atol=1e-6,
                hint="masked keys have p = 0 exactly, and 0 * log(0) = NaN in floating point: "
                     "treat 0 ln 0 as 0 (e.g. p * torch.log(p.clamp_min(tiny))).")


# -------------------------------------------------------------------------- one_step_changes

def _changes(model, inputs, labels, lr, *, zero_grad=True, optimizer=torch.optim.SGD,
             reduce=lambda d: d.abs().max()) -> dict[str, float]:
    """One step here, with PyTorch's optimizer, on a copy of ``model``: {name: change}."""
    import copy

    import torch.nn.functional as F

    stale = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model = copy.deepcopy(model)                 # (a Parameter's deepcopy drops its .grad)
    for n, p in model.named_parameters():
        p.grad = stale.get(n)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = optimizer(model.parameters(), lr=lr)
    if zero_grad:
        opt.zero_grad()
    F.cross_entropy(model(inputs), labels).backward()
    opt.step()
    return {n: float(reduce(p.detach() - before[n])) for n, p in model.named_parameters()}


@value_check
def check_one_step_changes(one_step_changes) -> None:
    """Injected weights and stale gradients; ``extra`` is never reached by the loss."""
    model = _grad_model()                     # stale .grad on every used parameter
    model.train()
    inputs = torch.randn(6, 4, generator=rng(106))
    labels = torch.tensor([0, 1, 1, 0, 1, 0])
    lr = 0.05
    out = call(one_step_changes, twin(model), inputs, labels, lr=lr,
               name="one_step_changes(model, inputs (6, 4), labels (6,), lr=0.05)")
    if not isinstance(out, dict):
        raise CheckFailure(f"one_step_changes should return a dict, got {type(out).__name__}.")
    expected = _changes(model, inputs, labels, lr)
    names = list(expected)
    if "extra" not in out and set(out) == set(names) - {"extra"}:
        raise CheckFailure("one_step_changes has no entry for 'extra', a parameter the loss "
                           "never reaches: report every parameter of model.named_parameters(), "
                           "0.0 for one that did not move (that is the finding).")
    if set(out) != set(names):
        raise CheckFailure(f"one_step_changes returned keys {shown(sorted(out))}, expected every "
                           f"parameter name {sorted(names)} (from model.named_parameters()).")
    bad = [n for n in names if type(out[n]) is not float]
    if bad:
        raise CheckFailure(f"one_step_changes[{shown(bad[0])}] is a {type(out[bad[0]]).__name__}: "
                           "return Python floats (.item()).")
    got = torch.tensor([out[n] for n in names], dtype=torch.float64)
    want = torch.tensor([expected[n] for n in names], dtype=torch.float64)
    if bool((got == 0).all()):
        raise CheckFailure(
            "one_step_changes says no parameter moved, but one SGD step moves three of the "
            "four: your copy from before the step shares memory with the parameter (p.detach() "
            "or the parameter itself), so the step changed it too. Copy with p.detach().clone().")

    def table(changes: dict[str, float]) -> torch.Tensor:
        return torch.tensor([changes[n] for n in names], dtype=torch.float64)

    compare(got, want, "largest change per parameter, in order " + ", ".join(names),
            {"the model's stale gradients from earlier steps were added to this step's: call "
             "optimizer.zero_grad() (or model.zero_grad()) before backward()":
                 table(_changes(model, inputs, labels, lr, zero_grad=False)),
             "you ignored the lr argument (0.05 here): pass it to torch.optim.SGD":
                 table(_changes(model, inputs, labels, 0.1)),
             "you averaged the absolute changes: return the largest one (.abs().max())":
                 table(_changes(model, inputs, labels, lr, reduce=lambda d: d.abs().mean())),
             "you took an Adam or AdamW step: take a plain SGD step":
                 table(_changes(model, inputs, labels, lr, optimizer=torch.optim.Adam))},
            rtol=1e-5, atol=1e-8, labels=names)


# -------------------------------------------------------------------------------- dead_units

def _dead_reference(model, x, threshold=-3.0, reduce="all") -> dict[str, int]:
    """Units of every ``linear1`` whose output is <= threshold for every row (``reduce="any"``:
    for some row), computed here with the same weights."""
    with torch.no_grad():
        first = model.ffn1.linear1(x)
        h = x + model.ffn1(x)
        second = model.ffn2.linear1(h)

    def count(o):
        off = o.reshape(-1, o.size(-1)) <= threshold                   # (rows, d_ff)
        return int((off.all(0) if reduce == "all" else off.any(0)).sum())
    return {"ffn1.linear1": count(first), "ffn2.linear1": count(second)}


def _dead_model():
    """A FeedForwardProbe whose units play drawn roles, and its (4, 5, 6) input.

    ffn1 (10 units): 3 dead (bias -40), 2 asleep (weights 0, a bias between -2.5 and -0.5:
    dead for ReLU, alive for GELU), 1 below -4 for example 0 only, 1 around -3 (below on a row
    of example 1, above on a row of example 0, for every draw: "off for some token" and "off
    for every token of example 0" never count alike), the rest alive (bias 3 to 4). ffn2 (8
    units): 4 dead, 1 asleep, the rest alive.
    """
    model = FeedForwardProbe()
    g = rng(107)
    with torch.no_grad():
        for layer in (model.ffn1.linear1, model.ffn2.linear1):
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) * 0.3)
            layer.bias.copy_(torch.rand(layer.bias.shape, generator=g) + 3.0)   # alive: > 0
        roles1 = torch.randperm(10, generator=g).tolist()
        roles2 = torch.randperm(8, generator=g).tolist()
        first, second = model.ffn1.linear1, model.ffn2.linear1
        first.bias[roles1[:3]] = -40.0                                 # dead
        second.bias[roles2[:4]] = -40.0
        for layer, asleep in ((first, roles1[3:5]), (second, roles2[4:5])):
            layer.weight[asleep] = 0.0                                 # asleep: one value,
            layer.bias[asleep] = -2.5 + 2.0 * torch.rand(len(asleep), generator=g)  # -2.5..-0.5
        one_example = roles1[5]                                        # reads feature 0
        first.weight[one_example] = torch.tensor([1.0, 0, 0, 0, 0, 0])
        first.bias[one_example] = -4.0
        around = roles1[6]                                             # reads feature 1
        first.weight[around] = torch.tensor([0, 1.0, 0, 0, 0, 0])
        first.bias[around] = -3.0                                      # below -3 for some rows
    x = torch.randn(4, 5, 6, generator=g)
    x[0, :, 0] = -x[0, :, 0].abs() - 0.1             # one_example: <= -4.1 for example 0 ...
    x[1:, :, 0] = x[1:, :, 0].abs() + 1.5            # ... and >= -2.5 for every other row
    x[1, 0, 1], x[0, 0, 1] = -1.0, 1.0               # around: -4 on a row of example 1, -2 on
    return model, x                                  # a row of example 0 (whatever the draw)


@value_check
def check_dead_units(dead_units) -> None:
    """Injected biases on drawn units: dead ones, asleep ones (between -3 and 0: GELU still
    passes gradient), one off for one example only; the head is not a feed-forward layer; the
    default threshold, then threshold=0.0 (ReLU); no hook is left."""
    model, x = _dead_model()
    twin_model = twin(model)
    before = _hook_count(twin_model)
    out = call(dead_units, twin_model, x, name="dead_units(model, x of shape (4, 5, 6))")
    if not isinstance(out, dict):
        raise CheckFailure(f"dead_units should return a dict, got {type(out).__name__}.")
    expected = _dead_reference(model, x)
    if "head.linear1" in out or "head" in out:
        raise CheckFailure("dead_units reported `head`, which feeds no GELU: count only the "
                           "Linear layers named `linear1` (Day 6's FeedForward contract).")
    if set(out) != set(expected):
        raise CheckFailure(f"dead_units returned keys {shown(sorted(out))}, expected "
                           f"{sorted(expected)}: "
                           "one entry per submodule whose name ends with 'linear1', named as "
                           "in model.named_modules().")
    bad = [n for n, v in out.items() if type(v) is not int]
    if bad:
        raise CheckFailure(f"dead_units[{shown(bad[0])}] is a {type(out[bad[0]]).__name__}: return "
                           "a count (int).")
    if out != expected:
        if out == _dead_reference(model, x, threshold=0.0):
            hint = (": you counted every unit whose input stays <= 0, the ReLU rule; a GELU unit "
                    "between -3 and 0 still passes gradient (GELU'(-1) = -0.08): compare with "
                    "`threshold`, -3.0 by default")
        elif out == _dead_reference(model, x, reduce="any"):
            hint = (": you counted units that are off for *some* token; a dead unit is off for "
                    "every token of every example (.all over the rows)")
        else:
            hint = (": a unit is dead when its linear1 output is <= threshold for every row of "
                    "output.reshape(-1, d_ff) (every example and every position)")
        raise CheckFailure(f"dead_units gave {out}, expected {expected}{hint}.")
    relu_rule = call(dead_units, twin_model, x, threshold=0.0,
                     name="dead_units(model, x, threshold=0.0)")
    expected_relu = _dead_reference(model, x, threshold=0.0)
    if relu_rule != expected_relu:
        hint = (": the result did not change, so `threshold` is ignored; compare the outputs "
                "with it" if relu_rule == expected else "")
        raise CheckFailure(f"dead_units(model, x, threshold=0.0) gave {relu_rule}, expected "
                           f"{expected_relu} (the units <= 0 on every row){hint}.")
    note_value_checked()
    left = _hook_count(twin_model) - before
    if left:
        raise CheckFailure(f"{left} forward hooks are still registered after dead_units "
                           "returned: remove each handle (in a finally: block).")


# ------------------------------------------------------------------------------- bug hunt

_KEYS = {"no_zero_grad", "lr_too_high", "shuffled_labels", "mask_blocks_attention",
         "dropout_at_eval", "unnormalized_inputs"}
_ANSWERS = {"A": "shuffled_labels", "B": "dropout_at_eval", "C": "no_zero_grad",
            "D": "mask_blocks_attention", "E": "unnormalized_inputs", "F": "lr_too_high"}
_TELL = {
    "A": "A's loss sits at ln 10 while attention still spreads normally: the inputs carry no "
         "information about the labels",
    "B": "B's two held-out losses of the same model disagree (Δ eval is not 0): something "
         "random is on at evaluation",
    "C": "C's gradient norms are far above the healthy run's: gradients are never reset",
    "D": "D's attention entropy is exactly 0, and one more step leaves its input projection "
         "unchanged: every token sees only itself",
    "E": "E's input projection output has a std tens of times the healthy run's: the inputs "
         "are not normalized",
    "F": "F's loss jumps up and stays high, and many of its feed-forward units are dead: "
         "the step size",
}


@value_check
def check_diagnosis(DIAGNOSIS) -> None:
    """One right answer per set-up; the message names the ones that are wrong."""
    if not isinstance(DIAGNOSIS, dict):
        raise CheckFailure(f"DIAGNOSIS should be a dict, got {type(DIAGNOSIS).__name__}.")
    unknown = {k: v for k, v in DIAGNOSIS.items() if v not in _KEYS}
    if unknown:
        raise CheckFailure(f"DIAGNOSIS has values that are not bug keys: {unknown}; choose "
                           f"from {sorted(_KEYS)}.")
    wrong = [k for k in sorted(_ANSWERS) if DIAGNOSIS.get(k) != _ANSWERS[k]]
    if wrong:
        raise CheckFailure(
            f"{len(_ANSWERS) - len(wrong)} of {len(_ANSWERS)} set-ups named correctly; look "
            f"again at {', '.join(wrong)}. Hints: " + "; ".join(_TELL[k] for k in wrong) + ".")
    note_value_checked()   # the learner's answers against the judge's own answer key
