"""``python -m autograder similarity``: copied work ranks above independent work.

The cohort is made of the course's own independent authors of each day (the answer key in
solutions/ and the learners' notebooks in tests/alternatives/, written from the release
notebook alone) and of planted copies of them, transformed the way a copier hides a copy:
identifiers renamed, top-level functions reordered, comments replaced or removed, a helper
added. Every planted pair must score above every pair of two different authors.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import csv
import html
import io
import json
import keyword
import shutil
import tokenize
from itertools import combinations
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.alternatives import load
from autograder.cohort.similarity import THRESHOLD, add_similarity_command, run_similarity
from autograder.core.course import list_days

ALTERNATIVES = Path(__file__).with_name("alternatives")
DAYS = ("day02", "day09", "day10", "day12", "day14")
INJECTION = "</script><script>alert('copied')</script>"
FIGURES: dict[str, tuple[float, float]] = {}


# --------------------------------------------------------------------------- copiers


def _bound_names(src: str) -> set[str]:
    """Names the code itself binds (variables, parameters, functions, classes)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
    return names - set(dir(builtins)) - {"self", "cls"}


def rename(src: str, tag: str = "my") -> str:
    """Every name the code binds renamed (``scores`` -> ``my_scores_v``), attributes kept."""
    names, out, prev = _bound_names(src), [], None
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        s = tok.string
        if tok.type == tokenize.NAME and s in names and not keyword.iskeyword(s) \
                and not (prev is not None and prev.string == "."):
            s = f"{tag}_{s}_v"
        out.append((tok.type, s))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            prev = tok
    return tokenize.untokenize(out)


def recomment(src: str, drop: bool = False) -> str:
    """Comments removed, or replaced by other words."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            if drop:
                continue
            out.append((tok.type, "# step"))
        else:
            out.append((tok.type, tok.string))
    return tokenize.untokenize(out)


def _permute(src: str, groups: list[list[ast.stmt]]) -> str:
    """``src`` with the statements of each group (siblings) in reverse order, in place."""
    lines = src.splitlines(keepends=True)
    spans = {}
    for nodes in groups:
        where = [(min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) - 1,
                  n.end_lineno) for n in nodes]
        texts = ["".join(lines[a:b]).rstrip("\n") + "\n" for a, b in where]
        spans.update({a: (b, t) for (a, b), t in zip(where, reversed(texts), strict=True)})
    out, i = [], 0
    while i < len(lines):
        end, text = spans.get(i, (i + 1, lines[i]))
        out.append(text)
        i = end
    return "".join(out)


def reorder(src: str) -> str:
    """The methods of each class, then the cell's top-level functions and classes, in
    reverse order (the order a copier may shuffle them in); other statements stay put."""
    defs = (ast.FunctionDef, ast.ClassDef)
    tree = ast.parse(src)
    methods = [[m for m in c.body if isinstance(m, ast.FunctionDef)]
               for c in tree.body if isinstance(c, ast.ClassDef)]
    src = _permute(src, [m for m in methods if len(m) > 1])
    top = [n for n in ast.parse(src).body if isinstance(n, defs)]
    return _permute(src, [top] if len(top) > 1 else [])


HELPER = '''

def _check_finite(t, name="tensor"):
    """Raise if t holds a NaN or an infinity."""
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} is not finite")
    return t
'''


def _notebook(release, cells: dict[str, str]) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(release)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in cells:
            cell.source = cells[gid]
    return nb


@pytest.fixture(scope="module")
def cohort(root, tmp_path_factory):
    """``(folder, days, planted, independent)``: the submissions folder, its days and, per
    day, the pairs of student ids planted as copies and the pairs of two different authors
    (the key and the tests/alternatives files; a cell a file leaves out keeps the stub)."""
    subs = tmp_path_factory.mktemp("subs")
    days = [d for d in list_days(root) if d.startswith(DAYS)]
    planted: dict[str, list[tuple[str, str]]] = {}
    independent: dict[str, list[tuple[str, str]]] = {}
    alts = load(ALTERNATIVES, list_days(root))
    reordered = 0
    for day in days:
        release = nbformat.read(str(root / "release" / day / f"{day}.ipynb"), 4)
        solution = nbformat.read(str(root / "solutions" / day / f"{day}.ipynb"), 4)
        authors = {"key": {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
                           if c.get("metadata", {}).get("nbgrader", {}).get("solution")
                           and c.cell_type == "code"}}
        for alt in alts:
            if alt.day == day:  # a cell the file leaves out keeps the stub, not the key
                authors[alt.id.replace("_", "-")] = dict(alt.cells)
        assert len(authors) >= 3, day
        names = sorted(authors)
        copies = {}
        for i, name in enumerate(names[:3]):
            cells = authors[name]
            if i == 0:
                made = {g: rename(recomment(s, drop=True)) for g, s in cells.items()}
            elif i == 1:
                made = {g: rename(reorder(s), "the") for g, s in cells.items()}
                reordered += sum(reorder(s) != s for s in cells.values())
            else:
                made = {g: recomment(s) for g, s in cells.items()}
                first = next(iter(made))
                made[first] = rename(made[first] + HELPER, "x")
            assert made != cells
            copies[f"zcopy-of-{name}"] = made
        for sid, cells in {**authors, **copies}.items():
            folder = subs / sid / day
            folder.mkdir(parents=True)
            nbformat.write(_notebook(release, cells), str(folder / f"{day}.ipynb"))
        planted[day] = [(n, f"zcopy-of-{n}") for n in names[:3]]
        independent[day] = list(combinations(names, 2))
    assert reordered >= 5  # days 12 and 14 (days 2, 9, 10: one function per cell)
    return subs, days, planted, independent


@pytest.fixture(scope="module")
def measured(root, cohort, tmp_path_factory):
    subs, days, planted, independent = cohort
    out = tmp_path_factory.mktemp("out")
    problems: list[str] = []
    results = run_similarity(root, subs, days, out, problems=problems)
    assert not problems
    return {r.day: {(a, b): s for s, a, b in r.pairs} for r in results}, out


def test_planted_copies_rank_above_independent_work(cohort, measured):
    """For each day, every planted copy scores above every pair of two different authors."""
    _, days, planted, independent = cohort
    scores, _ = measured
    lines = []
    for day in days:
        low = min(scores[day][p] for p in planted[day])
        high = max(scores[day][p] for p in independent[day])
        FIGURES[day] = (low, high)
        lines.append(f"{day}: planted min {low:.3f}, independent max {high:.3f}")
    print("\n" + "\n".join(lines))
    for day in days:
        low, high = FIGURES[day]
        assert low > high, lines
    # the default --threshold shows every planted copy and no pair of independent authors
    assert max(h for _, h in FIGURES.values()) < THRESHOLD <= min(lo for lo, _ in FIGURES.values())


def test_blank_notebooks_score_zero(root, tmp_path):
    """Two untouched release notebooks (stubs alone) have no code of their own: exactly 0."""
    subs = tmp_path / "subs"
    days = list_days(root)
    for sid in ("blank-a", "blank-b"):
        for day in days:
            (subs / sid / day).mkdir(parents=True)
            shutil.copy(root / "release" / day / f"{day}.ipynb", subs / sid / day)
    results = run_similarity(root, subs, days, tmp_path / "out")
    assert [(r.day, [p[0] for p in r.pairs]) for r in results] == [(d, [0.0]) for d in days]


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    add_similarity_command(sub, lambda p: p.add_argument("--root", type=Path))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def hostile(root, tmp_path):
    """Day 2 of a key, its renamed copy holding a script injection, a malformed notebook, a
    notebook that is not JSON, and a huge one; as a folder."""
    day = next(d for d in list_days(root) if d.startswith("day02"))
    release = nbformat.read(str(root / "release" / day / f"{day}.ipynb"), 4)
    solution = nbformat.read(str(root / "solutions" / day / f"{day}.ipynb"), 4)
    key = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
           if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    copy = {g: rename(s) for g, s in key.items()}
    first = next(iter(copy))
    copy[first] += f'\n\nNOTE = "{INJECTION}"  # {INJECTION}\n'
    subs = tmp_path / "subs"
    for sid, cells in (("alice", key), ("bob", copy)):
        (subs / sid / day).mkdir(parents=True)
        nbformat.write(_notebook(release, cells), str(subs / sid / day / f"{day}.ipynb"))
    bad = {"carol": json.dumps({"cells": "not a list"}), "dave": "{not json",
           "erin": json.dumps({"cells": [{"cell_type": "code", "source": 7,
                                          "metadata": {"nbgrader": {"grade_id": first}}},
                                         None, [1, 2]]})}
    for sid, text in bad.items():
        (subs / sid / day).mkdir(parents=True)
        (subs / sid / day / f"{day}.ipynb").write_text(text, encoding="utf-8")
    return subs, day


def test_cli_writes_sorted_csv_and_escaped_html(root, hostile, tmp_path, capsys):
    """The CSV has the exact header, every pair once, highest first; the HTML shows the copied
    pair with the injection escaped; unreadable notebooks are reported, not a crash; no grade
    file is written."""
    subs, day = hostile
    out = tmp_path / "grading"
    assert _cli(["similarity", str(subs), "--day", "2", "--output", str(out),
                 "--root", str(root)]) == 0
    err = capsys.readouterr().err
    assert "carol/" in err and "dave/" in err and "not a notebook" in err
    with open(out / "similarity" / "similarity.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["day", "student_a", "student_b", "similarity"]
    body = [(r[0], r[1], r[2], float(r[3])) for r in rows[1:]]
    assert all(a < b and 0 <= s <= 1 and d == day for d, a, b, s in body)
    assert [s for *_, s in body] == sorted((s for *_, s in body), reverse=True)
    # erin has readable JSON but no usable answer cell: she scores 0 with everyone
    assert {(a, b) for _, a, b, _ in body} == {("alice", "bob"), ("alice", "erin"),
                                               ("bob", "erin")}
    assert body[0][1:3] == ("alice", "bob") and body[0][3] > 0.9
    page = (out / "similarity" / "similarity.html").read_text(encoding="utf-8")
    assert "alice &amp; bob" in page and "<mark>" in page
    assert INJECTION not in page and "<script" not in page
    assert "&lt;/script&gt;&lt;script&gt;" in page
    assert sorted(p.name for p in out.rglob("*")) == ["similarity", "similarity.csv",
                                                     "similarity.html"]


def test_zip_and_limits(root, hostile, tmp_path, monkeypatch):
    """A zip in the folder layout is read as grade reads it; a notebook over the size cap is
    left out with a reason, and code over the code cap is cut."""
    import autograder.cohort.similarity as sim

    subs, day = hostile
    archive = shutil.make_archive(str(tmp_path / "subs"), "zip", subs)
    monkeypatch.setattr(sim, "MAX_CODE_CHARS", 300)
    alice = subs / "alice" / day / f"{day}.ipynb"
    monkeypatch.setattr(sim, "MAX_NOTEBOOK_BYTES", alice.stat().st_size + 10)
    (subs / "bob" / day / f"{day}.ipynb").write_bytes(b" " * (alice.stat().st_size + 11))
    problems: list[str] = []
    run_similarity(root, subs, [day], tmp_path / "a", problems=problems)
    assert any(p.startswith(f"bob/{day}: over") for p in problems), problems
    assert any(p.startswith(f"alice/{day}: answer code over 300") for p in problems)
    monkeypatch.undo()
    problems = []
    results = run_similarity(root, Path(archive), [day], tmp_path / "b", problems=problems)
    assert {(a, b) for _, a, b in results[0].pairs} >= {("alice", "bob")}


def test_class_report_links_to_similarity(root, tmp_path):
    """The class report links to similarity.html when it exists, and only then."""
    from autograder.grading.report import write_report

    grading = tmp_path / "grading"
    (grading / "results").mkdir(parents=True)
    page = write_report(grading / "results", grading / "report").read_text(encoding="utf-8")
    assert "similarity.html" not in page
    (grading / "similarity").mkdir()
    (grading / "similarity" / "similarity.html").write_text("<html></html>", encoding="utf-8")
    page = write_report(grading / "results", grading / "report").read_text(encoding="utf-8")
    assert 'href="../similarity/similarity.html"' in page


def test_the_release_text_is_never_highlighted_and_only_submitted_days_show(root, hostile,
                                                                            tmp_path):
    """In a copied pair, is every line the release notebook holds (a stub's signature and
    docstring) shown unhighlighted while the copied code is highlighted; and are days nobody
    submitted left off the page?"""
    subs, day = hostile
    out = tmp_path / "grading"
    assert _cli(["similarity", str(subs), "--output", str(out), "--root", str(root)]) == 0
    page = (out / "similarity" / "similarity.html").read_text(encoding="utf-8")
    assert page.count("<h2 id=") == 1 and "Day 2: " in page
    release = (root / "release" / day / f"{day}.ipynb").read_text(encoding="utf-8")
    starter = {line.strip() for c in json.loads(release)["cells"] if c["cell_type"] == "code"
               for line in "".join(c["source"]).splitlines() if len(line.strip()) > 12}
    marked = [m.split("</mark>", 1)[0] for m in page.split("<mark>")[1:]]
    assert marked, "the copied pair has highlighted code"
    shown = {html.unescape(m).strip() for m in marked}
    assert not shown & starter, sorted(shown & starter)[:3]
    docstring = next(s for s in starter if s.startswith('"""') or s.startswith("Args"))
    assert html.escape(docstring, quote=False) in page or docstring in html.unescape(page)
