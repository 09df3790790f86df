"""Scoring one graded notebook: points per test cell, the status, and what to flag.

Reads only host-side data: the source notebook (what counts), the notebook nbgrader
autograded (the verdicts as cell outputs), the executor's events and the judge's verdicts.
Also the static scan of the learner's own cells for known cheats.
"""

from __future__ import annotations

import signal
from pathlib import Path

import nbformat

from autograder.core.course import notebook_name
from autograder.core.records import Status, TestResult


def graded_cells(nb: nbformat.NotebookNode) -> list[tuple[str, float]]:
    """(grade_id, points) of every autograded test cell, in notebook order."""
    out = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution") and cell.cell_type == "code":
            out.append((meta["grade_id"], float(meta.get("points", 0))))
    return out


def max_score(root: Path, day: str) -> float:
    nb = nbformat.read(str(root / "source" / day / notebook_name(day)), as_version=4)
    return sum(p for _, p in graded_cells(nb))


def _error_text(cell: nbformat.NotebookNode) -> str:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename', '')}: {out.get('evalue', '')}".strip()
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return "the test wrote to stderr: " + out.get("text", "")[-500:]
    return ""


def score_notebook(source_nb: nbformat.NotebookNode, graded_nb: nbformat.NotebookNode
                   ) -> list[TestResult]:
    """Score each test cell of the source notebook from the autograded notebook's outputs.

    A test cell missing from the submission scores 0 (nbgrader restores deleted test cells
    only when it can match them; the source notebook is the list of what counts). A grade id
    pasted twice counts once (the first copy).
    """
    from nbgrader.utils import determine_grade

    by_id: dict[str, list[nbformat.NotebookNode]] = {}
    for cell in graded_nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid:
            by_id.setdefault(gid, []).append(cell)
    results = []
    for gid, points in graded_cells(source_nb):
        cells = by_id.get(gid, [])
        if not cells:
            results.append(TestResult(gid, 0.0, points, "test cell missing from the submission"))
            continue
        cell = cells[0]
        if cell.cell_type != "code":
            results.append(TestResult(gid, 0.0, points, "test cell is not a code cell"))
            continue
        got, _ = determine_grade(cell)
        got = float(got or 0.0)
        results.append(TestResult(gid, min(got, points), points, _error_text(cell)))
    return results


# Learner code has no business touching these; each is a known way to fake a pass.
TAMPER_PATTERNS = [
    (r"\btorch\s*\.\s*(allclose|equal|isclose|testing)\b[\w.]*\s*=(?!=)",
     "replaces a torch comparison function"),
    (r"setattr\s*\(\s*torch\b", "patches torch with setattr"),
    (r"\b(assert_close|allclose)\s*=(?!=)", "rebinds a comparison function"),
    (r"\bdef\s+__(eq|ne|bool|torch_function|torch_dispatch)__\b",
     "defines an object that can answer any comparison"),
    (r"\b__torch_function__\b|\b__torch_dispatch__\b", "overrides torch dispatch"),
    (r"showtraceback|showsyntaxerror|set_custom_exc|InteractiveShell|input_transformers"
     r"|ast_transformers|events\.register|sys\.excepthook",
     "patches IPython's error display or cell execution"),
    (r"\bautograder\b", "touches the grading library"),
    (r"sys\.modules\s*\[", "replaces imported modules"),
    (r"\b__builtins__\b|\bbuiltins\b", "patches Python builtins"),
    (r"(?i)\bprint\s*\(.*(\b(all\s+)?tests?\s+passed\b|\bpoints?\b|\bscore\b"
     r"|\bgrade_id\b|\bday\d\d_\w+\s*:\s*(pass|ok|\d)|\bpassed\b)",
     "prints text that imitates a grading result"),
]


def scan_for_tampering(submitted: nbformat.NotebookNode, release: nbformat.NotebookNode | None
                       ) -> list[str]:
    """Static review of the learner's own code (cells nbgrader does not overwrite)."""
    import re

    given = set()
    if release is not None:
        given = {c.source.strip() for c in release.cells if c.cell_type == "code"}
    found = []
    for i, cell in enumerate(submitted.cells, 1):
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if (meta.get("grade") and not meta.get("solution")) or (
                meta.get("locked") and not meta.get("solution")):
            continue  # nbgrader restores these from the gradebook
        src = cell.source
        if src.strip() in given:
            continue
        for lineno, line in enumerate(src.splitlines(), 1):
            code = line.split("#", 1)[0]
            for pat, why in TAMPER_PATTERNS:
                if re.search(pat, code):
                    found.append(f"cell {i} line {lineno}: {why}: {line.strip()[:120]}")
                    break
    return found


def _exit_words(code: int | None) -> str:
    """A kernel's exit status in words. bwrap exits 128+N when its child died of signal N."""
    if code is None:
        return "exit status unknown"
    sig = -code if code < 0 else code - 128 if code > 128 else 0
    if sig:
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit code {code}"


# Words of an error that a limit caused, and the flag it gives (the notebook is still graded).
LIMIT_NOTES = [
    (("File too large",), "hit the file-size limit (a file write was stopped)"),
    (("No space left on device",), "hit the disk limit (the kernel's folders are full)"),
    (("can't start new thread", "Resource temporarily unavailable", "BlockingIOError"),
     "hit the process limit (a process or thread could not start)"),
]


# What a kernel that ran out of memory writes (lower case).
MEMORY_WORDS = ("can't allocate memory", "cannot allocate memory", "not enough memory",
                "out of memory", "std::bad_alloc", "memoryerror")


# Errors of course.data: a dataset did not load. The grading machine's fault when this machine
# confirms it; anyone's code can raise an exception of that name.
DATA_ERRORS = ("DatasetUnavailable", "DatasetError")


def _compact(text: str, n: int = 400) -> str:
    """An error message on one line: its first line and the line of its errors
    (course.data's messages also list where they looked and how to get a copy)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    kept = lines[:1] + [ln for ln in lines[1:] if ln.startswith("errors:")]
    return " ".join(" ".join(kept).split())[:n]


def _dataset_errors(graded: nbformat.NotebookNode, judged: dict
                    ) -> tuple[list[str], list[tuple[str, str]]]:
    """(what the judge's own process failed at, [(where, error)] of every dataset error the
    notebook's cells raised or a check reported)."""
    trusted, said = [], []
    for i, cell in enumerate(graded.cells, 1):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            continue  # a test cell's outputs are the judge's verdict, read below
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") in DATA_ERRORS:
                said.append((f"cell {i}", f"{out.get('ename')}: {out.get('evalue', '')}"))
    for gid, verdict in judged.items():
        message = str(verdict.get("message", ""))
        if verdict.get("internal"):  # the judge's own failure, said by the judge itself
            trusted.append(f"{gid}: {_compact(message)}")
        elif message.startswith(tuple(f"{name}: " for name in DATA_ERRORS)):
            said.append((gid, message))
    return trusted, said


def environment_faults(graded: nbformat.NotebookNode, judged: dict, data_check=None
                       ) -> tuple[list[str], list[str]]:
    """(faults of the grading machine, flags) that a graded notebook and its verdicts show.

    A fault is what the judge says its own process failed at (a verdict's ``internal``: a bug
    of the grader, the judge's trusted copy of a dataset that did not load), or a
    DatasetUnavailable/DatasetError of a cell or a check naming a dataset of the course's main
    path that ``data_check(names)`` (the problems of those registry files as the kernel sees
    them, checked here; default: this machine's offline copies) confirms. When the machine's
    copies verify, the error is the notebook's doing: graded, and flagged for review. An
    optional dataset (CIFAR-10, the full MNIST) that did not load is only said.
    """
    from autograder.grading import preflight
    from course.data import SHIPPED

    trusted, said = _dataset_errors(graded, judged)
    faults = [f"the judge could not run a check on this machine: {t}" for t in trusted]
    notes = []
    names = {text: preflight.named_files(text) for _, text in said}
    main = sorted({f for files in names.values() for f in files if f in SHIPPED})
    if data_check is None:
        def data_check(files):
            return preflight.fetch_problems(files, offline=True)
    problems = data_check(main) if main else []
    for where, text in said:
        if not any(f in SHIPPED for f in names[text]):
            notes.append(f"optional data was unavailable while grading ({where}: "
                         f"{_compact(text, 200)}); no test needs it")
        elif not problems:
            notes.append(f"review: {where} raised {_compact(text, 200)}, although this "
                         "machine's copy of the data verifies (the notebook's own doing?)")
        else:
            faults.append(f"dataset unavailable while grading ({where}: {_compact(text)})")
    if faults and problems:
        faults.append("on this machine: " + "; ".join(problems))
    return faults, notes


def _status_from(events: dict, graded: nbformat.NotebookNode, kernel_log: str,
                 data_check=None) -> tuple[str, list[str]]:
    """The status of a notebook that nbgrader executed, and the reasons behind it.

    ``environment-error`` first (:func:`environment_faults`: what failed and its fix; nothing
    the notebook earned is paid, and the next ``grade`` grades it again), then the limits'.
    """
    from autograder.grading.preflight import DATASET_FIX, RERUN

    faults, notes = environment_faults(graded, events.get("judged") or {}, data_check)
    if faults:
        data = any(n in f for f in faults for n in DATA_ERRORS)
        fix = DATASET_FIX if data else ("fix: what it says (a bug of the grader: its check in "
                                         "autograder/judge/checks)")
        return Status.ENVIRONMENT_ERROR, [
            "the grader or its machine failed, not the notebook: " + "; ".join(faults)
            + f"; {fix}; {RERUN}"]
    status, reasons = _run_status(events, graded, kernel_log)
    return status, reasons + notes


def _run_status(events: dict, graded: nbformat.NotebookNode, kernel_log: str
                ) -> tuple[str, list[str]]:
    """The status that a notebook's run (its kernel's death, time, memory) gives."""
    mem_words = MEMORY_WORDS
    mem = []
    for cell in graded.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") != "NotExecuted":
                text = f"{out.get('ename', '')}: {out.get('evalue', '')}"
                if any(w in text.lower() for w in mem_words):
                    mem.append(text[:200])
    if (events.get("exit") or {}).get("oom"):
        mem.append("the kernel's cgroup reached its memory ceiling")
    notes = []
    if events.get("kernel_died"):
        if any(w in kernel_log.lower() for w in mem_words):
            return Status.MEMORY_LIMIT, ["the kernel died when it ran out of memory"]
        if mem:
            # Out of address space, C code (zmq, a thread start) may crash instead of raising:
            # a death after a memory error is the memory limit's doing.
            return Status.MEMORY_LIMIT, [f"hit the memory limit ({mem[0]}), then the kernel died "
                                    f"({_exit_words(events.get('kernel_exit'))})"]
        return Status.KERNEL_DIED, ["the kernel died (os._exit, a crash, or the CPU-time limit); "
                               "cells after it were not run; "
                               + _exit_words(events.get("kernel_exit"))]
    if events.get("timeout"):
        if mem:  # out of memory, the kernel could no longer answer in time: the memory's doing
            return Status.MEMORY_LIMIT, [f"hit the memory limit ({mem[0]}), then a cell ran "
                                         "past its time limit"]
        return Status.TIMEOUT, ["a cell ran past its time limit and was interrupted"]
    if mem:
        return Status.MEMORY_LIMIT, [f"hit the memory limit: {mem[0]}"]
    texts = [f"{out.get('ename', '')}: {out.get('evalue', '')}" for cell in graded.cells
             for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    for words, note in LIMIT_NOTES:
        if any(w in t for t in texts for w in words):
            notes.append(note)
    if events.get("output_truncated"):
        notes.append("output truncated: the notebook printed more than the limit")
    return Status.GRADED, notes


def status_confirmed(events: dict, graded, kernel_log: str, data_check, confirm
                     ) -> tuple[str, list[str]]:
    """:func:`_status_from`, except that checks which reported a
    grader bug (a verdict's ``internal``) on this notebook's answers are the machine's fault
    only when ``confirm()`` (what failed on the control, "" when it grades) says so: when the
    answer key grades, those tests failed (0), the rest stands, and the flag says so."""
    status, flags = _status_from(events, graded, kernel_log, data_check)
    judged = events.get("judged") or {}
    bugs = sorted(g for g, v in judged.items() if v.get("internal") == "grader bug")
    if status != Status.ENVIRONMENT_ERROR or not bugs:
        return status, flags
    rest = dict(events, judged={g: dict(v, internal="") if g in bugs else v
                                for g, v in judged.items()})
    others, notes = _status_from(rest, graded, kernel_log, data_check)
    if others == Status.ENVIRONMENT_ERROR or confirm():
        return status, flags
    return others, notes + [f"review: the grader failed on this notebook's answers only "
                            f"({', '.join(bugs)}; the answer key grades): those tests count 0"]


def _own_code(submitted: nbformat.NotebookNode, release: nbformat.NotebookNode | None
              ) -> list[str]:
    """The learner's own code: every code cell except test cells and cells left as given."""
    given = {c.source.strip() for c in release.cells if c.cell_type == "code"} if release \
        else set()
    out = []
    for cell in submitted.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or (meta.get("grade") and not meta.get("solution")):
            continue
        if cell.source.strip() not in given:
            out.append(cell.source)
    return out


def _gate(tests: list[TestResult], verdicts: dict) -> list[TestResult]:
    """Withhold the points of observed checks whose names failed a value check."""
    from autograder.judge import Verdict, gate

    unpaid = gate({gid: Verdict(**v) for gid, v in verdicts.items()})
    return [TestResult(t.grade_id, 0.0, t.max_points, unpaid[t.grade_id])
            if t.grade_id in unpaid else t for t in tests]


def _withhold_internals(tests: list[TestResult], verdicts: dict, own_code: list[str]
                        ) -> tuple[list[TestResult], list[str]]:
    """Zero the judged tests whose names come from a cell that reaches into the course's
    internals (:func:`autograder.judge.internals.review`); return them and the findings."""
    from autograder.judge.internals import review, withheld

    found = review(own_code)
    unpaid = withheld(verdicts, found)
    return [TestResult(t.grade_id, 0.0, t.max_points, unpaid[t.grade_id])
            if t.grade_id in unpaid else t for t in tests], found.flags


def _explain_undefined(tests: list[TestResult], own_code: list[str]) -> list[TestResult]:
    """A test that failed because a name is not defined, where one of the learner's cells
    that names it does not compile: say so, with the error and its line, instead of "run the
    cell that defines it" (the cell ran, and failed before defining anything)."""
    import re

    broken = []
    for i, src in enumerate(own_code, 1):
        text = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                         for ln in src.splitlines())
        try:
            compile(text, f"cell {i}", "exec")
        except SyntaxError as exc:
            broken.append((i, src, f"{type(exc).__name__} at line {exc.lineno}: {exc.msg}"))
        except ValueError:
            continue
    if not broken:
        return tests
    out = []
    for t in tests:
        m = re.search(r"name '(\w+)' is not defined", t.message or "")
        hit = next((b for b in broken if m and re.search(rf"\b{m.group(1)}\b", b[1])), None)
        if hit:
            t = TestResult(t.grade_id, t.points, t.max_points,
                           f"{m.group(1)} is not defined because cell {hit[0]} of your own "
                           f"code does not run: {hit[2]}. Fix it, then run the cell.")
        out.append(t)
    return out
