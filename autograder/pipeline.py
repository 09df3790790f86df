"""The nbgrader pipeline: build the course, check it is in sync, autograde submissions.

Everything here drives nbgrader's own converters (GenerateAssignment, GenerateSolution,
Autograde) with the configuration in ``autograder/nbgrader_config.py``; the course only adds
what nbgrader lacks: a temporary course folder per grading run (so the committed tree is never
touched and no gradebook is shared between processes), parallel workers, statuses for broken
submissions, and results written atomically one by one.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

CONFIG_FILE = Path(__file__).with_name("nbgrader_config.py")


class PipelineError(Exception):
    """A problem the user can fix (unknown day, missing notebook...); the message says how."""


# --------------------------------------------------------------------------- course layout


def find_root(start: Path | None = None) -> Path:
    """The course root: the nearest folder above ``start`` (default: cwd) holding ``source/``.

    Raises:
        PipelineError: when no such folder exists.
    """
    here = Path(start or Path.cwd()).resolve()
    for candidate in (here, *here.parents, Path(__file__).resolve().parent.parent):
        if (candidate / "source").is_dir() and (candidate / "autograder").is_dir():
            return candidate
    raise PipelineError(
        f"no course folder (with source/ and autograder/) found above {here}; run this from "
        "the course repository or pass --root."
    )


def list_days(root: Path) -> list[str]:
    """Assignment names (``dayNN_slug``) found in ``source/``, in order."""
    return sorted(
        p.name for p in (root / "source").iterdir()
        if p.is_dir() and p.name.startswith("day") and (p / f"{p.name}.ipynb").is_file()
    )


def resolve_days(root: Path, wanted: list[str] | None) -> list[str]:
    """Turn user input (``day03``, ``3``, ``day03_self_attention``) into assignment names.

    Raises:
        PipelineError: for a day that does not exist, listing those that do.
    """
    days = list_days(root)
    if not wanted:
        return days
    out = []
    for w in wanted:
        key = w.strip()
        if key.isdigit():
            key = f"day{int(key):02d}"
        hits = [d for d in days if d == key or d.startswith(key + "_")]
        if len(hits) != 1:
            raise PipelineError(f"unknown day {w!r}; the course has: {', '.join(days)}")
        out.append(hits[0])
    return out


def notebook_name(day: str) -> str:
    return f"{day}.ipynb"


# --------------------------------------------------------------------------- nbgrader glue


def load_config(root: Path, db_path: Path):
    """nbgrader's Config from our config file, rooted at ``root`` with gradebook ``db_path``."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{db_path}"
    return config


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """nbgrader logs every step at INFO; keep the CLI's output to what the user asked for."""
    level = os.environ.get("AUTOGRADER_LOG", "ERROR").upper()
    loggers = [logging.getLogger(n) for n in ("traitlets", "nbgrader", "")]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(getattr(logging, level, logging.ERROR))
    try:
        yield
    finally:
        for lg, lv in zip(loggers, saved, strict=True):
            lg.setLevel(lv)


def _run_converter(converter_cls, config, assignment_id: str, student_id: str = "*") -> None:
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = assignment_id
    coursedir.student_id = student_id
    converter = converter_cls(coursedir=coursedir, config=config)
    converter.log.setLevel(logging.ERROR)
    with _quiet_logs():
        converter.start()


def generate(root: Path, days: list[str], db_path: Path, solutions: bool = True) -> None:
    """Run nbgrader's generate_assignment (and generate_solution) for ``days`` under ``root``."""
    from nbgrader.api import Gradebook
    from nbgrader.converters import GenerateAssignment, GenerateSolution

    config = load_config(root, db_path)
    with Gradebook(f"sqlite:///{db_path}", "transformers-from-scratch") as gb:
        for day in days:
            gb.update_or_create_assignment(day)
    for day in days:
        _run_converter(GenerateAssignment, config, day)
        if solutions:
            _run_converter(GenerateSolution, config, day)
    for top in ("release", "solutions") if solutions else ("release",):
        for day in days:
            for nb_path in (root / top / day).glob("*.ipynb"):
                _normalize(nb_path)


def _normalize(nb_path: Path) -> None:
    """Generated notebooks carry no outputs, no execution counts, and keep the cell ids."""
    nb = nbformat.read(str(nb_path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nbformat.write(nb, str(nb_path))


def build(root: Path, days: list[str] | None = None) -> list[str]:
    """Generate ``release/`` and ``solutions/`` from ``source/`` in place. Returns the days."""
    days = resolve_days(root, days)
    for top in ("release", "solutions"):
        for day in days:
            shutil.rmtree(root / top / day, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="tfs-build-") as tmp:
        generate(root, days, Path(tmp) / "gradebook.db")
    return days


def check_sync(root: Path) -> list[str]:
    """Regenerate into a temporary copy and diff with the committed release/ and solutions/.

    Returns a list of human-readable differences (empty when in sync).
    """
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tfs-sync-") as tmp:
        copy = Path(tmp) / "course"
        shutil.copytree(root / "source", copy / "source")
        days = list_days(copy)
        generate(copy, days, Path(tmp) / "gradebook.db")
        for top in ("release", "solutions"):
            want = {p.relative_to(copy / top) for p in (copy / top).rglob("*") if p.is_file()}
            have_dir = root / top
            have = {
                p.relative_to(have_dir) for p in have_dir.rglob("*")
                if p.is_file() and ".ipynb_checkpoints" not in p.parts
                and p.name != ".gitkeep"
            } if have_dir.is_dir() else set()
            for rel in sorted(want - have):
                problems.append(f"{top}/{rel} is missing: run `python -m autograder build`")
            for rel in sorted(have - want):
                problems.append(f"{top}/{rel} has no source: delete it or add it to source/")
            for rel in sorted(want & have):
                a = (copy / top / rel).read_text(encoding="utf-8").splitlines()
                b = (have_dir / rel).read_text(encoding="utf-8").splitlines()
                if a != b:
                    diff = list(difflib.unified_diff(b, a, f"committed/{top}/{rel}",
                                                     f"generated/{top}/{rel}", lineterm="", n=1))
                    problems.append(f"{top}/{rel} differs from what source/ generates:\n"
                                    + "\n".join(diff[:20]))
    return problems


# --------------------------------------------------------------------------- grading


@dataclass
class TestResult:
    grade_id: str
    points: float
    max_points: float
    message: str = ""


@dataclass
class Result:
    """The outcome of grading one (student, day)."""

    student: str
    day: str
    status: str  # graded | missing | unreadable | wrong-day | error
    score: float = 0.0
    max_score: float = 0.0
    tests: list[TestResult] = field(default_factory=list)
    detail: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Result:
        data = dict(data)
        data["tests"] = [TestResult(**t) for t in data.get("tests", [])]
        return cls(**data)


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
    only when it can match them; the source notebook is the list of what counts).
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


def find_submitted_notebook(folder: Path, day: str) -> Path | None:
    """The notebook of ``day`` in a submission folder, tolerating a renamed single notebook."""
    exact = folder / notebook_name(day)
    if exact.is_file():
        return exact
    candidates = [p for p in folder.glob("*.ipynb") if not p.name.startswith(".")]
    if len(candidates) == 1:
        return candidates[0]
    return None


def discover(submissions: Path, days: list[str], students: list[str] | None = None
             ) -> list[tuple[str, str, Path | None]]:
    """(student, day, notebook or None) for every student folder and day.

    The layout is nbgrader's ``<submissions>/<student_id>/<assignment_id>/<notebook>.ipynb``.

    Raises:
        PipelineError: if ``submissions`` is not a folder or holds no student folder.
    """
    if not submissions.is_dir():
        raise PipelineError(f"{submissions} is not a folder of submissions "
                            "(<student_id>/<dayNN_slug>/<dayNN_slug>.ipynb)")
    student_dirs = sorted(p for p in submissions.iterdir()
                          if p.is_dir() and not p.name.startswith("."))
    if students:
        student_dirs = [p for p in student_dirs if p.name in students]
    if not student_dirs:
        raise PipelineError(f"no student folders in {submissions}")
    jobs = []
    for sdir in student_dirs:
        for day in days:
            ddir = sdir / day
            jobs.append((sdir.name, day, find_submitted_notebook(ddir, day)
                         if ddir.is_dir() else None))
    return jobs


def _atomic_write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


_WORKER: dict[str, Path] = {}


def _worker_init(template: str, course_root: str) -> None:
    """Each worker process grades in its own copy of the course folder and gradebook."""
    import warnings

    # Kernels import the grading library (autograder.checks) and course helpers of the
    # course being graded, whatever is installed in site-packages.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [course_root, *filter(None, [os.environ.get("PYTHONPATH")])])

    work = Path(tempfile.mkdtemp(prefix=f"tfs-worker-{os.getpid()}-", dir=Path(template).parent))
    # nbgrader's SQLAlchemy warnings and the kernels' start-up chatter go to a log file, not
    # the instructor's terminal; every result carries its own messages.
    warnings.filterwarnings("ignore")
    log = os.open(work / "worker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)
    shutil.copytree(Path(template) / "source", work / "source")
    shutil.copy2(Path(template) / "gradebook.db", work / "gradebook.db")
    _WORKER["root"] = work


def grade_one(job: tuple[str, str, str | None]) -> dict:
    """Autograde one (student, day, notebook path) in this worker's course folder."""
    from nbgrader.converters import Autograde

    student, day, nb_path = job
    root = _WORKER["root"]
    source_nb = nbformat.read(str(root / "source" / day / notebook_name(day)), as_version=4)
    total = sum(p for _, p in graded_cells(source_nb))
    if nb_path is None:
        return Result(student, day, "missing", 0.0, total,
                      detail=f"no {notebook_name(day)} submitted").to_json()
    try:
        submitted = nbformat.read(nb_path, as_version=4)
        nbformat.validate(submitted)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets a status, not a crash
        return Result(student, day, "unreadable", 0.0, total,
                      detail=f"{Path(nb_path).name} is not a valid notebook: "
                             f"{type(exc).__name__}: {str(exc)[:300]}").to_json()
    sub_dir = root / "submitted" / student / day
    shutil.rmtree(sub_dir, ignore_errors=True)
    sub_dir.mkdir(parents=True)
    nbformat.write(submitted, str(sub_dir / notebook_name(day)))
    config = load_config(root, root / "gradebook.db")
    out_nb = root / "autograded" / student / day / notebook_name(day)
    shutil.rmtree(out_nb.parent, ignore_errors=True)
    try:
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "transformers-from-scratch") as gb:
            gb.update_or_create_student(student)
        _run_converter(Autograde, config, day, student)
    except Exception as exc:  # noqa: BLE001
        return Result(student, day, "error", 0.0, total,
                      detail=f"autograde failed: {type(exc).__name__}: {str(exc)[:500]}"
                      ).to_json()
    if not out_nb.is_file():
        return Result(student, day, "error", 0.0, total,
                      detail="nbgrader produced no autograded notebook").to_json()
    graded = nbformat.read(str(out_nb), as_version=4)
    tests = score_notebook(source_nb, graded)
    score = sum(t.points for t in tests)
    return Result(student, day, "graded", score, total, tests).to_json()


def grade(
    root: Path,
    submissions: Path,
    days: list[str] | None = None,
    students: list[str] | None = None,
    jobs: int | None = None,
    results_dir: Path | None = None,
    work: list[tuple[str, str, Path | None]] | None = None,
) -> list[Result]:
    """Autograde every (student, day) under ``submissions``; never abort on one bad notebook.

    ``work`` replaces the discovery of ``submissions`` with an explicit list of
    (student, day, notebook) jobs. Each result is written atomically to
    ``results_dir/<student>/<day>.json`` as soon as it is produced.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    days = resolve_days(root, days)
    if work is None:
        work = discover(submissions, days, students)
    days = sorted({d for _, d, _ in work})
    jobs = max(1, jobs or os.cpu_count() or 1)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="tfs-grade-") as tmp:
        template = Path(tmp) / "template"
        shutil.copytree(root / "source", template / "source",
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        generate(template, days, template / "gradebook.db", solutions=False)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(jobs, len(work)), mp_context=ctx,
                                 initializer=_worker_init,
                                 initargs=(str(template), str(root))) as pool:
            payload = [(s, d, str(p) if p else None) for s, d, p in work]
            for data in pool.map(grade_one, payload):
                result = Result.from_json(data)
                if results_dir is not None:
                    _atomic_write_json(results_dir / result.student / f"{result.day}.json", data)
                results.append(result)
    return results


def write_csv(results: list[Result], days: list[str], path: Path) -> None:
    """One row per student, one column per day (points), plus total and max."""
    import csv

    students = sorted({r.student for r in results})
    by_key = {(r.student, r.day): r for r in results}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", *days, "total", "max_total"])
        for s in students:
            row = [by_key.get((s, d)) for d in days]
            w.writerow([s, *(f"{r.score:g}" if r else "" for r in row),
                        f"{sum(r.score for r in row if r):g}",
                        f"{sum(r.max_score for r in row if r):g}"])
    os.replace(tmp, path)


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
            elif r.status != "graded":
                cells.append(f"{r.status:>{c}}")
            else:
                pct = 100.0 * r.score / r.max_score if r.max_score else 0.0
                cells.append(f"{pct:>{c - 1}.0f}%")
        lines.append("  ".join([f"{day:<{width}}", *cells]))
    return "\n".join(lines)
