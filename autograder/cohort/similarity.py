"""``python -m autograder similarity``: pairs of submissions whose own code is alike, ranked.

For each day, every student's *own* code is compared with every other student's, with
copydetect's winnowed k-gram fingerprints (https://github.com/blingenfelter/copydetect, after
Schleimer, Wilkerson and Aiken, "Winnowing", SIGMOD 2003):

- only the answer cells count: the code cells that are answer cells (nbgrader ``solution``)
  of the day's *release* notebook, found in the submission by their ``grade_id`` (a cell the
  student marked as an answer themselves is not one);
- the course's code is boilerplate: every k-gram of the release notebook's code cells (the
  stubs' signatures and docstrings, the code given around them) is dropped from each
  student's fingerprints, so two untouched notebooks score exactly 0;
- names are ignored: copydetect's tokenizer turns every identifier into ``V``/``F``/``O``
  and every string into ``S``, and drops comments and whitespace, so renaming variables,
  re-commenting or re-indenting changes nothing; the fingerprints are a set, so moving
  functions around changes little.

Parameters (:data:`K`, :data:`WINDOW`): answers are short (a few lines per cell, filtered to a
few hundred characters), so k = 20 filtered characters (copydetect's default noise threshold
is 25), about one statement (``V=V.V(V).V(-1,-2)/V``), and a window of 1: every k-gram is a
fingerprint, noise threshold = guarantee threshold = k. On the course's own independent
solutions (tests/test_similarity.py) k = 15 to 25 all rank every planted copy first; 20 and
25 leave the widest gap, and the smaller keeps shorter matches. Winnowing with a larger window
would save nothing at this size and would make the scores depend on Python's per-process
string hashing (``PYTHONHASHSEED``); with a window of 1 they do not.

copydetect gives two directional scores, the share of A's fingerprinted code found in B and
of B's found in A. The pair's ``similarity`` is their mean (in [0, 1]): a student who only
pads a copy with an extra helper keeps a high score, and a very short answer that happens to
sit inside a long one is not ranked as a full copy (the larger of the two would put it at 1).

``--threshold`` (default :data:`THRESHOLD` = 0.75) only picks the pairs shown side by side: on
the course's test cohort, independent authors of a day reach at most 0.71 and planted copies
(renamed, reordered, re-commented, padded with a helper) at least 0.80. The CSV lists every
pair whatever the threshold.

Output, under ``<output>/similarity/``: ``similarity.csv`` (``day,student_a,student_b,
similarity``, every pair of students who both submitted the day, highest first, ``student_a <
student_b``) and ``similarity.html`` (pairs at or above ``--threshold`` side by side, the
matching code highlighted, everything from a student HTML-escaped). Nothing is graded and no
grade file is written. Student notebooks are only parsed as JSON, never run; an unreadable or
oversized notebook is reported on stderr and left out.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import tempfile
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING

from markupsafe import Markup

from autograder.core.course import (
    PipelineError,
    day_title,
    find_root,
    list_days,
    need,
    notebook_name,
    resolve_days,
)
from autograder.grading.collect import discover, unzip_submissions

if TYPE_CHECKING:  # copydetect imports matplotlib.pyplot (0.4 s): loaded when first used
    from copydetect import CodeFingerprint

K = 20                     # noise threshold: shortest match that counts (filtered characters)
WINDOW = 1                 # winnowing window: 1 keeps every k-gram (guarantee threshold = K)
THRESHOLD = 0.75           # default --threshold: pairs shown in the HTML report
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024   # a bigger notebook is not read
MAX_CODE_CHARS = 200_000                # a student's answer code per day is cut here
MAX_SHOWN_PER_DAY = 100                 # flagged pairs shown side by side per day
SEP = "\n\n$\n\n"   # between answer cells: Python's lexer keeps ``$``, and no k-gram spans it
_MATMUL = re.compile(r"@(?=[^\W\d])")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


@dataclass
class DayResult:
    """The scores of one day: ``pairs`` holds ``(similarity, student_a, student_b)``."""

    day: str
    pairs: list[tuple[float, str, str]] = field(default_factory=list)
    prints: dict[str, CodeFingerprint] = field(default_factory=dict)
    starter_lines: frozenset[str] = frozenset()   # the release's own lines, never highlighted


def _source(cell: object) -> str:
    src = cell.get("source", "") if isinstance(cell, dict) else ""
    if isinstance(src, list):
        src = "".join(s for s in src if isinstance(s, str))
    return src if isinstance(src, str) else ""


def _grade_id(cell: object) -> str | None:
    meta = cell.get("metadata") if isinstance(cell, dict) else None
    nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
    gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
    return gid if isinstance(gid, str) else None


def read_cells(path: Path) -> list[dict]:
    """The cells of a notebook file, parsed as JSON only (no code is run, no schema needed).

    Raises:
        ValueError: the file is missing, a link or not a regular file, over
            :data:`MAX_NOTEBOOK_BYTES`, not UTF-8 JSON, or has no list of cells; the message
            says which.
    """
    if path.is_symlink() or not path.is_file():
        raise ValueError("not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"over {MAX_NOTEBOOK_BYTES // 2**20} MiB, not read")
    try:
        nb = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"not a notebook (JSON): {str(exc)[:120]}") from None
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        raise ValueError("not a notebook: no list of cells")
    return [c for c in cells if isinstance(c, dict)]


def starter(release: Path) -> tuple[list[str], str]:
    """The grade_ids of the release notebook's answer code cells, in order, and the code of all
    its code cells (the boilerplate).

    Raises:
        PipelineError: the release notebook cannot be read (run ``build``).
    """
    try:
        cells = read_cells(release)
    except ValueError as exc:
        raise PipelineError(f"{release}: {exc}; run `python -m autograder build`") from None
    code = [c for c in cells if c.get("cell_type") == "code"]
    answers = [gid for c in code if (gid := _grade_id(c))
               and c["metadata"]["nbgrader"].get("solution") is True]
    return answers, SEP.join(_source(c) for c in code)


def own_code(path: Path, answers: list[str]) -> tuple[str, str | None]:
    """A submission's answer cells' code (the cells named in ``answers``, in that order) and a
    note when it was cut at :data:`MAX_CODE_CHARS`.

    Raises:
        ValueError: the notebook cannot be read (see :func:`read_cells`).
    """
    by_id: dict[str, str] = {}
    for cell in read_cells(path):
        gid = _grade_id(cell)
        if gid in answers and gid not in by_id and cell.get("cell_type") == "code":
            by_id[gid] = _source(cell)
    code = SEP.join(by_id.get(gid, "") for gid in answers)
    if len(code) > MAX_CODE_CHARS:
        return code[:MAX_CODE_CHARS], f"answer code over {MAX_CODE_CHARS} characters, cut"
    return code, None


def fingerprint(code: str, boilerplate: frozenset[int] = frozenset()) -> CodeFingerprint:
    """copydetect's fingerprint of Python ``code`` (k = :data:`K`, window :data:`WINDOW`),
    less the k-grams in ``boilerplate`` and those spanning two answer cells (:data:`SEP`).

    The boilerplate is removed here, not by copydetect: its ``boilerplate=`` argument drops
    the wrong k-grams when one occurs twice in a document (``np.intersect1d`` with
    ``assume_unique=True``), and a stub's ``raise NotImplementedError()`` occurs in every cell.
    ``@`` directly before a name gets a space (``Q@K`` -> ``Q@ K``): Pygments reads ``@K`` as
    a decorator, which copydetect keeps verbatim, so the name would count.
    """
    from copydetect import CodeFingerprint
    from copydetect.utils import get_token_coverage

    fp = CodeFingerprint("answer.py", K, WINDOW, language="python",
                         fp=io.StringIO(_MATMUL.sub("@ ", code)))
    doc, drop = fp.filtered_code, set(boilerplate)
    for at in (i for i, ch in enumerate(doc) if ch == "$"):
        drop.update(hash(doc[i:i + K]) for i in range(max(0, at - K + 1), at + 1))
    fp.hashes = {h for h in fp.hashes if h not in drop}
    fp.hash_idx = {h: i for h, i in fp.hash_idx.items() if h in fp.hashes}
    fp.token_coverage = get_token_coverage(fp.hash_idx, K, len(doc))
    return fp


def similarity(a: CodeFingerprint, b: CodeFingerprint) -> float:
    """The pair's score in [0, 1]: the mean of the share of each one's fingerprinted code
    found in the other (0 when either has no code of its own)."""
    from copydetect import compare_files

    if not a.hashes or not b.hashes:
        return 0.0
    _, (sa, sb), _ = compare_files(a, b)
    return float(min(1.0, max(0.0, (sa + sb) / 2)))


def compare_day(root: Path, day: str, notebooks: dict[str, Path],
                problems: list[str]) -> DayResult:
    """Score every pair of ``notebooks`` (``{student: path}``) of ``day``; a notebook that
    cannot be read is appended to ``problems`` and left out."""
    answers, given = starter(root / "release" / day / notebook_name(day))
    boiler = frozenset(int(h) for h in fingerprint(given).hashes)
    result = DayResult(day, starter_lines=frozenset(
        line.strip() for line in given.splitlines() if line.strip()))
    for student, path in sorted(notebooks.items()):
        try:
            code, note = own_code(path, answers)
        except ValueError as exc:
            problems.append(f"{student}/{day}: {exc}; left out")
            continue
        if note:
            problems.append(f"{student}/{day}: {note}")
        try:
            result.prints[student] = fingerprint(code, boiler)
        except Exception as exc:  # noqa: BLE001 - a tokenizer failure costs one notebook only
            problems.append(f"{student}/{day}: cannot tokenize ({type(exc).__name__}); left out")
            continue
    for a, b in combinations(sorted(result.prints), 2):
        result.pairs.append((similarity(result.prints[a], result.prints[b]), a, b))
    result.pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
    return result


def _cell(text: str) -> str:
    return "'" + text if text.startswith(_FORMULA) else text


def write_csv(results: list[DayResult], path: Path) -> None:
    """``day,student_a,student_b,similarity`` for every pair, highest similarity first (a
    student id that a spreadsheet would run as a formula, ``=...``, is prefixed with ``'``)."""
    rows = sorted(((s, r.day, a, b) for r in results for s, a, b in r.pairs),
                  key=lambda t: (-round(t[0], 4), t[1], t[2], t[3]))
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["day", "student_a", "student_b", "similarity"])
        w.writerows([day, _cell(a), _cell(b), f"{s:.4f}"] for s, day, a, b in rows)


_ON, _OFF = "\ue000", "\ue001"     # highlight markers (private use), escaped after


def _marked_lines(text: str, starter_lines: frozenset[str]) -> Markup:
    """``text`` with copydetect's markers as HTML: each segment escaped, matches in
    ``<mark>``, except on a line the release notebook itself holds (a stub's docstring or
    signature matches in every pair: it is the course's text, not a copy)."""
    from markupsafe import escape

    out, on = [], False
    for line in text.split("\n"):
        plain = line.replace(_ON, "").replace(_OFF, "")
        keep = plain.strip() not in starter_lines
        parts, buf, state = [], "", on
        for ch in line:
            if ch in (_ON, _OFF):
                parts.append((buf, state))
                buf, state = "", ch == _ON
            else:
                buf += ch
        parts.append((buf, state))
        on = state
        out.append("".join(str(escape(seg)) if not (m and keep and seg) else
                           f"<mark>{escape(seg)}</mark>" for seg, m in parts))
    return Markup("\n".join(out))


def _highlighted(r: DayResult, a: str, b: str) -> tuple[Markup, Markup]:
    from copydetect import compare_files
    from copydetect.utils import highlight_overlap

    _, _, (sl_a, sl_b) = compare_files(r.prints[a], r.prints[b])
    out = []
    for student, sl in ((a, sl_a), (b, sl_b)):
        raw = r.prints[student].raw_code.replace(_ON, "").replace(_OFF, "")
        if getattr(sl, "ndim", 1) == 2 and sl.shape[1] and raw == r.prints[student].raw_code:
            text, _ = highlight_overlap(raw, sl, _ON, _OFF, escape_html=False)
        else:
            text = raw
        text = text.replace("\n$\n", "\n# ---- next answer cell ----\n")
        out.append(_marked_lines(text, r.starter_lines))
    return out[0], out[1]


def write_html(results: list[DayResult], path: Path, threshold: float,
               titles: dict[str, str] | None = None) -> None:
    """One page: per day with submissions, the pairs at or above ``threshold`` (at most
    :data:`MAX_SHOWN_PER_DAY`), each side by side with the matching code highlighted (a
    Jinja2 template with autoescaping: :mod:`autograder.core.pages`)."""
    from autograder.core.pages import render

    days = []
    for r in results:
        flagged = [p for p in r.pairs if p[0] >= threshold][:MAX_SHOWN_PER_DAY]
        days.append({"id": r.day, "title": (titles or {}).get(r.day, r.day),
                     "notebooks": len(r.prints), "n_pairs": len(r.pairs),
                     "n_flagged": sum(s >= threshold for s, _, _ in r.pairs),
                     "pairs": [{"a": a, "b": b, "score": f"{s:.2f}",
                                "sides": _highlighted(r, a, b)} for s, a, b in flagged]})
    path.write_text(render("similarity.html.j2", threshold=f"{threshold:.2f}", days=days),
                    encoding="utf-8")


def run_similarity(root: Path, submissions: Path, days: list[str], out_dir: Path,
                   threshold: float = THRESHOLD,
                   problems: list[str] | None = None) -> list[DayResult]:
    """Compare the submissions (a folder ``<student>/<day>/<nb>.ipynb`` or a zip, as for
    ``grade``) of ``days``; write ``similarity.csv`` and ``similarity.html`` into ``out_dir``.

    Raises:
        PipelineError: no submissions folder or zip, or a release notebook is missing.
    """
    problems = problems if problems is not None else []
    with tempfile.TemporaryDirectory(prefix="tfs-similarity-") as tmp:
        if submissions.is_file() and submissions.suffix == ".zip":
            submissions = unzip_submissions(submissions, Path(tmp), list_days(root), problems)
        jobs = discover(submissions, days)
        results = []
        for day in days:                    # only the days someone submitted
            nbs = {s: p for s, d, p in jobs if d == day and p is not None}
            if nbs:
                results.append(compare_day(root, day, nbs, problems))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(results, out_dir / "similarity.csv")
    titles = {r.day: day_title(root, r.day) for r in results}
    write_html(results, out_dir / "similarity.html", threshold, titles)
    return results


def _cmd_similarity(args: argparse.Namespace) -> int:
    need("copydetect", "instructor", "similarity")
    root = find_root(args.root)
    days = resolve_days(root, args.day)
    out = (args.output or Path("grading")) / "similarity"
    problems: list[str] = []
    results = run_similarity(root, args.submissions, days, out, args.threshold, problems)
    for why in problems:
        print(f"similarity: {why}", file=sys.stderr)
    for r in results:
        if r.pairs:
            top = ", ".join(f"{a}/{b} {s:.2f}" for s, a, b in r.pairs[:3])
            n = sum(s >= args.threshold for s, _, _ in r.pairs)
            print(f"{r.day}: {len(r.prints)} notebooks, {n} pairs >= {args.threshold:.2f}; "
                  f"top: {top}")
    print(f"wrote {out / 'similarity.csv'} and {out / 'similarity.html'} (grades unchanged)")
    return 0


def add_similarity_command(sub, add_common) -> None:
    """Register ``similarity`` on the CLI's subparsers (``add_common`` adds ``--root``)."""
    p = sub.add_parser("similarity", help="rank pairs of submissions by how alike their own "
                                          "code is (CSV + side-by-side HTML); grades unchanged")
    add_common(p)
    p.add_argument("submissions", type=Path,
                   help="folder <student_id>/<dayNN_slug>/<notebook>.ipynb, or a zip, as grade")
    p.add_argument("--day", action="append", help="only this day (repeatable)")
    p.add_argument("--output", type=Path, default=None,
                   help="grading folder; writes OUTPUT/similarity/ (default: ./grading)")
    p.add_argument("--threshold", type=float, default=THRESHOLD,
                   help=f"pairs at or above it are shown in the HTML (default {THRESHOLD})")
    p.set_defaults(func=_cmd_similarity)
