"""Hidden tests of Day 13: tokenizer, batches, loss, schedule, training loop, sampling.

Sampling is tested statistically: a model whose next-token logits are fixed is sampled 20,000
times in one batched call, and the frequencies must lie within 0.02 of the intended
probabilities (five standard deviations of a binomial frequency at n = 20,000 is at most 0.018).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.checks import (
    CheckFailure,
    call,
    expect_tensor,
    leans_on,
    manual_seed,
    observed_check,
    rng,
    trusted_tinyshakespeare,
    upstream,
    value_check,
)
from autograder.checks.day13_train import lr_at as _lr
from course.checking import generator, in_kernel, note_value_checked, record, twin
from course.probes import FixedLogits, Recorder, predict
from course.standins import TinyGPT as ReferenceTinyGPT

DRAWS = 20_000
TOL = 0.02


# --------------------------------------------------------------------------- tokenizer


@value_check
def check_tokenizer_roundtrip(CharTokenizer) -> None:
    """Sorted vocabulary, round trip, ValueError naming an unknown character."""
    text = "zebra ZEBRA!\nzz\t~"
    tok = call(CharTokenizer, text, name="CharTokenizer(text)")
    chars = sorted(set(text))
    if getattr(tok, "vocab_size", None) != len(chars):
        raise CheckFailure(f"vocab_size should be {len(chars)} (distinct characters of the "
                           f"text), got {getattr(tok, 'vocab_size', None)!r}.")
    ids = call(tok.encode, "ZEBRA zebra\n", name="encode")
    want = [chars.index(c) for c in "ZEBRA zebra\n"]
    if list(ids) != want:
        if sorted(set(ids)) == sorted(set(want)) or len(ids) == len(want):
            raise CheckFailure(f"encode gave {list(ids)}, expected {want}: number the characters "
                               "in sorted order (sorted(set(text))) so the ids are the same on "
                               "every machine.")
        raise CheckFailure(f"encode('ZEBRA zebra\\n') gave {list(ids)}, expected {want}.")
    note_value_checked()
    for s in ("", "\t~~", text):
        back = call(tok.decode, call(tok.encode, s, name="encode"), name="decode")
        if back != s:
            raise CheckFailure(f"decode(encode({s!r})) returned {back!r}.")
    try:
        got = tok.encode("zebra?")
    except (ValueError, KeyError) as exc:
        if "?" not in str(exc):
            raise CheckFailure(f"encoding an unknown character '?' raised {type(exc).__name__} "
                               f"without naming it: {exc!r}. Name the character.") from None
        return
    except Exception as exc:  # noqa: BLE001
        raise CheckFailure(f"encoding an unknown character raised {type(exc).__name__}: {exc}; "
                           "raise a ValueError that names it.") from None
    raise CheckFailure(f"encode('zebra?') returned {got!r} although '?' is not in the "
                       "vocabulary: raise a ValueError naming the unknown character instead of "
                       "skipping or replacing it.")


# --------------------------------------------------------------------------- batches


@value_check
def check_get_batch_shift(get_batch) -> None:
    """data = arange(50): y == x + 1, consecutive windows, last window reachable, reproducible."""
    data = torch.arange(50)
    out = call(get_batch, data, 7, 5, generator=generator(30), name="get_batch(arange(50), 7, 5)")
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("get_batch should return a tuple (x, y).")
    x, y = out
    expect_tensor(x, "x", shape=(7, 5), dtype=torch.long)
    expect_tensor(y, "y", shape=(7, 5), dtype=torch.long)
    if torch.equal(x, y):
        raise CheckFailure("y is x itself: y must be x shifted by one, the next token "
                           "(data[i + 1 : i + block_size + 1]); without the shift the model "
                           "learns to copy its input.")
    steps = x[:, 1:] - x[:, :-1]
    if not bool((steps == 1).all()):
        raise CheckFailure(f"the rows of x are not windows of consecutive tokens: x[0] = "
                           f"{x[0].tolist()} from data = arange(50).")
    if torch.equal(y, x - 1):
        raise CheckFailure("y is x shifted the wrong way (the previous token): y must be x "
                           "shifted by one towards the future, data[i + 1 : i + block_size + 1].")
    if not torch.equal(y, x + 1):
        raise CheckFailure(f"y must be x shifted by one: with data = arange(50) y = x + 1. Got "
                           f"x[0] = {x[0].tolist()}, y[0] = {y[0].tolist()}.")
    # data of length block_size + 1: exactly one window exists.
    short = torch.arange(6)
    only = ("with len(data) = block_size + 1 exactly one window exists, the last window, "
            "starting at 0: draw starts with torch.randint(len(data) - block_size, ...) "
            "(randint's high is exclusive, so this reaches the last window and no further)")
    try:
        x1, y1 = call(get_batch, short, 3, 5, generator=generator(31),
                      name="get_batch(data of length block_size + 1, ...)")
    except CheckFailure as exc:
        raise CheckFailure(f"{exc}\n{only[0].upper()}{only[1:]}.") from None
    if not (torch.equal(x1, short[:5].expand(3, 5)) and torch.equal(y1, short[1:].expand(3, 5))):
        raise CheckFailure(f"{only[0].upper()}{only[1:]}.")
    starts = set()
    for seed in range(4):
        xs, _ = call(get_batch, data, 160, 5, generator=generator(100 + seed), name="get_batch")
        starts.update(xs[:, 0].tolist())
    if max(starts) != 44 or min(starts) != 0:
        raise CheckFailure(f"starting points ranged over {min(starts)}..{max(starts)}; with 50 "
                           "tokens and block_size 5 they should cover 0..44 "
                           "(torch.randint(len(data) - block_size, ...)).")
    a, _ = call(get_batch, data, 8, 5, generator=generator(32), name="get_batch")
    b, _ = call(get_batch, data, 8, 5, generator=generator(32), name="get_batch")
    if not torch.equal(a, b):
        raise CheckFailure("two calls with generators of the same seed gave different batches: "
                           "pass generator=generator to torch.randint.")
    note_value_checked()   # the windows against the judge's data


def _get_batch_first(get_batch):
    """``upstream`` for a check of training that uses the learner's ``get_batch``."""
    def right() -> bool:
        data = torch.arange(50)
        x, y = get_batch(data, 4, 5, generator=generator(33))
        return bool(torch.equal(torch.as_tensor(y), torch.as_tensor(x) + 1))
    parts = [] if get_batch is None else [
        ("your get_batch fails day13_get_batch_shift (the targets must be the inputs shifted "
         "by one)", right)]
    return upstream(*parts)


# --------------------------------------------------------------------------- loss


@value_check
def check_estimate_loss_values(estimate_loss, get_batch) -> None:
    """Known logits -> exact cross-entropy; fresh model ~ ln(V); eval mode; no gradients."""
    g = rng(33)
    vocab = 9
    table = torch.randn(vocab, vocab, generator=g)
    local = FixedLogits(vocab).train()
    with torch.no_grad():
        local.table.copy_(table)
    model = twin(local)
    data = torch.randint(0, vocab, (300,), generator=g)
    loss = call(estimate_loss, model, data, 6, 10, eval_iters=3, generator=generator(34),
                name="estimate_loss(model, data, 6, 10, eval_iters=3)")
    if not isinstance(loss, float):
        raise CheckFailure("estimate_loss should return a Python float, got "
                           f"{type(loss).__name__}.")
    # The same batches, drawn with the learner's get_batch and the same seed.
    gen = generator(34)
    losses, shifted_wrong = [], []
    for _ in range(3):
        x, y = get_batch(data, 6, 10, gen)
        losses.append(float(F.cross_entropy(table[x].reshape(-1, vocab), y.reshape(-1))))
        shifted_wrong.append(float(F.cross_entropy(table[x].reshape(-1, vocab), x.reshape(-1))))
    expected = sum(losses) / 3
    if abs(loss - expected) > 1e-5:
        hint = ""
        if abs(loss - sum(shifted_wrong) / 3) < 1e-5:
            hint = " You scored the logits against x, not against the targets y."
        elif abs(loss - losses[-1]) < 1e-5:
            hint = " You returned the last batch's loss: average over the eval_iters batches."
        raise CheckFailure(f"estimate_loss returned {loss:.6f}, expected {expected:.6f} (mean "
                           f"cross-entropy of 3 batches drawn with get_batch and the given "
                           f"generator).{hint}")
    note_value_checked()
    modes = record(model, "modes")
    if not modes or any(modes):
        raise CheckFailure("the model ran in training mode: call model.eval() before measuring "
                           "(dropout and similar layers behave differently).")
    if not model.training:
        raise CheckFailure("estimate_loss left the model in eval mode: restore the previous mode "
                           "(model.train(was_training)).")
    if model.table.grad is not None:
        raise CheckFailure("estimate_loss built a graph and filled .grad: wrap it in "
                           "torch.no_grad() and never call backward there.")
    # The other starting state: a model already in eval mode must stay there.
    model.eval()
    call(estimate_loss, model, data, 6, 10, eval_iters=1, generator=generator(34),
         name="estimate_loss(model in eval mode, data, 6, 10, eval_iters=1)")
    if model.training:
        raise CheckFailure("estimate_loss put a model that was in eval mode into training "
                           "mode: restore the mode it had (was_training = model.training "
                           "first, then model.train(was_training)), not model.train().")
    manual_seed(35)
    fresh = ReferenceTinyGPT(65, d_model=32, num_heads=2, num_layers=1, n_ctx=16)
    with torch.no_grad():
        fresh.head.weight.normal_(0.0, 0.02, generator=g)    # GPT-2's small output init
    fresh = twin(fresh, 65, d_model=32, num_heads=2, num_layers=1, n_ctx=16)
    text = torch.randint(0, 65, (2_000,), generator=g)
    loss0 = call(estimate_loss, fresh, text, 8, 16, eval_iters=2, generator=generator(36),
                 name="estimate_loss(fresh TinyGPT)")
    if abs(loss0 - math.log(65)) > 0.3:
        raise CheckFailure(f"a fresh model should score about ln(65) = 4.17, got {loss0:.3f}.")


# --------------------------------------------------------------------------- schedule


@value_check
def check_get_lr_schedule(get_lr) -> None:
    """Warmup, peak, cosine and floor for max_lr=3e-3, warmup 7, total 50, min_lr 3e-4."""
    args = (3e-3, 7, 50, 3e-4)
    steps = (0, 1, 3, 6, 7, 8, 20, 28, 40, 49, 50, 51, 80)
    got = [call(get_lr, s, *args, name=f"get_lr({s}, 3e-3, 7, 50, 3e-4)") for s in steps]
    want = [_lr(s, *args) for s in steps]
    bad = [(s, g, w) for s, g, w in zip(steps, got, want, strict=True)
           if not isinstance(g, int | float) or abs(g - w) > 1e-9]
    if not bad:
        note_value_checked()
        return
    s, g, w = bad[0]
    if all(abs(call(get_lr, t, *args) - args[0]) < 1e-12 for t in (0, 1, 3)):
        hint = "there is no warmup: at step s < warmup_steps use max_lr * (s + 1) / warmup_steps"
    elif s < 7:
        hint = "during warmup lr = max_lr * (step + 1) / warmup_steps (it reaches max_lr at " \
               "step warmup_steps - 1)"
    elif s > 50:
        hint = "after total_steps the rate stays at min_lr"
    else:
        hint = "after warmup: min_lr + 0.5 (max_lr - min_lr)(1 + cos(pi (step - warmup) / " \
               "(total - warmup)))"
    raise CheckFailure(f"get_lr({s}, max_lr=3e-3, warmup_steps=7, total_steps=50, min_lr=3e-4) "
                       f"returned {g!r}, expected {w:.6g}: {hint}."
                       + _lr_phases(dict(zip(steps, got, strict=True)), args))


LR_PHASES = (("step 0", 0, "the warm-up"), ("the end of warm-up (step 6)", 6, "the warm-up"),
             ("the peak (step 7)", 7, "the first step after warm-up"),
             ("the middle of the decay (step 28)", 28, "the cosine decay"),
             ("the last step (step 50)", 50, "the end of the decay"),
             ("after the end (step 80)", 80, "the floor after total_steps"))


def _lr_phases(got: dict, args: tuple) -> str:
    """A "Step:" line: at which landmarks of the schedule the learner's rate is right."""
    right, wrong = [], []
    for label, step, phase in LR_PHASES:
        g = got[step]
        ok = isinstance(g, int | float) and abs(g - _lr(step, *args)) <= 1e-9
        (right if ok else wrong).append((label, phase))
    if not right or not wrong:
        return ""
    return (f"\nStep: the rate is right at {', '.join(r for r, _ in right)}; it is wrong at "
            f"{', '.join(w for w, _ in wrong)}: look first at {wrong[0][1]}.")


# --------------------------------------------------------------------------- training


@value_check
def check_training_result(history, model, get_batch=None, tok=None) -> None:
    """The notebook's trained model, scored here: validation loss below 3.2 (ln 65 = 4.17).

    The loss is measured by the judge on windows of its own copy of Tiny Shakespeare's
    validation split (the last 10%, characters numbered in sorted order), 64 characters long
    (the judge's choice, not the model's ``n_ctx``; every profile's TinyGPT takes 64) at
    places drawn per submission; only the model's logits come from the kernel. The model must
    be causal: the same windows with the characters from a position drawn per submission on
    replaced must leave the logits before it unchanged (a model that reads the next character
    scores nothing). The notebook's history is read for the message only. With ``get_batch``,
    a failure caused by a wrong ``get_batch`` says so first.

    With ``tok`` (the notebook's tokenizer), the windows are numbered the way the model was
    trained: when ``tok.encode`` of Tiny Shakespeare's 65 characters in sorted order is a
    permutation of 0..64, that permutation numbers the characters (a tokenizer whose only fault
    is the order of its ids loses its points in its own test, not here too). A relabelling of
    the characters cannot lower the loss a model without knowledge of the text can reach, so
    this takes nothing on the kernel's word that a forger could use; anything else numbers
    them in sorted order.
    """
    with _get_batch_first(get_batch):
        _training_result(history, model, tok)


def _learner_numbering(tok, chars: list[str]) -> dict[str, int]:
    """{character: id} of the learner's tokenizer when it is a bijection onto 0..len-1 of
    ``chars``; else the sorted numbering."""
    sorted_ids = {c: i for i, c in enumerate(chars)}
    if tok is None:
        return sorted_ids
    try:
        ids = call(tok.encode, "".join(chars), name="tok.encode(the 65 characters)")
        ids = [int(i) for i in ids]
    except Exception:  # noqa: BLE001 - a tokenizer that fails here is judged in its own test
        return sorted_ids
    if sorted(ids) != list(range(len(chars))):
        return sorted_ids
    return dict(zip(chars, ids, strict=True))


def _training_result(history, model, tok=None) -> None:
    if not isinstance(history, dict) or "val_loss" not in history or not history["val_loss"]:
        raise CheckFailure("the training cell produced no history['val_loss'].")
    vals = [float(v) for v in history["val_loss"]]
    if not all(math.isfinite(v) for v in vals):
        raise CheckFailure(f"the validation losses contain NaN or inf: {vals}.")
    text = trusted_tinyshakespeare()
    chars = sorted(set(text))
    val = text[int(0.9 * len(text)):]
    vocab, block = len(chars), 64
    if not isinstance(model, torch.nn.Module):
        raise CheckFailure(f"`model` should be the trained TinyGPT, got {type(model)}.")
    g = rng(39)
    starts = torch.randint(0, len(val) - block - 1, (16,), generator=g)
    number = _learner_numbering(tok, chars)
    ids = torch.tensor([[number[c] for c in val[s:s + block + 1]] for s in starts.tolist()])
    cut = int(torch.randint(8, block - 8, (1,), generator=g))
    changed = ids[:, :-1].clone()                                       # (16, block)
    changed[:, cut:] = torch.randint(0, vocab, (16, block - cut), generator=g)
    was_training = bool(model.training)
    model.eval()
    logits = call(in_kernel, predict, model, ids[:, :-1],
                  name="model(validation windows of 64 characters)")
    other = call(in_kernel, predict, model, changed,
                 name="model(the same windows, later characters replaced)")
    model.train(was_training)
    expect_tensor(logits, "logits of the validation windows", shape=(16, block, vocab))
    expect_tensor(other, "logits of the changed windows", shape=(16, block, vocab))
    leak = float((logits[:, :cut] - other[:, :cut]).abs().max())
    if leak > 1e-3 * (1 + float(logits[:, :cut].abs().max())):
        raise CheckFailure(f"the trained model is not causal: replacing the characters from "
                           f"position {cut} on changed its logits at earlier positions (by up "
                           f"to {leak:.3g}). A language model may only read the past: check the "
                           "causal mask in every block.")
    loss = float(F.cross_entropy(logits.reshape(-1, vocab).double(), ids[:, 1:].reshape(-1)))
    limit = 3.2
    if not loss <= limit:
        raise CheckFailure(f"the trained model's validation loss, measured on 16 windows of "
                           f"the validation text, is {loss:.3f} (the notebook's history says "
                           f"{vals[-1]:.3f}): not well below ln({vocab}) = "
                           f"{math.log(vocab):.2f} (limit {limit}).")
    note_value_checked()


# --------------------------------------------------------------------------- sampling


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
    return torch.bincount(out[:, 1], minlength=logits.numel()).double() / DRAWS


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
            raise CheckFailure(f"at step {step} the model saw {seen.tolist()}, expected the last "
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
    except Exception as exc:  # noqa: BLE001
        raise CheckFailure(f"temperature=0 raised {type(exc).__name__}: {exc}; check it first "
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
