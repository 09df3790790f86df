"""What grading records: each (student, day)'s result, its key for resuming, the grades file.

Results are written atomically one by one as they arrive (``results/<student>/<day>.json``);
a result's key is the hash of the submitted notebook and of everything else that decides the
grade, so a re-run grades only what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder.core.nbgrader import CONFIG_FILE
from autograder.core.status import STATUSES, Status  # noqa: F401 - re-exported


@dataclass
class TestResult:
    __test__ = False  # not a pytest class

    grade_id: str
    points: float
    max_points: float
    message: str = ""


RESULT_SCHEMA = 1   # Result's JSON form; raise it when a field is renamed, added or removed


@dataclass
class Result:
    """The outcome of grading one (student, day).

    ``status`` is one of :data:`STATUSES`. ``score`` is what the tests that ran earned, also
    for timeout/memory-limit/kernel-died/tampered (the status says why it needs a look).
    ``rejected``: the submission's content kept it from being graded (its size, or nbgrader
    failing on it while the day's blank notebook grades on the same machine); it counts 0
    and ``detail`` says why in one line. ``environment-error`` is only the machine's fault.
    """

    student: str
    day: str
    status: str
    score: float = 0.0
    max_score: float = 0.0
    tests: list[TestResult] = field(default_factory=list)
    detail: str = ""
    key: str = ""           # hash of the submitted notebook + the course's grading material
    seconds: float = 0.0
    sandboxed: bool = False
    flags: list[str] = field(default_factory=list)  # tamper findings, truncated output...
    submitted_at: str = ""  # ISO 8601, UTC (autograder.core.deadlines.submission_time)
    time_source: str = ""   # classroom, nbgrader, lms, file; unreadable; "" when none
    schema: int = 1         # RESULT_SCHEMA when written; another value is never read

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def failed(cls, job: dict, status: Status, detail: str, *, sandboxed: bool = False
               ) -> Result:
        """No points for ``job`` (a grading job: student, day, total, key): ``status`` says
        why and ``detail`` how, in a line or two. The one way a failure is made."""
        return cls(job["student"], job["day"], Status(status), 0.0, job.get("total", 0.0),
                   detail=detail, key=job.get("key", ""), sandboxed=sandboxed)

    @classmethod
    def from_json(cls, data: dict) -> Result:
        """The result written by :meth:`to_json`.

        Raises:
            ValueError: written with another schema (or none): a renamed or added field would
                otherwise be dropped or defaulted without a word; such a result is graded
                again (``grade``) or skipped with a note.
        """
        if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
            found = data.get("schema") if isinstance(data, dict) else None
            raise ValueError(f"result schema {found!r}; this grader reads {RESULT_SCHEMA}")
        known = {f for f in cls.__dataclass_fields__}
        data = {k: v for k, v in data.items() if k in known}
        data["status"] = Status(data.get("status"))      # an unknown status: ValueError
        data["tests"] = [TestResult(**t) for t in data.get("tests", [])]
        data["flags"] = list(data.get("flags", []))
        return cls(**data)


def _atomic_write_json(path: Path, data: dict) -> None:
    _atomic_write_text(path, json.dumps(data, indent=1))


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def course_fingerprint(root: Path, day: str, settings: dict | None = None) -> str:
    """Hash of what decides a grade besides the submission: the day's source notebook, the
    grading library (autograder/judge/checks, course/), nbgrader's configuration, the limits."""
    h = hashlib.sha256()
    files = sorted((root / "source" / day).rglob("*"))
    for sub in ("autograder/judge/checks", "course"):
        files += sorted((root / sub).rglob("*.py"))
    files.append(CONFIG_FILE)
    for f in files:
        if f.is_file() and ".ipynb_checkpoints" not in f.parts and "__pycache__" not in f.parts:
            h.update(str(f.relative_to(root) if f.is_relative_to(root) else f.name).encode())
            h.update(f.read_bytes())
    h.update(json.dumps(settings or {}, sort_keys=True).encode())
    return h.hexdigest()


def submission_key(nb_path: Path | None, fingerprint: str) -> str:
    h = hashlib.sha256(fingerprint.encode())
    if nb_path is None:
        h.update(b"<missing>")
    else:
        try:
            h.update(Path(nb_path).read_bytes())
        except OSError as exc:
            h.update(f"<unreadable {exc}>".encode())
    return h.hexdigest()[:32]


def write_csv(results: list[Result], days: list[str], path: Path,
              accepted: set[tuple[str, str, str]] | None = None, deadlines=None) -> None:
    """One row per student, one column per day (points), plus total and max.

    A ``tampered`` result pays 0 unless ``accepted`` holds its (student, day, key)
    (:mod:`autograder.core.acceptance`; ``python -m autograder accept``). An ``environment-error``
    (the grader's fault) leaves its cell empty, not graded yet: it neither pays nor costs.

    With ``deadlines`` (:class:`autograder.core.deadlines.Deadlines`) each day's column is the
    points after the late penalty, preceded by ``<day>_raw`` (before it), ``<day>_late_hours``
    (0 on time, ``no-time`` when the submission has no trustworthy time: see
    :func:`autograder.core.deadlines.assess`) and ``<day>_penalty``.
    """
    import csv

    from autograder.core.acceptance import paid

    accepted = accepted or set()
    students = sorted({r.student for r in results})
    by_key = {(r.student, r.day): r for r in results}
    header = ["student_id"]
    for d in days:
        header += [f"{d}_raw", f"{d}_late_hours", f"{d}_penalty", d] if deadlines else [d]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([*header, "total", "max_total"])
        for s in students:
            row = [by_key.get((s, d)) for d in days]
            row = [None if r is not None and r.status == Status.ENVIRONMENT_ERROR else r
                   for r in row]
            cells, total = [], 0.0
            for r in row:
                points = paid(r, accepted) if r else None
                if deadlines is None:
                    cells.append("" if r is None else f"{points:g}")
                    total += points or 0.0
                    continue
                if r is None:
                    cells += ["", "", "", ""]
                    continue
                late = late_of(r, deadlines, points)
                hours = ("no-time" if late.flagged
                         else f"{late.hours_late:.2f}" if late.hours_late else "0")
                cells += [f"{points:g}", hours, f"{late.penalty:g}", f"{late.after:g}"]
                total += late.after
            w.writerow([s, *cells, f"{total:g}", f"{sum(r.max_score for r in row if r):g}"])
    os.replace(tmp, path)


def late_of(result: Result, deadlines, points: float):
    """:func:`autograder.core.deadlines.assess` for one result paying ``points``; a missing
    notebook is never late (it earns nothing either way)."""
    from autograder.core.deadlines import Late, assess

    if result.status == Status.MISSING:
        return Late(points, note="no submission")
    return assess(deadlines, result.student, result.day, points, result.submitted_at,
                  result.time_source)


def load_results(results_dir: Path) -> list[Result]:
    """Every result JSON under ``results_dir/<student>/<day>.json`` (unreadable ones skipped)."""
    out = []
    for f in sorted(results_dir.glob("*/*.json")):
        try:
            out.append(Result.from_json(json.loads(f.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return out


def format_table(results: list[Result], days: list[str]) -> str:
    """A per-day score table: one row per day, one column per student, in percent."""
    students = sorted({r.student for r in results})
    by_key = {(r.student, r.day): r for r in results}
    width = max([len(d) for d in days] + [4])
    cols = [max(len(s), 8) for s in students]
    lines = ["  ".join([f"{'day':<{width}}", *(f"{s:>{c}}" for s, c in zip(students, cols,
                                                                             strict=True))])]
    for day in days:
        cells = []
        for s, c in zip(students, cols, strict=True):
            r = by_key.get((s, day))
            if r is None:
                cells.append(f"{'':>{c}}")
            elif r.status != Status.GRADED:
                cells.append(f"{r.status:>{c}}")
            else:
                pct = 100.0 * r.score / r.max_score if r.max_score else 0.0
                cells.append(f"{pct:>{c - 1}.0f}%")
        lines.append("  ".join([f"{day:<{width}}", *cells]))
    return "\n".join(lines)
