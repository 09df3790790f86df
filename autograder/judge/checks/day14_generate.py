"""Hidden test of Day 14's generation with a KV cache: the tokens equal greedy decoding that
recomputes the whole sequence at every step, and the model is fed one new token per step.
"""

from __future__ import annotations

import torch

from autograder.judge.checks import (
    CheckFailure,
    call,
    expect_tensor,
    rng,
    shown,
    value_check,
)
from course.checking import note_value_checked, record, twin
from course.probes import CachedLM

# --------------------------------------------------------------------------- cached generation


def _cached_lm() -> CachedLM:
    """A one-block causal LM with a KV cache (``course.probes.CachedLM``), weights from a seed."""
    model = CachedLM(13, d_model=16, num_heads=2, n_ctx=64)
    g = rng(58)
    with torch.no_grad():
        for p, scale in ((model.emb, 1.0), (model.freq, 0.5), (model.w_qkv, 0.25),
                         (model.w_out, 1.0)):
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * scale)
    return model


def _greedy_recompute(model, idx, n):
    for _ in range(n):
        logits, _ = model(idx)
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return idx


def _generation_difference(got: torch.Tensor, want: torch.Tensor, prompt: torch.Tensor) -> str:
    """Where the generated tokens (B, T) first differ from greedy recomputation, and the likely
    cause: the first differing row and position, that row of both, and a hint."""
    n = prompt.size(1)
    row, pos = (int(i) for i in (got != want).nonzero()[0])          # first in row-major order
    where = (f"the cached generation differs from greedy recomputation in row {row} from "
             f"position {pos} on: row {row} got {got[row].tolist()}, expected "
             f"{want[row].tolist()}")
    if not torch.equal(got[:, :n], prompt):
        return where + ". The output must start with the prompt, unchanged."
    new_got, new_want = got[:, n:], want[:, n:]                      # (B, 12) each
    one_row = any(torch.equal(new_got[0], new_want[r]) for r in range(new_want.size(0)))
    if (bool((new_got == new_got[:1]).all()) and not bool((new_want == new_want[:1]).all())
            and one_row):   # every row got the tokens one row's greedy decoding makes
        return where + (". Every row got the same tokens: take the argmax per row, "
                        "logits[:, -1].argmax(-1), not one row's.")
    if pos == n:
        return where + (". The first new token is already wrong: after the prefill, take the "
                        "argmax of the last position's logits (logits[:, -1]) over the "
                        "vocabulary (dim=-1).")
    return where + (". The first new token is right and a later one is not: feed the newest "
                    "token with the cache the previous call returned (not the first call's, "
                    "not None).")


@value_check
def check_generate_with_cache_matches(generate_with_cache) -> None:
    """Same tokens as greedy recomputation for 12 new tokens; one token per call after prefill."""
    prompt = torch.randint(0, 13, (3, 5), generator=rng(59))
    local = _cached_lm()
    with torch.no_grad():
        want = _greedy_recompute(local, prompt, 12)
    model = twin(local)
    with torch.no_grad():
        got = call(generate_with_cache, model, prompt, 12,
                   name="generate_with_cache(model, prompt of shape (3, 5), 12)")
    expect_tensor(got, "generated tokens", shape=(3, 17), dtype=torch.long)
    fed = record(model, "fed")
    fed_after = fed[1:]
    if fed and fed[0] != 5:
        raise CheckFailure(f"the first call fed {shown(fed[0])} tokens: run the whole prompt "
                           "(5 tokens) once to fill the cache (prefill).")
    if any(n != 1 for n in fed_after):
        raise CheckFailure(f"after the prompt the model was fed {shown(fed_after[:4])}... "
                           "tokens per "
                           "call: with a cache, feed only the newest token (idx[:, -1:]); "
                           "feeding the sequence again appends its keys to the cache twice.")
    if not torch.equal(got, want):
        raise CheckFailure(_generation_difference(got, want, prompt))
    note_value_checked()
    if len(fed) > 13:
        raise CheckFailure(f"{len(fed)} model calls for 12 new tokens: one prefill and "
                           "at most one call per new token.")
