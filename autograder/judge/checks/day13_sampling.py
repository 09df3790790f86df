"""Hidden tests of Day 13's sampling: temperature, top-k, top-p, and the crop to the model's
context.

Sampling is tested statistically: a model whose next-token logits are fixed is sampled 20,000
times in one batched call, and the frequencies must lie within 0.02 of the intended
probabilities (five standard deviations of a binomial frequency at n = 20,000 is at most 0.018).
"""

from __future__ import annotations

import torch

from autograder.judge.checks import (
    CheckFailure,
    call,
    expect_tensor,
    leans_on,
    observed_check,
    rng,
    shown,
    token_ids,
    value_check,
)
from course.checking import generator, note_value_checked, record, twin
from course.probes import Recorder

# --------------------------------------------------------------------------- sampling

DRAWS = 20_000
TOL = 0.02


def _recorder(logits: torch.Tensor, n_ctx: int = 8):
    """A :class:`Recorder` with next-token ``logits``, where the learner's code runs."""
    local = Recorder(logits.numel(), n_ctx)
    local.logits.copy_(logits.double().reshape(-1))
    return twin(local)


def _frequencies(generate, logits, seed, **kwargs) -> torch.Tensor:
    model = _recorder(logits)
    idx = torch.zeros(DRAWS, 1, dtype=torch.long)
    label = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    out = call(generate, model, idx, 1, generator=generator(seed), **kwargs,
               name=f"generate(model, idx of shape ({DRAWS}, 1), 1, {label})")
    expect_tensor(out, f"generate output ({label})", shape=(DRAWS, 2), dtype=torch.long)
    # Every sampled id within the judge's vocabulary before bincount sizes its counts by the
    # largest one (an id of 150,000,000 would cost 1.2 GB, and print 150 million counts).
    drawn = token_ids(out[:, 1], logits.numel(), f"generate output ({label})[:, 1]")
    return torch.bincount(drawn, minlength=logits.numel()).double() / DRAWS


def _fmt(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{float(v):.3f}" for v in t) + "]"


@observed_check
@leans_on("check_generate_temperature")
def check_generate_crop(generate) -> None:
    """n_ctx = 5: every input <= 5 tokens and equal to the last 5 of the sequence so far."""
    g = rng(40)
    model = _recorder(torch.randn(6, generator=g), n_ctx=5)
    idx = torch.tensor([[1, 2, 3], [4, 5, 0]])
    out = call(generate, model, idx, 6, generator=generator(41),
               name="generate(model with n_ctx = 5, idx of shape (2, 3), 6)")
    expect_tensor(out, "generate output", shape=(2, 9), dtype=torch.long)
    if not torch.equal(out[:, :3], idx):
        raise CheckFailure("the output must start with the prompt idx unchanged.")
    inputs = record(model, "inputs")
    if len(inputs) != 6:
        raise CheckFailure(f"generate called the model {len(inputs)} times for 6 new "
                           "tokens: call it once per new token.")
    for step, seen in enumerate(inputs):
        length = 3 + step
        want = out[:, max(0, length - 5):length]
        if not torch.equal(seen, want):
            raise CheckFailure(f"at step {step} the model saw {shown(seen)}, expected the last "
                               f"n_ctx tokens so far {want.tolist()}: crop with "
                               "idx[:, -model.n_ctx:] (the most recent tokens, not the first "
                               "ones).")
    note_value_checked()


@value_check
def check_generate_temperature(generate) -> None:
    """Frequencies within 0.02 of softmax(logits / T) for T = 0.5 and 2; T = 0 raises."""
    logits = torch.tensor([1.5, 0.5, 0.0, -0.5, -1.0], dtype=torch.float64)
    for n, temperature in enumerate((0.5, 2.0)):
        freq = _frequencies(generate, logits, 42 + n, temperature=temperature)
        want = torch.softmax(logits / temperature, dim=-1)
        if float((freq - want).abs().max()) <= TOL:
            continue
        plain = torch.softmax(logits, dim=-1)
        times = torch.softmax(logits * temperature, dim=-1)
        if float((freq - plain).abs().max()) <= TOL:
            hint = ("temperature had no effect: it was applied after the softmax (multinomial "
                    "renormalises the probabilities). Divide the logits by temperature before "
                    "the softmax")
        elif float((freq - times).abs().max()) <= TOL:
            hint = "you multiplied the logits by temperature: divide them"
        else:
            hint = "sample from softmax(logits / temperature)"
        raise CheckFailure(f"at temperature {temperature} the frequencies over {DRAWS} draws "
                           f"were {_fmt(freq)}, expected {_fmt(want)} (±{TOL}): {hint}.")
    note_value_checked()     # the sampled frequencies against the judge's softmax
    _temperature_zero_raises(generate, logits)


def _temperature_zero_raises(generate, logits) -> None:
    try:
        generate(_recorder(logits), torch.zeros(1, 1, dtype=torch.long), 1, temperature=0.0)
    except ValueError:
        return
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
        raise CheckFailure(f"temperature=0 raised {type(exc).__name__}: {str(exc)[:300]}; "
                           "check it first "
                           "and raise a ValueError with a clear message.") from None
    raise CheckFailure("temperature=0 raised no error: dividing by 0 gives inf/NaN logits. "
                       "Raise a ValueError (temperature must be > 0).")


@value_check
def check_generate_top_k(generate) -> None:
    """top_k = 3 of 7: exactly the top 3 appear, renormalised; top_k = 100 is clamped."""
    logits = torch.tensor([0.2, 1.4, -0.3, 1.0, 0.9, -1.2, 0.1], dtype=torch.float64)
    freq = _frequencies(generate, logits, 50, top_k=3)
    keep = torch.zeros(7, dtype=torch.bool)
    keep[[1, 3, 4]] = True
    want = torch.softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)
    seen = int((freq > 0).sum())
    if seen != 3:
        hint = ("top_k kept k - 1 tokens: keep the k largest logits (mask those strictly "
                "below the k-th largest)" if seen == 2 else
                "top_k=3 must keep exactly the 3 largest logits")
        raise CheckFailure(f"with top_k=3, {seen} distinct tokens were drawn "
                           f"(frequencies {_fmt(freq)}): {hint}.")
    if float((freq - want).abs().max()) > TOL:
        raise CheckFailure(f"with top_k=3 the frequencies were {_fmt(freq)}, expected "
                           f"{_fmt(want)} (±{TOL}): keep the 3 largest logits and renormalise "
                           "with the softmax.")
    freq = _frequencies(generate, logits, 51, top_k=100)
    want = torch.softmax(logits, dim=-1)
    if float((freq - want).abs().max()) > TOL:
        raise CheckFailure(f"with top_k=100 > vocabulary 7 the frequencies were {_fmt(freq)}, "
                           f"expected the full distribution {_fmt(want)}: clamp k to the "
                           "vocabulary size.")
    note_value_checked()


@value_check
def check_generate_top_p(generate) -> None:
    """Probabilities (0.45, 0.3, 0.15, 0.07, 0.03), shuffled: top_p 0.6 -> 2 tokens, 0.85 -> 3.

    No threshold equals a cumulative sum (0.45, 0.75, 0.90, 0.97): a sum that reaches p
    exactly would make the kept set depend on the last bit of floating point."""
    probs = torch.tensor([0.07, 0.45, 0.03, 0.15, 0.30], dtype=torch.float64)
    logits = probs.log()
    order = [1, 4, 3, 0, 2]          # tokens by decreasing probability
    for n, (p, kept) in enumerate(((0.6, 2), (0.85, 3), (0.01, 1))):
        freq = _frequencies(generate, logits, 60 + n, top_p=p)
        keep = torch.zeros(5, dtype=torch.bool)
        keep[order[:kept]] = True
        want = torch.where(keep, probs, 0.0) / probs[keep].sum()
        if float((freq - want).abs().max()) <= TOL:
            continue
        seen = int((freq > 0).sum())
        if seen == kept - 1:
            hint = ("top_p dropped the token that crosses p: keep the smallest set whose mass "
                    "reaches p, including the token that crosses it (remove a token only when "
                    "the mass before it is already >= p)")
        elif seen == kept + 1:
            hint = "top_p kept one token too many: stop at the token whose cumulative mass " \
                   "first reaches p"
        else:
            hint = "sort the probabilities in decreasing order and keep the prefix whose " \
                   "mass first reaches p; scatter the mask back to the original token order"
        raise CheckFailure(f"with top_p={p} the frequencies were {_fmt(freq)}, expected "
                           f"{_fmt(want)} (±{TOL}, {kept} token(s) kept): {hint}.")
    _top_p_order(generate, probs, order)
    note_value_checked()


def _top_p_order(generate, probs: torch.Tensor, order: list[int]) -> None:
    """The order of the steps: top_p on the tempered probabilities (temperature 2, top_p 0.7:
    3 tokens, against 2 untempered) and among the tokens top_k kept (top_k 2, top_p 0.5: 1
    token, the 2 kept ones renormalised to 0.6 and 0.4; against 2 when top_p runs first).
    The cumulative sums (0.328, 0.596, 0.785 tempered; 0.6 after top_k) are 0.1 from the p."""
    tempered = probs.sqrt() / probs.sqrt().sum()                   # softmax(log p / 2)
    cases = (
        (dict(temperature=2.0, top_p=0.7), 3, tempered, 2,
         "apply the temperature before top_p: the kept set is chosen from "
         "softmax(logits / temperature), the probabilities that are sampled"),
        (dict(top_k=2, top_p=0.5), 1, probs, 2,
         "apply top_k before top_p: top_p's mass is measured among the tokens top_k kept, "
         "their probabilities renormalised"),
    )
    for n, (kwargs, kept, dist, wrong, hint) in enumerate(cases):
        freq = _frequencies(generate, probs.log(), 70 + n, **kwargs)
        keep = torch.zeros(5, dtype=torch.bool)
        keep[order[:kept]] = True
        want = torch.where(keep, dist, 0.0) / dist[keep].sum()
        if float((freq - want).abs().max()) <= TOL:
            continue
        label = ", ".join(f"{k}={v}" for k, v in kwargs.items())
        why = hint if int((freq > 0).sum()) == wrong else (
            "the steps run in order: temperature, then top_k, then top_p on what is left")
        raise CheckFailure(f"with {label} the frequencies were {_fmt(freq)}, expected "
                           f"{_fmt(want)} (±{TOL}, {kept} token(s) kept): {why}.")
