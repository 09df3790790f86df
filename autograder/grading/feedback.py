"""``feedback``: one HTML page per (student, day) from the grading results.

The page shows the status and score, the learner's own code cells (with their text output),
and for each hidden test its points and its diagnosis message. It never shows a test cell's
source or a traceback (both would reveal the hidden tests).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import nbformat

from autograder.core.records import Result, _atomic_write_text

STATUS_TEXT = {
    "graded": "Graded.",
    "missing": "No notebook was found for this day.",
    "unreadable": "The file could not be read as a notebook (invalid or truncated JSON).",
    "rejected": "The notebook could not be graded because of what it contains (the reason "
                "follows); it counts 0 until you submit one that can be.",
    "timeout": "A cell ran past its time limit and was stopped; later cells may not have run.",
    "memory-limit": "The notebook hit the memory limit.",
    "kernel-died": "Python stopped while running the notebook (os._exit, a crash or a limit); "
                   "the cells after that point did not run.",
    "tampered": "The notebook changes how the tests work; an instructor will review it.",
    "environment-error": "The grader itself had a problem; an instructor will re-run it.",
}

CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;
color:#222}
h1{font-size:1.4rem}.meta{color:#555}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;border-radius:4px;font-size:.85rem}
.out{background:#fff;border-left:3px solid #ccc}
.test{padding:.5rem .8rem;margin:.6rem 0;border-radius:4px}
.pass{background:#e6f4ea;border:1px solid #9bd3ae}.fail{background:#fdecea;
border:1px solid #f1a9a0}
.status{padding:.4rem .8rem;border-radius:4px;background:#fff8e1;border:1px solid #f0d58c}
"""

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _is_test(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


def _text_outputs(cell, limit: int = 3000) -> str:
    parts = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(out.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "text/plain" in data:
                parts.append(data["text/plain"] if isinstance(data["text/plain"], str)
                             else "".join(data["text/plain"]))
            elif "image/png" in data:
                parts.append("[figure]")
        elif kind == "error":  # the learner's own cell: its error name and message only
            parts.append(f"{out.get('ename', '')}: {out.get('evalue', '')}")
    text = ANSI.sub("", "\n".join(p.rstrip("\n") for p in parts))
    return text if len(text) <= limit else text[:limit] + "\n[... cut]"


def render(result: Result, notebook: nbformat.NotebookNode | None, late=None) -> str:
    """The feedback page of one result (HTML text); ``late``
    (:class:`autograder.core.deadlines.Late`) adds when it was submitted and any penalty."""
    e = html.escape
    pct = 100 * result.score / result.max_score if result.max_score else 0.0
    body = [f"<h1>{e(result.day)}: feedback for {e(result.student)}</h1>",
            f"<p class=meta>Score <b>{result.score:g} / {result.max_score:g}</b> "
            f"({pct:.0f}%) &middot; status <b>{e(result.status)}</b></p>"]
    if late is not None and late.note and result.status != "missing":
        words = e(late.note[0].upper() + late.note[1:]) + "."
        if late.penalty:
            words += (f" Late penalty: <b>&minus;{late.penalty:g}</b> point(s); "
                      f"<b>{late.after:g} / {result.max_score:g}</b> counted.")
        elif late.flagged:
            words = ("The time of this submission could not be established; your instructor "
                     "will check it. No penalty was applied.")
        body.append(f"<p class=status>{words}</p>")
    if result.status != "graded" or result.detail:
        body.append(f"<p class=status>{e(STATUS_TEXT.get(result.status, ''))} "
                    f"{e(result.detail[:600])}</p>")
    tests = {t.grade_id: t for t in result.tests}
    shown = set()
    if notebook is not None:
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            if _is_test(cell):
                gid = cell.metadata["nbgrader"].get("grade_id", "")
                t = tests.get(gid)
                if t is None or gid in shown:
                    continue
                shown.add(gid)
                body.append(_test_box(t))
                continue
            if not cell.source.strip():
                continue
            body.append(f"<pre>{e(cell.source)}</pre>")
            out = _text_outputs(cell)
            if out.strip():
                body.append(f"<pre class=out>{e(out)}</pre>")
    for gid, t in tests.items():  # tests whose cell was deleted from the submission
        if gid not in shown:
            body.append(_test_box(t))
    return ("<!doctype html><html><head><meta charset=utf-8>"
            f"<title>{e(result.student)} {e(result.day)}</title><style>{CSS}</style></head>"
            "<body>" + "\n".join(body) + "</body></html>")


def _test_box(t) -> str:
    e = html.escape
    ok = t.points >= t.max_points
    verdict = "passed" if ok else ("partly passed" if t.points > 0 else "failed")
    msg = ANSI.sub("", t.message or "")
    diag = f"<br>{e(msg[:1200])}" if (msg and not ok) else ""
    return (f"<div class='test {'pass' if ok else 'fail'}'><b>Test {e(t.grade_id)}</b>: "
            f"{verdict}, {t.points:g} / {t.max_points:g} points{diag}</div>")


def write_feedback(results_dir: Path, out_dir: Path, students: list[str] | None = None,
                   days: list[str] | None = None, deadlines=None) -> list[Path]:
    """Write ``out_dir/<student>/<day>.html`` for every result under ``results_dir``; with
    ``deadlines``, each page says when it was submitted against its due date and any penalty
    (the points accepted in ``accepted.json`` beside ``results_dir`` count)."""
    from autograder.core import acceptance
    from autograder.core.records import late_of

    accepted = acceptance.load(Path(results_dir).parent / "accepted.json")
    written = []
    for path in sorted(Path(results_dir).glob("*/*.json")):
        result = Result.from_json(json.loads(path.read_text(encoding="utf-8")))
        if (students and result.student not in students) or (days and result.day not in days):
            continue
        nb_path = path.with_suffix(".ipynb")
        nb = None
        if nb_path.is_file():
            try:
                nb = nbformat.read(str(nb_path), as_version=4)
            except Exception:  # noqa: BLE001 - feedback without the code is still feedback
                nb = None
        target = Path(out_dir) / result.student / f"{result.day}.html"
        late = (late_of(result, deadlines, acceptance.paid(result, accepted))
                if deadlines is not None else None)
        _atomic_write_text(target, render(result, nb, late))
        written.append(target)
    return written
