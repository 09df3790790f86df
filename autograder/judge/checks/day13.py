"""Hidden tests of Day 13: tokenizer, batches, loss, schedule, the trained model.

Sampling's tests are in :mod:`~autograder.judge.checks.day13_sampling`, the training loop's in
:mod:`~autograder.judge.checks.day13_train`, byte-pair encoding's in
:mod:`~autograder.judge.checks.day13_bpe`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.judge.checks import (
    CheckFailure,
    call,
    expect_tensor,
    manual_seed,
    rng,
    shown,
    trusted_tinyshakespeare,
    upstream,
    value_check,
)
from autograder.judge.checks.day13_train import lr_at as _lr
from course.checking import generator, note_value_checked, record, trusted, twin
from course.probes import FixedLogits
from course.standins import TinyGPT as ReferenceTinyGPT

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
            raise CheckFailure(f"decode(encode({s!r})) returned {shown(back)}.")
    # Ids no encode call produced (drawn per submission): a decode that looks up what encode
    # saw has nothing to return (found by the attack round of issue 47).
    picks = torch.randint(len(chars), (24,), generator=rng(34)).tolist()
    want_text = "".join(chars[i] for i in picks)
    back = call(tok.decode, picks, name="decode")
    if back != want_text:
        raise CheckFailure(f"decode({picks}) returned {shown(back)}, expected {want_text!r}: "
                           "decode maps each id to its character (the sorted vocabulary), "
                           "whatever was encoded before.")
    try:
        got = tok.encode("zebra?")
    except (ValueError, KeyError) as exc:
        if "?" not in str(exc):
            raise CheckFailure(f"encoding an unknown character '?' raised {type(exc).__name__} "
                               f"without naming it: {exc!r}. Name the character.") from None
        return
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
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
    places drawn per submission, by the judge's own TinyGPT (the course's stand-in, the class
    the graded notebook trains) loaded with the model's weights: only the weights come from the
    kernel, never its logits. The judge's model is causal by construction, and it keeps no
    state between calls, so a model that reads the next character, or replays what it answered
    before, scores nothing (a check that compared two calls of the kernel's model paid one
    that did both). The notebook's history is read for the message only. With ``get_batch``,
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


# The stand-in TinyGPT's weights (nn.TransformerEncoderLayer blocks, 4 x d_model wide MLP):
# checked against the kernel's before the judge builds its copy, so that what it allocates is
# what the kernel sent, never a size the kernel only named (a test holds it to the class).
_BLOCK_SHAPES = {"self_attn.in_proj_weight": (3, 1), "self_attn.in_proj_bias": (3,),
                 "self_attn.out_proj.weight": (1, 1), "self_attn.out_proj.bias": (1,),
                 "linear1.weight": (4, 1), "linear1.bias": (4,), "linear2.weight": (1, 4),
                 "linear2.bias": (1,), "norm1.weight": (1,), "norm1.bias": (1,),
                 "norm2.weight": (1,), "norm2.bias": (1,)}


def tinygpt_shapes(vocab: int, d: int, layers: int, n_ctx: int) -> dict[str, tuple]:
    """{state_dict name: shape} of ``ReferenceTinyGPT(vocab, d, _, layers, n_ctx)``."""
    shapes = {"tok.weight": (vocab, d), "pos.weight": (n_ctx, d)}
    for i in range(layers):
        shapes.update({f"blocks.{i}.{k}": tuple(m * d for m in v)
                       for k, v in _BLOCK_SHAPES.items()})
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,), "head.weight": (vocab, d)})
    return shapes


def _judges_copy(model, vocab: int, block: int) -> torch.nn.Module:
    """The judge's own TinyGPT holding the kernel's trained weights, in eval mode.

    Only the weights cross: the logits the kernel's object would give are never asked for, so
    nothing it remembers from an earlier call, and nothing its forward does, reaches the score.
    The size comes from the weights' shapes, the number of heads from the kernel (a relabelling
    of how the judge reads weights the model was trained with, which lowers nothing); both are
    bounded before anything is built, and the judge's copy has ``block`` positions only (the
    first rows of the learner's table), so a huge ``n_ctx`` costs no (n_ctx, n_ctx) mask here.
    """
    fit = ("`model` should be the TinyGPT the notebook trains (load_tinygpt()'s class: while "
           "the notebook is graded, the course's stand-in), with its trained weights: ")
    state = dict(model.state_dict().items())
    if not state or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                            for k, v in state.items()):
        raise CheckFailure(f"{fit}its state_dict() holds no tensors the judge can score "
                           f"({len(state)} entries).")
    tok_w, pos_w = state.get("tok.weight"), state.get("pos.weight")
    if tok_w is None or pos_w is None or tok_w.dim() != 2 or pos_w.dim() != 2:
        raise CheckFailure(f"{fit}it has no tok.weight and pos.weight embedding tables (its "
                           f"weights: {', '.join(list(state)[:8])}).")
    d_model, n_ctx = int(tok_w.shape[1]), int(pos_w.shape[0])
    layers = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    try:
        heads = int(model.blocks[0].self_attn.num_heads)
    except Exception:  # noqa: BLE001 - a wrong answer is judged by the shapes below
        heads = 0
    if not (tok_w.shape[0] == vocab and n_ctx >= block and 1 <= layers <= 48
            and 1 <= d_model <= 4096 and 1 <= heads <= d_model and d_model % heads == 0):
        raise CheckFailure(f"{fit}its tables are tok {tuple(tok_w.shape)} and pos "
                           f"{tuple(pos_w.shape)}, with {layers} blocks of {heads} heads; the "
                           f"judge needs {vocab} tokens and at least {block} positions.")
    config = dict(d_model=d_model, num_heads=heads, num_layers=layers, n_ctx=block)
    want = tinygpt_shapes(vocab, d_model, layers, block)
    got = {k: tuple(v.shape) for k, v in state.items()}
    got["pos.weight"] = (block, d_model)
    if got != want:
        odd = sorted(set(got) ^ set(want)) or [k for k in want if got[k] != want[k]]
        raise CheckFailure(f"{fit}its weights do not fit TinyGPT(vocab_size={vocab}, "
                           f"d_model={d_model}, num_heads={heads}, num_layers={layers}) "
                           f"(first difference: {odd[0]}).")
    judges = ReferenceTinyGPT(vocab, **config)
    weights = {k: trusted(v.detach()).to(torch.float32) for k, v in state.items()}
    weights["pos.weight"] = weights["pos.weight"][:block]
    with torch.no_grad():
        judges.load_state_dict(weights)
    return judges.eval()


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
    # The trained weights, scored by the judge's own model (causal by construction: its mask is
    # not a weight): a model that reads the next character, or answers a call from what it
    # remembers of an earlier one, has nothing to show here but its weights.
    judges = _judges_copy(model, vocab, block)
    with torch.no_grad():
        logits = judges(ids[:, :-1])                                   # (16, block, vocab)
    loss = float(F.cross_entropy(logits.reshape(-1, vocab).double(), ids[:, 1:].reshape(-1)))
    limit = 3.2
    if not loss <= limit:
        raise CheckFailure(f"the trained model's validation loss, measured on 16 windows of "
                           f"the validation text, is {loss:.3f} (the notebook's history says "
                           f"{vals[-1]:.3f}): not well below ln({vocab}) = "
                           f"{math.log(vocab):.2f} (limit {limit}).")
    note_value_checked()
