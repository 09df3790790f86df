"""Hidden tests of Day 14's memory estimate: ``training_memory`` and ``lora_params``.

Expected values are the arithmetic of the definitions (weights for every value; gradients and
optimizer states for trainable values only; LoRA's A (r, d_in) and B (d_out, r)), computed
here for sizes the notebook never uses.
"""

from __future__ import annotations

from autograder.judge.checks import CheckFailure, call, shown, value_check
from course.checking import note_value_checked

KEYS = ("weights", "gradients", "optimizer", "total")


def _expected(num: int, trainable: int, per_value: int, states: int) -> dict[str, int]:
    weights, gradients = num * per_value, trainable * per_value
    optimizer = trainable * states * per_value
    return {"weights": weights, "gradients": gradients, "optimizer": optimizer,
            "total": weights + gradients + optimizer}


def _why(key: str, got: int, num: int, trainable: int, per_value: int, states: int) -> str:
    """The classic mistake that gives ``got`` for ``key``, or ''."""
    known = {
        "gradients": {num * per_value: "gradients exist only for trainable values: "
                                       "trainable_params * bytes_per_value",
                      trainable: "you counted values, not bytes: multiply by bytes_per_value"},
        "optimizer": {trainable * per_value: "each trainable value has optimizer_states values "
                                             "(AdamW: 2): multiply by optimizer_states",
                      num * states * per_value: "frozen values have no optimizer state: use "
                                                "trainable_params",
                      trainable * states: "you counted values, not bytes: multiply by "
                                          "bytes_per_value"},
        "weights": {trainable * per_value: "every weight is held, frozen or not: num_params",
                    num: "you counted values, not bytes: multiply by bytes_per_value"},
    }
    return known.get(key, {}).get(got, "")


@value_check
def check_training_memory(training_memory, lora_params) -> None:
    """Four sizes (frozen values, 16-bit values, one optimizer state) and three LoRA shapes."""
    cases = [(1_000, 1_000, 4, 2), (124_439_808, 294_912, 2, 2), (5_000, 0, 2, 2),
             (300, 100, 4, 1)]
    for num, trainable, per_value, states in cases:
        label = (f"training_memory({num:_}, {trainable:_}, bytes_per_value={per_value}, "
                 f"optimizer_states={states})")
        out = call(training_memory, num, trainable, bytes_per_value=per_value,
                   optimizer_states=states, name=label)
        if not isinstance(out, dict) or set(out) != set(KEYS):
            raise CheckFailure(f"{label} should return a dict with keys {list(KEYS)}, got "
                               f"{shown(out)}.")
        bad = [k for k in KEYS if type(out[k]) is not int]
        if bad:
            raise CheckFailure(f"{label}[{shown(bad[0])}] is a {type(out[bad[0]]).__name__}: bytes "
                               "are whole numbers (int).")
        want = _expected(num, trainable, per_value, states)
        for key in KEYS[:3]:
            if out[key] != want[key]:
                why = _why(key, out[key], num, trainable, per_value, states)
                raise CheckFailure(f"{label}[{key!r}] is {out[key]:,}, expected {want[key]:,}"
                                   + (f": {why}." if why else "."))
        if out["total"] != want["total"]:
            raise CheckFailure(f"{label}['total'] is {out['total']:,}, expected "
                               f"{want['total']:,}: the sum of weights, gradients and optimizer.")
    for d_in, d_out, rank in ((768, 768, 8), (4_096, 11_008, 16), (10, 3, 2)):
        label = f"lora_params({d_in}, {d_out}, rank={rank})"
        got = call(lora_params, d_in, d_out, rank=rank, name=label)
        want = rank * (d_in + d_out)
        if got == want and type(got) is int:
            continue
        known = {rank * d_in * d_out: "that is a rank-wide stack of full matrices: LoRA learns "
                                      "A (rank, d_in) and B (d_out, rank)",
                 d_in * d_out: "that is the frozen matrix itself: LoRA learns A (rank, d_in) and "
                               "B (d_out, rank)",
                 rank * d_in: "that is A (rank, d_in) alone: add B (d_out, rank)",
                 rank * d_out: "that is B (d_out, rank) alone: add A (rank, d_in)"}
        why = known.get(got, "") if got != want else "return an int"
        raise CheckFailure(f"{label} returned {shown(got)}, expected {want:,}"
                           + (f": {why}." if why else "."))
    note_value_checked()
