"""Hidden tests of Day 13's extension: byte-pair encoding (``merge``, ``train_bpe``,
``BPETokenizer.encode``).

The reference below is the judge's own: it learns merges the way the exercise states them
(chunks from ``PRETOKENIZE``, pair counts weighted by how often each chunk occurs, the most
frequent pair merged, a tie going to the smallest pair of ids, non-overlapping replacement from
the left) and encodes by merging, in each chunk, the learned pair of lowest rank first. Texts
are drawn per submission: a passage of Tiny Shakespeare read from the course's verified copy
at a drawn offset, and a drawn text over a few letters in which runs ("aaa") and ties are
common. ``encode`` is judged with the judge's chars and merges, so a wrong ``train_bpe`` costs
its own points only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

import torch

from autograder.judge.checks import (
    CheckFailure,
    call,
    rng,
    shown,
    trusted_tinyshakespeare,
    upstream,
    value_check,
)
from course.checking import note_value_checked

# The exercise's chunking (the notebook's PRETOKENIZE): a word with the space before it, a run
# of other symbols with the space before it, or one whitespace character. Every character of a
# text belongs to exactly one chunk, so the chunks joined give the text back.
PRETOKENIZE = re.compile(r" ?[A-Za-z]+| ?[^A-Za-z\s]+|\s")

Pair = tuple[int, int]


def merge(ids: list[int], pair: Pair, new_id: int, overlapping: bool = False) -> list[int]:
    """``ids`` with every occurrence of ``pair`` replaced by ``new_id``, from the left, never
    overlapping ([a, a, a] with (a, a) gives [new, a]). ``overlapping`` is the classic mistake
    of moving on by one id after a replacement: the pair's second id stays ([a, b] gives
    [new, b]) and a run of three gives [new, new, a]."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 1 if overlapping else 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train(text: str, num_merges: int, *, chars: list[str] | None = None,
          tie: Callable = min, weighted: bool = True, chunked: bool = True,
          overlapping: bool = False, first_id: int | None = None) -> list[Pair]:
    """The merges the exercise learns from ``text`` (ids of ``chars``, default its sorted
    characters; merge i makes id len(chars) + i). The keywords reproduce classic mistakes:
    ``tie=max`` the largest pair on a tie, ``weighted=False`` every distinct chunk counted
    once, ``chunked=False`` the whole text as one sequence, ``overlapping`` an overlapping
    replacement, ``first_id`` new ids numbered from elsewhere."""
    chars = sorted(set(text)) if chars is None else chars
    stoi = {ch: i for i, ch in enumerate(chars)}
    chunks = Counter(PRETOKENIZE.findall(text)) if chunked else Counter([text])
    words = [[stoi[ch] for ch in chunk] for chunk in chunks]
    counts = [c if weighted else 1 for c in chunks.values()]
    start = len(chars) if first_id is None else first_id
    merges: list[Pair] = []
    for n in range(num_merges):
        pairs: Counter = Counter()
        for ids, count in zip(words, counts, strict=True):
            for pair in zip(ids, ids[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        top = max(pairs.values())
        best = tie(p for p, c in pairs.items() if c == top)
        words = [merge(ids, best, start + n, overlapping) for ids in words]
        merges.append(best)
    return merges


def encode(s: str, chars: list[str], merges: list[Pair], *, chunked: bool = True,
           order: str = "rank") -> list[int]:
    """The ids of ``s``: each chunk's character ids, then the learned pair of lowest rank
    merged first until no learned pair is left. ``chunked=False`` and ``order="left"`` (the
    leftmost learned pair first, whatever its rank) are classic mistakes."""
    stoi = {ch: i for i, ch in enumerate(chars)}
    ranks = {tuple(p): n for n, p in enumerate(merges)}
    out: list[int] = []
    for chunk in (PRETOKENIZE.findall(s) if chunked else [s] if s else []):
        ids = [stoi[ch] for ch in chunk]
        while len(ids) >= 2:
            present = [p for p in zip(ids, ids[1:], strict=False) if p in ranks]
            if not present:
                break
            pair = present[0] if order == "left" else min(present, key=ranks.__getitem__)
            ids = merge(ids, pair, len(chars) + ranks[pair])
        out.extend(ids)
    return out


# --------------------------------------------------------------------------- answers


def _ids(value, label: str) -> list[int]:
    """The learner's answer as a list of ints, or a CheckFailure saying what it was."""
    if not isinstance(value, list | tuple):
        raise CheckFailure(f"{label} should be a list of ints, got {type(value).__name__}.")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        kinds = sorted({type(i).__name__ for i in value})
        raise CheckFailure(f"{label} should hold Python ints, got {', '.join(kinds)} (use "
                           "int(...) or .tolist()).")
    return list(value)


def _pairs(value, label: str) -> list[Pair]:
    if not isinstance(value, list | tuple):
        raise CheckFailure(f"{label} should be a list of (int, int) pairs, got "
                           f"{type(value).__name__}.")
    out = []
    for n, p in enumerate(value):
        pair = _ids(p, f"{label}[{n}]")
        if len(pair) != 2:
            raise CheckFailure(f"{label}[{n}] should be a pair (id, id), got {shown(p)}.")
        out.append((pair[0], pair[1]))
    return out


def _vocab(chars: list[str], merges: list[Pair]) -> list[str]:
    """id -> the text it stands for, for messages (an id out of range reads '?')."""
    vocab = list(chars)
    for a, b in merges:
        vocab.append((vocab[a] if 0 <= a < len(vocab) else "?")
                     + (vocab[b] if 0 <= b < len(vocab) else "?"))
    return vocab


def _agree(first: int, what: str) -> str:
    """'the first 3 merges match', 'the first merge matches', 'they differ from the start'."""
    if first == 0:
        return "they differ from the start"
    return f"the first {what} matches" if first == 1 else f"the first {first} {what}s match"


def _drawn_letters(seed: int, n: int = 600) -> str:
    """A drawn text over 'a', 'b', 'c', space and newline, letters more likely: runs such as
    'aaa' and pairs of equal counts are common."""
    g = rng(seed)
    alphabet = "abc \n"
    weights = torch.tensor([4.0, 3.0, 2.0, 1.5, 0.3])
    picks = torch.multinomial(weights, n, replacement=True, generator=g)
    return "".join(alphabet[int(i)] for i in picks)


def _shakespeare(seed: int, n: int) -> str:
    text = trusted_tinyshakespeare()
    start = int(torch.randint(len(text) - n, (1,), generator=rng(seed)))
    return text[start:start + n]


# --------------------------------------------------------------------------- merge


@value_check
def check_merge_values(merge_fn) -> None:
    """Drawn id lists with runs of the pair's first id, the pair at the start and at the end,
    a pair of two equal ids (non-overlapping: [a, a, a] -> [new, a]), no occurrence, an
    empty and a one-id list."""
    g = rng(40)
    cases: list[tuple[list[int], Pair, int]] = [
        ([7, 7, 7], (7, 7), 99), ([], (1, 2), 9), ([1], (1, 2), 9), ([1, 2], (1, 2), 9),
        ([3, 4, 5], (5, 3), 9)]
    for k in range(6):
        n = int(torch.randint(8, 16, (1,), generator=g))
        ids = torch.randint(0, 3, (n,), generator=g).tolist()
        pair = (int(torch.randint(0, 3, (1,), generator=g)), int(torch.randint(0, 3, (1,),
                                                                                generator=g)))
        if k % 2 == 0:                       # a pair of equal ids: runs make overlaps
            pair = (pair[0], pair[0])
        cases.append((ids, pair, 10 + k))
    for ids, pair, new_id in cases:
        label = f"merge({ids}, {pair}, {new_id})"
        got = _ids(call(merge_fn, list(ids), pair, new_id, name=label), label)
        want = merge(ids, pair, new_id)
        if got == want:
            note_value_checked()
            continue
        if got == merge(ids, pair, new_id, overlapping=True):
            raise CheckFailure(f"{label} gave {shown(got)}, expected {want}: after replacing a "
                               "pair, "
                               "move past both of its ids (i += 2). Yours moved on by one, so "
                               "the pair's second id stays, and in a run such as [a, a, a] "
                               "occurrences overlap; each id may be used once.")
        if len(got) == len(ids):
            raise CheckFailure(f"{label} gave {shown(got)}, expected {want}: replace each "
                               "occurrence "
                               "of the pair (two ids) by the one new id.")
        raise CheckFailure(f"{label} gave {shown(got)}, expected {want}: scan from the left; "
                           "where "
                           "ids[i], ids[i + 1] is the pair, append new_id and skip both.")


def _merge_first(merge_fn):
    """``upstream`` for a check whose learner code calls the learner's ``merge``."""
    def right() -> bool:
        cases = (([7, 7, 7, 2], (7, 7), 9), ([1, 2], (1, 2), 5), ([3, 1, 2, 1], (1, 2), 6))
        return all(list(merge_fn(list(ids), pair, new)) == merge(ids, pair, new)
                   for ids, pair, new in cases)
    parts = [] if merge_fn is None else [
        ("your merge fails day13_bpe_merge_values (replace each pair from the left, never "
         "overlapping)", right)]
    return upstream(*parts)


# --------------------------------------------------------------------------- train_bpe


def _train_case(train_bpe, text: str, num_merges: int, label: str,
                chars: list[str] | None = None) -> None:
    given = chars is not None
    chars = sorted(set(text)) if chars is None else chars
    want = train(text, num_merges, chars=chars)
    call_label = f"train_bpe({label}, {num_merges}" + (", chars=...)" if given else ")")
    extra = {"chars": list(chars)} if given else {}
    got = _pairs(call(train_bpe, text, num_merges, name=call_label, **extra), call_label)
    if got == want:
        note_value_checked()
        return
    vocab = _vocab(chars, want)
    mistakes = {
        "on a tie between pairs of equal count, take the smallest pair of ids "
        "(min over (-count, pair)); yours took the largest": dict(tie=max),
        "each chunk's pairs count as many times as the chunk occurs in the text; yours added "
        "1 per distinct chunk instead of the chunk's count": dict(weighted=False),
        "count pairs inside chunks only (PRETOKENIZE.findall(text)); yours counted pairs "
        "across chunks, so tokens can span a space or a newline": dict(chunked=False),
        "your merge keeps the pair's second id (or overlaps occurrences): after a "
        "replacement move past both ids, so 'aaa' becomes [new, 'a']": dict(overlapping=True),
        f"merge i makes the new id len(chars) + i = {len(chars)} + i": dict(first_id=len(chars)
                                                                              + 1),
    }
    if given:
        mistakes["number the characters as `chars` gives them (id i for chars[i], in its "
                 "order) when it is passed; yours used sorted(set(text))"] = dict(chars=None)
        mistakes["number the characters as `chars` gives them (id i for chars[i], in its "
                 "order); yours sorted them"] = dict(chars=sorted(chars))
    found = next((why for why, kw in mistakes.items()
                  if train(text, num_merges, **{"chars": chars, **kw}) == got), "")
    if len(got) != len(want) and got == want[:len(got)]:
        found = found or (f"it stopped after {len(got)} merges: learn num_merges = {num_merges} "
                          "(fewer only when no pair is left)")
    first = next((n for n, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                 min(len(got), len(want)))
    detail = (f"merge {first} should be {want[first]} = {vocab[len(chars) + first]!r}"
              if first < len(want) else f"there should be {len(want)} merges")
    if first < len(got):
        detail += f", yours is {got[first]}"
    raise CheckFailure(f"{call_label}: {_agree(first, 'merge')}; {detail}."
                       + (f" The likely mistake: {found}." if found else ""))


@value_check
def check_train_bpe_merges(train_bpe, merge_fn=None) -> None:
    """A drawn passage of Tiny Shakespeare (a drawn number of merges), a drawn text over a few
    letters with runs and ties, 'aaaa aa' whose pairs run out after 3 merges, and a base
    vocabulary larger than the text's characters. ``merge_fn`` (the learner's ``merge``) is
    named first when it fails too."""
    with _merge_first(merge_fn):
        _train_cases(train_bpe)


def _train_cases(train_bpe) -> None:
    g = rng(41)
    _train_case(train_bpe, _shakespeare(42, 2500), int(torch.randint(20, 31, (1,), generator=g)),
                "a passage of Tiny Shakespeare")
    _train_case(train_bpe, _drawn_letters(43), int(torch.randint(10, 16, (1,), generator=g)),
                "a text over 'abc', space and newline")
    _train_case(train_bpe, "aaaa aa", 5, "'aaaa aa'")
    # a base vocabulary larger than the text's characters, not in sorted order: id i is chars[i]
    letters = _drawn_letters(46, 300)
    _train_case(train_bpe, letters, 8, "a text over 'abc', space and newline",
                chars=sorted(set(letters) | set("ABCXYZ!?"), reverse=True))


# --------------------------------------------------------------------------- encode


def _encode_case(BPETokenizer, chars: list[str], merges: list[Pair], s: str,
                 label: str) -> None:
    tok = call(BPETokenizer, list(chars), [tuple(p) for p in merges],
               name=f"BPETokenizer(chars, merges) ({label})")
    name = f"encode({s!r})" if len(s) <= 30 else f"encode({label}, {len(s)} characters)"
    got = _ids(call(tok.encode, s, name=name), name)
    want = encode(s, chars, merges)
    if got == want:
        note_value_checked()
        return
    vocab = _vocab(chars, merges)
    mistakes = {
        "merge inside each chunk of PRETOKENIZE.findall(s), never across two: yours merged "
        "across chunks": dict(chunked=False),
        "in each chunk merge the learned pair of lowest rank (learned first) first, not the "
        "leftmost learned pair": dict(order="left"),
    }
    found = next((why for why, kw in mistakes.items() if encode(s, chars, merges, **kw) == got),
                 "")
    first = next((n for n, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                 min(len(got), len(want)))
    show = [vocab[i] if 0 <= i < len(vocab) else f"<{i}>" for i in got[first:first + 4]]
    raise CheckFailure(
        f"{name} ({label}): {_agree(first, 'id')}; from there expected "
        f"{[vocab[i] for i in want[first:first + 4]]} (ids {want[first:first + 4]}), got "
        f"{show} (ids {got[first:first + 4]})."
        + (f" The likely mistake: {found}." if found else
           " Split s with PRETOKENIZE, map each chunk's characters to ids, then merge the "
           "learned pair of lowest rank until none is left."))


@value_check
def check_bpe_encode_values(BPETokenizer, merge_fn=None) -> None:
    """With the judge's chars and merges: a drawn passage of Tiny Shakespeare, merges whose
    rank order differs from their left-to-right order, a merge across a chunk boundary that
    must not apply, the empty string; an unknown character raises ValueError naming it.
    ``merge_fn`` (the learner's ``merge``) is named first when it fails too."""
    with _merge_first(merge_fn):
        _encode_cases(BPETokenizer)


def _encode_cases(BPETokenizer) -> None:
    text = trusted_tinyshakespeare()
    chars = sorted(set(text))
    merges = train(_shakespeare(44, 3000), 25, chars=chars)
    _encode_case(BPETokenizer, chars, merges, _shakespeare(45, 400), "a passage of Tiny "
                 "Shakespeare, with merges learned from another")
    small = ["\n", " ", "a", "b", "c"]
    # ('b', 'c') is learned before ('a', 'b'): 'abc' is ['a', 'bc'], not ['ab', 'c'];
    # ('c', ' ') spans two chunks ('abc', ' abc') and must never apply.
    order = [(3, 4), (2, 3), (4, 1), (1, 2), (5, 5)]
    # 'ac ab': ('c', ' ') would apply across the chunks 'ac' and ' ab'
    _encode_case(BPETokenizer, small, order, "abc abc\nbcbc ac ab",
                 "merges learned in another order")
    _encode_case(BPETokenizer, small, order, "", "merges learned in another order")
    tok = call(BPETokenizer, small, [tuple(p) for p in order], name="BPETokenizer(chars, merges)")
    try:
        got = tok.encode("abz")
    except ValueError as exc:
        if "z" not in str(exc):
            raise CheckFailure("encode('abz') raised ValueError without naming 'z': "
                               f"{shown(str(exc))}. "
                               "Name the unknown character.") from None
        return
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything: diagnosed
        raise CheckFailure(f"encode('abz') raised {type(exc).__name__}: {exc}; raise a "
                           "ValueError that names the character not in the vocabulary.") \
            from None
    raise CheckFailure(f"encode('abz') returned {shown(got)} although 'z' is not in the "
                       "vocabulary: "
                       "raise a ValueError naming it.")
