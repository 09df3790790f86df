"""Check a numeric self-test answer in the notebook: ``check_answer(day, question, answer)``.

Every day ends with self-test questions, and each has an answer to reveal under it. A question
whose answer is a number (a parameter count, a loss at initialisation, a memory size, a ratio,
a shape) can also be checked at once::

    from course.selftest import check_answer
    check_answer(3, 2, 787_968)   # prints "✅ right: ..." or "❌ not quite: ..."
    check_answer(11, 1, (50, 5))  # a question with two parts takes a tuple

A wrong answer never raises: it prints a hint, naming the slip when it is a common one. Only a
question that has no numeric check raises ``ValueError``. The expected values are computed
below from the arithmetic the answers state. This is a learning aid: it is never graded, and it
knows nothing of the hidden tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["check_answer", "verdict", "QUESTIONS"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Part:
    """One number (or shape) a question asks for.

    Attributes:
        what: what the number is, in a few words.
        value: the expected number, or a shape as a tuple of ints.
        stated: how the revealed answer writes it (a test holds the two together).
        why: the reasoning, printed with a right answer.
        hint: printed with a wrong answer that is not a known slip.
        rel: relative tolerance for a number (0: exact).
        also: other right forms of the same answer, as (value, "what it is in"): a size in GiB.
        slips: known wrong answers, as (value, "what went wrong").
    """

    what: str
    value: float | Shape
    stated: str
    why: str
    hint: str
    rel: float = 0.0
    also: tuple[tuple[float, str], ...] = ()
    slips: tuple[tuple[float | Shape, str], ...] = ()


@dataclass(frozen=True)
class Question:
    day: int
    number: int
    asks: str
    parts: tuple[Part, ...]


def _int(n: int | float) -> str:
    return f"{int(n):,}"


# --------------------------------------------------------------------------- the arithmetic

# Day 3: one Linear(D, D) has D² weights and D biases; self-attention has three of them.
_D3 = 512
_SELF_ATTENTION_512 = 3 * (_D3**2 + _D3)

# Day 4: multi-head attention has four Linear(D, D) (W_Q, W_K, W_V, W_O), whatever the heads.
_D4 = 768
_MHA_768 = 4 * (_D4**2 + _D4)
_MHA_128 = 4 * (128**2 + 128)       # 66,048, the count the question starts from

# Day 6: FeedForward(768, 3072) = Linear(768, 3072) + Linear(3072, 768), with biases.
_FFN_D, _FFN_FF = 768, 3072
_FFN_768 = (_FFN_D * _FFN_FF + _FFN_FF) + (_FFN_FF * _FFN_D + _FFN_D)

# Day 9: the cpu run: 25 epochs of 125 steps, warm-up total_steps // 20, peak lr 2e-3; stepping
# the scheduler once per epoch, epoch e (1-based) trains at lr * (e - 1) / warmup.
_D9_EPOCHS, _D9_STEPS_PER_EPOCH, _D9_LR = 25, 125, 2e-3
_D9_TOTAL = _D9_EPOCHS * _D9_STEPS_PER_EPOCH
_D9_WARMUP = _D9_TOTAL // 20
_D9_LAST_EPOCH_LR = _D9_LR * (_D9_EPOCHS - 1) / _D9_WARMUP

# Day 11: (H / P)² patches plus the CLS token.
_TOKENS_P4 = (28 // 4) ** 2 + 1
_TOKENS_P14 = (28 // 14) ** 2 + 1

# Day 12: a block of TinyGPT(65) (D = 256): MLP 8D² + 5D of 12D² + 9D.
_D12 = 256
_MLP_SHARE = (8 * _D12**2 + 5 * _D12) / (12 * _D12**2 + 9 * _D12)
_SCORES_GROWTH = (1024 / 128) ** 2

# Day 14: SwiGLU's fair width, and the KV cache 2 * L * B * H * S * d_k values of 2 bytes.
_D14 = 4096
_SWIGLU_FF = 8 * _D14 / 3
_CACHE_VALUES = 2 * 32 * 1 * 32 * 4096 * 128
_CACHE_BYTES = _CACHE_VALUES * 2


QUESTIONS: dict[tuple[int, int], Question] = {
    (q.day, q.number): q for q in [
        Question(2, 3, "the shapes of the weights and of the output", (
            Part("the weights' shape", (2, 10, 7), "(2, 10, 7)",
                 "one row per query (10), one column per key (7), for each of the 2 batches; "
                 "d_k = 64 is summed away by Q @ K^T",
                 "the weights compare every query with every key: (batch, seq_q, seq_k)",
                 slips=(((2, 7, 10), "rows are queries and columns keys, not the other way"),
                        ((2, 10, 64), "d_k is summed away by the dot product"))),
            Part("the output's shape", (2, 10, 32), "(2, 10, 32)",
                 "each of the 10 queries gets a blend of the 7 value vectors, each 32 wide",
                 "weights (2, 10, 7) @ V (2, 7, 32)",
                 slips=(((2, 10, 64), "the output has V's width d_v = 32, not d_k"),
                        ((2, 7, 32), "one output row per query, not per key"))),
        )),
        Question(3, 2, "the parameters of SelfAttention(512)", (
            Part("parameters", _SELF_ATTENTION_512, _int(_SELF_ATTENTION_512),
                 f"3 × (512² + 512) = 3 × {_int(_D3**2 + _D3)} = {_int(_SELF_ATTENTION_512)}: "
                 "three Linear(512, 512), each with 512 × 512 weights and 512 biases",
                 "count W_Q, W_K and W_V: each nn.Linear(d, d) has d² weights and d biases",
                 slips=((3 * _D3**2, "that is the weights only: each Linear also has 512 biases"),
                        (4 * (_D3**2 + _D3), "that is four Linears: Day 3's module has no W_O"),
                        (_D3**2 + _D3, "that is one Linear; there are three"))),
        )),
        Question(4, 1, "d_k and the shape of the weights", (
            Part("d_k", 768 // 12, str(768 // 12),
                 "d_k = d_model // num_heads = 768 // 12 = 64",
                 "each head gets an equal slice of the d_model features"),
            Part("the weights' shape", (4, 12, 50, 50), "(4, 12, 50, 50)",
                 "(B, H, T, T): one 50 × 50 map per head and per sentence",
                 "attn_weights is (batch, heads, queries, keys)",
                 slips=(((4, 50, 50), "there is one map per head: (B, H, T, T)"),
                        ((4, 50, 12, 50), "the heads come before the tokens after transpose"))),
        )),
        Question(4, 4, "the parameters of MultiHeadSelfAttention at d_model = 768", (
            Part("parameters", _MHA_768, _int(_MHA_768),
                 f"4 × (768² + 768) = 4 × {_int(_D4**2 + _D4)} = {_int(_MHA_768)}; the number of "
                 "heads does not enter",
                 "four Linear(d, d) with bias: W_Q, W_K, W_V and W_O",
                 slips=((_MHA_128 * 6, "the weights grow with d², not d: (768/128)² = 36"),
                        (_MHA_128 * 36, "close: the weights grow 36 times, but the biases only 6"),
                        (4 * _D4**2, "that is the weights only: add the 4 × 768 biases"))),
        )),
        Question(6, 2, "the parameters of the feed-forward block at (768, 3072)", (
            Part("parameters", _FFN_768, _int(_FFN_768),
                 f"(768·3072 + 3072) + (3072·768 + 768) = {_int(_FFN_768)}: two Linears, "
                 "8·768² weights and 3072 + 768 biases",
                 "linear1 is Linear(768, 3072), linear2 Linear(3072, 768), both with bias",
                 slips=((2 * _FFN_D * _FFN_FF, "that is the weights only: add 3,072 + 768 biases"),
                        (_FFN_D * _FFN_FF + _FFN_FF, "that is linear1 only: add linear2"))),
        )),
        Question(7, 3, "the initial loss with 10 classes", (
            Part("loss (nats)", math.log(10), f"{math.log(10):.3f}",
                 "a model that knows nothing gives each class 1/10: −ln(1/10) = ln 10 ≈ 2.303",
                 "the loss of a uniform guess over C classes is −ln(1/C)", rel=2e-3,
                 slips=((math.log10(10), "cross-entropy uses the natural logarithm"),
                        (math.log2(10), "cross-entropy in PyTorch is in nats (ln), not bits"),
                        (5 * math.log(2), "the loss grows with ln C, not in proportion to C"))),
        )),
        Question(8, 3, "the loss of an untrained 10-class classifier", (
            Part("loss (nats)", math.log(10), f"{math.log(10):.3f}",
                 "uniform probabilities 1/10 give −ln(1/10) = ln 10 ≈ 2.303",
                 "what loss does a uniform guess over 10 classes give?", rel=2e-3,
                 slips=((math.log10(10), "cross-entropy uses the natural logarithm"),
                        (math.log2(10), "cross-entropy in PyTorch is in nats (ln), not bits"))),
        )),
        Question(9, 3, "the learning rate of the 25th (last) epoch", (
            Part("learning rate", _D9_LAST_EPOCH_LR, f"{_D9_LAST_EPOCH_LR:.6f}".rstrip("0"),
                 f"warm-up lasts {_D9_TOTAL} // 20 = {_D9_WARMUP} scheduler steps, and you "
                 f"take one per epoch: epoch e trains at 2e-3 × (e − 1) / {_D9_WARMUP}, so the "
                 f"25th at 2e-3 × 24 / {_D9_WARMUP} ≈ {_D9_LAST_EPOCH_LR:.6f}, still in warm-up",
                 "how many scheduler steps have been taken before the 25th epoch starts, and "
                 "how long is the warm-up?", rel=1e-2,
                 slips=((0.0, "that is the first epoch's rate; give the 25th epoch's"),
                        (_D9_LR, "the peak is never reached: warm-up needs "
                                 f"{_D9_WARMUP} scheduler steps"),
                        (_D9_LR * _D9_EPOCHS / _D9_WARMUP,
                         "one step too many: epoch 1 runs before the first scheduler.step()"))),
        )),
        Question(11, 1, "the tokens at P = 4 and at P = 14", (
            Part("tokens at P = 4", _TOKENS_P4, str(_TOKENS_P4),
                 "(28 / 4)² = 49 patches + 1 CLS = 50",
                 "count the patches of the grid, then add the CLS token",
                 slips=((49, "add the CLS token"),)),
            Part("tokens at P = 14", _TOKENS_P14, str(_TOKENS_P14),
                 "(28 / 14)² = 4 patches + 1 CLS = 5",
                 "a 28 × 28 image holds a 2 × 2 grid of 14 × 14 patches",
                 slips=((4, "add the CLS token"),)),
        )),
        Question(12, 4, "the MLP's share of a block's parameters (TinyGPT(65), D = 256)", (
            Part("share", _MLP_SHARE, f"{_MLP_SHARE:.4f}",  # 2/3 or 0.67 count too
                 f"(8D² + 5D) / (12D² + 9D) = {_int(8 * _D12**2 + 5 * _D12)} / "
                 f"{_int(12 * _D12**2 + 9 * _D12)} ≈ {_MLP_SHARE:.3f}, about two thirds",
                 "the MLP holds 8D² + 5D of the block's 12D² + 9D", rel=1e-2,
                 slips=((_MLP_SHARE * 100, "give it as a fraction, not a percentage"),
                        (0.5, "attention has 4D², the MLP 8D²"))),
        )),
        Question(12, 6, "the growth of the attention memory from 128 to 1,024 tokens", (
            Part("factor", _SCORES_GROWTH, _int(_SCORES_GROWTH),
                 "the scores are N × N per head: (1024 / 128)² = 8² = 64",
                 "how does the size of an N × N matrix grow when N grows 8 times?",
                 slips=((8, "the scores grow with N², not N"),)),
        )),
        Question(13, 1, "the initial loss for a vocabulary of 50,257 tokens", (
            Part("loss (nats)", math.log(50_257), f"{math.log(50_257):.3f}",
                 "a uniform guess over 50,257 tokens: −ln(1/50,257) = ln 50,257 ≈ 10.825",
                 "what loss does a uniform guess over V tokens give?", rel=1e-3,
                 slips=((math.log10(50_257), "cross-entropy uses the natural logarithm"),
                        (math.log2(50_257), "cross-entropy in PyTorch is in nats (ln), not bits"),
                        (10, "10 is the loss the question asks about, not ln V"))),
        )),
        Question(14, 2, "SwiGLU's d_ff for D = 4096 before rounding", (
            Part("d_ff", _SWIGLU_FF, f"{_SWIGLU_FF:,.2f}",
                 "3·D·d_ff = 8D² gives d_ff = 8D/3 = 32,768 / 3 ≈ 10,922.67",
                 "set SwiGLU's 3·D·d_ff equal to the GELU MLP's 8D²", rel=1e-4,
                 also=((math.floor(_SWIGLU_FF), "rounded down"),
                       (math.ceil(_SWIGLU_FF), "rounded up")),
                 slips=((11_008, "that is LLaMA's width after rounding up to a multiple of 256"),
                        (4 * _D14, "that is the GELU MLP's 4D"))),
        )),
        Question(14, 5, "the size of the KV cache in bytes", (
            Part("bytes", _CACHE_BYTES, _int(_CACHE_BYTES),
                 f"2 · 32 · 1 · 32 · 4,096 · 128 = {_int(_CACHE_VALUES)} values (2³⁰) of 2 bytes "
                 f"= {_int(_CACHE_BYTES)} bytes = 2 GiB (≈ 2.15 GB)",
                 "multiply the six factors, then 2 bytes per 16-bit value", rel=1e-3,
                 also=((_CACHE_BYTES / 2**30, "GiB"), (_CACHE_BYTES / 1e9, "GB")),
                 slips=((_CACHE_VALUES, "that is the number of values: each takes 2 bytes"),
                        (_CACHE_VALUES / 2**30, "that is the values in Gi: each takes 2 bytes"),
                        (2 * _CACHE_BYTES, "16-bit floats take 2 bytes, not 4"),
                        (_CACHE_BYTES / 2, "the 2 in front counts keys and values; the bytes "
                                           "are another factor 2"))),
        )),
    ]
}


# --------------------------------------------------------------------------- comparing


def _as_number(answer) -> float | None:
    if isinstance(answer, bool):
        return None
    if isinstance(answer, str):
        answer = answer.strip().replace(",", "").replace("_", "").replace(" ", "")
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _as_shape(answer) -> Shape | None:
    if isinstance(answer, str):
        answer = [p for p in answer.strip("()[] ").replace(" ", "").split(",") if p]
    try:
        items = list(answer)
    except TypeError:
        return None
    try:
        return tuple(int(x) for x in items)
    except (TypeError, ValueError):
        return None


def _close(a: float, b: float, rel: float) -> bool:
    return a == b if rel == 0 else abs(a - b) <= rel * max(abs(b), 1e-12)


def _judge(part: Part, answer) -> tuple[bool, str]:
    if isinstance(part.value, tuple):
        shape = _as_shape(answer)
        if shape is None:
            return False, f"{part.what}: give a shape, for example (2, 3, 4)"
        if shape == part.value:
            return True, part.why
        for wrong, why in part.slips:
            if shape == wrong:
                return False, f"{part.what}: {why}"
        return False, f"{part.what}: {part.hint}"
    value = _as_number(answer)
    if value is None:
        return False, f"{part.what}: give a number (an int, a float or a string like '1,024')"
    if _close(value, float(part.value), part.rel):
        return True, part.why
    for other, unit in part.also:
        if _close(value, float(other), max(part.rel, 5e-3)):
            return True, f"{part.why} (your answer is in {unit})"
    for wrong, why in part.slips:
        if _close(value, float(wrong), max(part.rel, 1e-6)):
            return False, f"{part.what}: {why}"
    return False, f"{part.what}: {part.hint}"


def verdict(day: int, question: int, answer) -> tuple[bool, str]:
    """(right?, the message check() prints) for ``answer`` to self-test ``question`` of ``day``.

    Raises:
        ValueError: when that question has no numeric check.
    """
    q = QUESTIONS.get((day, question))
    if q is None:
        numeric = ", ".join(str(n) for d, n in sorted(QUESTIONS) if d == day)
        raise ValueError(
            f"Day {day}, question {question} has no numeric check (its answer is text: reveal "
            "it under the questions)" + (f"; Day {day}'s numeric questions: {numeric}"
                                         if numeric else f"; Day {day} has none"))
    if answer is Ellipsis:
        return False, ("❌ not quite: put your answer in place of the ... "
                       f"(Day {day}, question {question} asks for {q.asks})")
    if len(q.parts) == 1:
        answers = [answer]
    else:
        if isinstance(answer, str) or not hasattr(answer, "__len__") \
                or len(answer) != len(q.parts):
            wanted = ", ".join(p.what for p in q.parts)
            return False, (f"❌ not quite: this question asks for {len(q.parts)} things "
                           f"({wanted}): pass them together, as check({day}, {question}, "
                           f"({', '.join('...' for _ in q.parts)}))")
        answers = list(answer)
    results = [_judge(part, a) for part, a in zip(q.parts, answers, strict=True)]
    if all(ok for ok, _ in results):
        return True, "✅ right: " + "; ".join(why for _, why in results) + "."
    lines = [why if not ok else f"{part.what} is right" for (ok, why), part
             in zip(results, q.parts, strict=True)]
    return False, "❌ not quite: " + "; ".join(lines) + "."


def check_answer(day: int, question: int, answer) -> None:
    """Print whether ``answer`` to self-test ``question`` of ``day`` is right, and why.

    A question with several parts takes a tuple, in the order the question asks them. Never
    raises for a wrong answer; raises ValueError for a question without a numeric check.
    """
    print(verdict(day, question, answer)[1])
