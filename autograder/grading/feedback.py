"""``feedback``: one HTML page per (student, day) from the grading results.

The page shows the status and score, the learner's own code cells (with their text output),
and for each hidden test its points and its diagnosis message. It never shows a test cell's
source or a traceback (both would reveal the hidden tests).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat

from autograder.core.records import Result, Status, _atomic_write_text

STATUS_TEXT = {
    Status.GRADED: "Graded.",
    Status.MISSING: "No notebook was found for this day.",
    Status.UNREADABLE: "The file could not be read as a notebook (invalid or truncated JSON).",
    Status.REJECTED: "The notebook could not be graded because of what it contains (the reason "
                "follows); it counts 0 until you submit one that can be.",
    Status.TIMEOUT: "A cell ran past its time limit and was stopped; later cells may not have run.",
    Status.MEMORY_LIMIT: "The notebook hit the memory limit.",
    Status.KERNEL_DIED: "Python stopped while running the notebook (os._exit, a crash or a limit); "
                   "the cells after that point did not run.",
    Status.TAMPERED: "The notebook changes how the tests work; an instructor will review it.",
    Status.ENVIRONMENT_ERROR: "The grader itself had a problem; an instructor will re-run it.",
}

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
            plain = data.get("text/plain", "")
            plain = plain if isinstance(plain, str) else "".join(plain)
            if "image/png" in data:
                parts.append("[figure]")
            elif "application/vnd.jupyter.widget-view+json" in data:
                parts.append("[interactive widget]")
            elif plain.strip() not in ("", "''", '""', "None"):   # nothing to read there
                parts.append(plain)
        elif kind == "error":  # the learner's own cell: its error name and message only
            parts.append(f"{out.get('ename', '')}: {out.get('evalue', '')}")
    text = ANSI.sub("", "\n".join(p.rstrip("\n") for p in parts))
    return text if len(text) <= limit else text[:limit] + "\n[... cut]"


def explain(message: str) -> str:
    """A failed test's diagnosis in the learner's words (ANSI colours dropped), with a hint for
    the errors a learner meets before the checks run; the feedback page and the self-check's
    report both say it this way."""
    message = ANSI.sub("", message or "").strip()
    if message.startswith("NotImplementedError"):
        return ("not written yet: the stub still raises NotImplementedError "
                "(replace `raise NotImplementedError()` with your code)")
    if message.startswith("NameError"):
        return (f"{message} — an earlier cell failed or defines it under another name; "
                "run the notebook top to bottom (Restart & Run All) to see where")
    return message.removeprefix("CheckFailure: ")


def _num(x: float) -> str:
    return f"{x:g}"


def _test_item(t, info) -> dict:
    ok = t.points >= t.max_points
    return {"kind": "test", "ok": ok, "grade_id": t.grade_id,
            "checks": (info.checks if info and info.checks else t.grade_id),
            "verdict": "passed" if ok else ("partly passed" if t.points > 0 else "failed"),
            "points": _num(t.points), "max_points": _num(t.max_points),
            "why": "" if ok else (explain(t.message)[:1200]
                                  or "No message: the test gave no points.")}


def _exercises(result: Result, tests: dict) -> list[dict]:
    groups: dict[str, list] = {}
    for t in result.tests:
        info = tests.get(t.grade_id)
        groups.setdefault(info.exercise if info else "Other tests", []).append(t)
    out = []
    for name, items in groups.items():
        got, mx = sum(t.points for t in items), sum(t.max_points for t in items)
        out.append({"name": name, "got": got, "max": mx, "got_text": _num(got),
                    "max_text": _num(mx), "n": len(items),
                    "passed": sum(t.points >= t.max_points for t in items)})
    return out


def render(result: Result, notebook: nbformat.NotebookNode | None, late=None,
           root: Path | None = None) -> str:
    """The feedback page of one result (HTML text); ``late``
    (:class:`autograder.core.deadlines.Late`) adds when it was submitted and any penalty;
    ``root`` (the course) gives the day's title, the exercises and what each test checks."""
    from autograder.core.course import day_title, test_map
    from autograder.core.pages import render as render_page

    tests, title = {}, result.day
    if root is not None:
        try:
            tests, title = test_map(root, result.day), day_title(root, result.day)
        except (OSError, ValueError, AttributeError):
            pass                        # a day the course no longer has: ids, not names
    late_text = ""
    if late is not None and late.note and result.status != Status.MISSING:
        late_text = late.note[0].upper() + late.note[1:] + "."
        if late.penalty:
            late_text += (f" Late penalty: \u2212{late.penalty:g} point(s); "
                          f"{late.after:g} / {result.max_score:g} counted.")
        elif late.flagged:
            late_text = ("The time of this submission could not be established; your "
                         "instructor will check it. No penalty was applied.")
    status_text = ""
    if result.status != Status.GRADED or result.detail:
        status_text = f"{STATUS_TEXT.get(result.status, '')} {result.detail[:600]}".strip()
    by_id = {t.grade_id: t for t in result.tests}
    items, shown = [], set()
    if notebook is not None:
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            if _is_test(cell):
                gid = cell.metadata["nbgrader"].get("grade_id", "")
                if gid in by_id and gid not in shown:
                    shown.add(gid)
                    items.append(_test_item(by_id[gid], tests.get(gid)))
                continue
            if cell.source.strip():
                items.append({"kind": "code", "source": cell.source,
                              "output": _text_outputs(cell).strip("\n")})
    items += [_test_item(t, tests.get(g)) for g, t in by_id.items() if g not in shown]
    pct = 100 * result.score / result.max_score if result.max_score else 0.0
    return render_page("feedback.html.j2", title=title, student=result.student,
                       score=_num(result.score), max_score=_num(result.max_score),
                       pct=f"{pct:.0f}", status=result.status, late=late_text,
                       status_text=status_text, exercises=_exercises(result, tests),
                       items=items)


def write_feedback(results_dir: Path, out_dir: Path, students: list[str] | None = None,
                   days: list[str] | None = None, deadlines=None,
                   root: Path | None = None) -> list[Path]:
    """Write ``out_dir/<student>/<day>.html`` for every result under ``results_dir``; with
    ``deadlines``, each page says when it was submitted against its due date and any penalty
    (the points accepted in ``accepted.json`` beside ``results_dir`` count)."""
    from autograder.core import acceptance
    from autograder.core.records import late_of

    accepted = acceptance.load(Path(results_dir).parent / "accepted.json")
    written = []
    for path in sorted(Path(results_dir).glob("*/*.json")):
        try:
            result = Result.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError, KeyError) as exc:
            print(f"feedback: {path} skipped ({exc}): run grade again", file=sys.stderr)
            continue
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
        _atomic_write_text(target, render(result, nb, late, root))
        written.append(target)
    return written
