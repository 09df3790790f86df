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
import hashlib
import json
import logging
import os
import shutil
import signal
import sys
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


def generate(root: Path, days: list[str], db_path: Path, solutions: bool = True,
             progress=None) -> None:
    """Run nbgrader's generate_assignment (and generate_solution) for ``days`` under ``root``.

    ``progress``: a :class:`autograder.console.Progress`, told of each day as it is done.
    """
    from nbgrader.api import Gradebook
    from nbgrader.converters import GenerateAssignment, GenerateSolution

    config = load_config(root, db_path)
    with Gradebook(f"sqlite:///{db_path}", "transformers-from-scratch") as gb:
        for day in days:
            gb.update_or_create_assignment(day)
    if progress is not None:
        progress.set_total(len(days))
    for day in days:
        _run_converter(GenerateAssignment, config, day)
        if solutions:
            _run_converter(GenerateSolution, config, day)
        if progress is not None:
            progress.item(day)
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


def build(root: Path, days: list[str] | None = None, progress=None) -> list[str]:
    """Generate ``release/`` and ``solutions/`` from ``source/`` in place. Returns the days."""
    days = resolve_days(root, days)
    for top in ("release", "solutions"):
        for day in days:
            shutil.rmtree(root / top / day, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="tfs-build-") as tmp:
        generate(root, days, Path(tmp) / "gradebook.db", progress=progress)
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

STATUSES = ("graded", "missing", "unreadable", "timeout", "memory-limit", "kernel-died",
            "tampered", "environment-error")


@dataclass
class TestResult:
    __test__ = False  # not a pytest class

    grade_id: str
    points: float
    max_points: float
    message: str = ""


@dataclass
class Result:
    """The outcome of grading one (student, day).

    ``status`` is one of :data:`STATUSES`. ``score`` is what the tests that ran earned, also
    for timeout/memory-limit/kernel-died/tampered (the status says why it needs a look).
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

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Result:
        known = {f for f in cls.__dataclass_fields__}
        data = {k: v for k, v in data.items() if k in known}
        data["tests"] = [TestResult(**t) for t in data.get("tests", [])]
        data["flags"] = list(data.get("flags", []))
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


def find_submitted_notebook(folder: Path, day: str) -> Path | None:
    """The notebook of ``day`` in a submission folder, tolerating a renamed single notebook
    (``day03_self_attention (1).ipynb``) and ignoring checkpoints."""
    exact = folder / notebook_name(day)
    if exact.is_file():
        return exact
    candidates = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if len(candidates) == 1:
        return candidates[0]
    close = [p for p in candidates if p.name.startswith(day)]
    if close:
        return max(close, key=lambda p: p.stat().st_mtime)
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
                          if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    if students:
        student_dirs = [p for p in student_dirs if p.name in students]
    if not student_dirs:
        raise PipelineError(f"no student folders in {submissions}")
    jobs = []
    for sdir in student_dirs:
        for day in days:
            ddir = sdir / day
            jobs.append((sdir.name, day, find_submitted_notebook(ddir, day)
                         if ddir.is_dir() and not ddir.is_symlink() else None))
    return jobs


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


# --------------------------------------------------------------------------- keys (resume)


def course_fingerprint(root: Path, day: str, settings: dict | None = None) -> str:
    """Hash of what decides a grade besides the submission: the day's source notebook, the
    grading library (autograder/checks, course/), nbgrader's configuration, the limits."""
    h = hashlib.sha256()
    files = sorted((root / "source" / day).rglob("*"))
    for sub in ("autograder/checks", "course"):
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


# --------------------------------------------------------------------------- one notebook

_WORKER: dict = {}

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


def _worker_setup(template: Path, course_root: Path, base: Path, sandbox: bool) -> Path:
    """A private course folder for this process: template copy, gradebook, kernelspec dir."""
    import warnings

    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(course_root), *filter(None, [os.environ.get("PYTHONPATH")])])
    work = Path(tempfile.mkdtemp(prefix=f"worker-{os.getpid()}-", dir=base))
    warnings.filterwarnings("ignore")
    shutil.copytree(template / "source", work / "source")
    shutil.copy2(template / "gradebook.db", work / "gradebook.db")
    if (template / "release").is_dir():
        shutil.copytree(template / "release", work / "release")
    (work / "jupyter" / "kernels").mkdir(parents=True)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(work / "jupyter"), *filter(None, [os.environ.get("JUPYTER_PATH")])])
    _WORKER.update(root=work, template=template, course_root=course_root, base=base,
                   sandbox=sandbox)
    return work


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


def _status_from(events: dict, graded: nbformat.NotebookNode, kernel_log: str
                 ) -> tuple[str, list[str]]:
    """The status of a notebook that nbgrader executed, and the reasons behind it."""
    mem_words = ("can't allocate memory", "cannot allocate memory", "not enough memory",
                 "out of memory", "std::bad_alloc", "memoryerror")
    mem = []
    for cell in graded.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") != "NotExecuted":
                text = f"{out.get('ename', '')}: {out.get('evalue', '')}"
                if any(w in text.lower() for w in mem_words):
                    mem.append(text[:200])
    if events.get("guard_memory"):
        mem.append("MemoryError while the grading guard ran")
    if (events.get("exit") or {}).get("oom"):
        mem.append("the kernel's cgroup reached its memory ceiling")
    notes = []
    if events.get("tamper"):
        return "tampered", list(events["tamper"])
    if events.get("kernel_died"):
        if any(w in kernel_log.lower() for w in mem_words):
            return "memory-limit", ["the kernel died when it ran out of memory"]
        if mem:
            # Out of address space, C code (zmq, a thread start) may crash instead of raising:
            # a death after a memory error is the memory limit's doing.
            return "memory-limit", [f"hit the memory limit ({mem[0]}), then the kernel died "
                                    f"({_exit_words(events.get('kernel_exit'))})"]
        return "kernel-died", ["the kernel died (os._exit, a crash, or the CPU-time limit); "
                               "cells after it were not run; "
                               + _exit_words(events.get("kernel_exit"))]
    if events.get("timeout"):
        return "timeout", ["a cell ran past its time limit and was interrupted"]
    if mem:
        return "memory-limit", [f"hit the memory limit: {mem[0]}"]
    texts = [f"{out.get('ename', '')}: {out.get('evalue', '')}" for cell in graded.cells
             for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    for words, note in LIMIT_NOTES:
        if any(w in t for t in texts for w in words):
            notes.append(note)
    if events.get("output_truncated"):
        notes.append("output truncated: the notebook printed more than the limit")
    return "graded", notes


def grade_one(job: dict) -> dict:
    """Autograde one submission in this worker's course folder; returns a Result as JSON plus
    ``_notebook`` (the autograded notebook's text) when nbgrader produced one."""
    import time

    from nbgrader.converters import Autograde

    from autograder import execute, sandbox
    from autograder.judge import is_judged

    t0 = time.monotonic()
    student, day, nb_path = job["student"], job["day"], job["path"]
    settings = job["settings"]
    root: Path = _WORKER["root"]
    source_nb = nbformat.read(str(root / "source" / day / notebook_name(day)), as_version=4)
    total = sum(p for _, p in graded_cells(source_nb))
    sandboxed = bool(settings.get("sandbox"))

    def done(status, score=0.0, tests=(), detail="", flags=(), notebook=None):
        data = Result(student, day, status, score, total, list(tests), detail,
                      job.get("key", ""), round(time.monotonic() - t0, 2), sandboxed,
                      list(flags)).to_json()
        if notebook is not None:
            data["_notebook"] = notebook
        return data

    if nb_path is None:
        return done("missing", detail=f"no {notebook_name(day)} submitted")
    cap = settings.get("max_notebook_bytes", 50 * 1024 * 1024)
    try:
        if Path(nb_path).is_symlink() or not Path(nb_path).is_file():
            raise ValueError("it is a link or not a regular file; only plain files are graded")
        raw = sandbox.read_capped(Path(nb_path), cap + 1)
        if len(raw) > cap:
            raise ValueError(f"the file is larger than {cap / 1e6:.0f} MB, the limit")
        submitted = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(submitted)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets a status, not a crash
        return done("unreadable", detail=f"{Path(nb_path).name} is not a valid notebook: "
                                         f"{type(exc).__name__}: {str(exc)[:300]}")
    # a notebook of another day in this day's folder
    own = {g for g, _ in graded_cells(source_nb)}
    ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in submitted.cells}
    ids.discard(None)
    if ids and not ids & own:
        other = sorted({i.split("_")[0] for i in ids if i.startswith("day")})
        owner = ", ".join(other) or "another notebook"
        return done("missing", detail=f"{Path(nb_path).name} in {day}/ is not the {day} "
                                      f"notebook (its cells belong to {owner}); "
                                      "nothing was graded for this day")
    # a test cell pasted twice: nbgrader rejects duplicate grade ids; keep the first copy
    seen: set[str] = set()
    kept, dup_flags = [], []
    for cell in submitted.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid and gid in seen:
            dup_flags.append(f"a second copy of cell {gid} was ignored")
            continue
        if gid:
            seen.add(gid)
        kept.append(cell)
    submitted.cells = kept
    # nbgrader metadata the course never gave (a "read-only" cell of the learner's making)
    # makes the cell the learner's own: nbgrader would reject the notebook, and a scan that
    # trusts the metadata would skip the cell.
    course_ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                  for c in source_nb.cells} - {None}
    for i, cell in enumerate(submitted.cells, 1):
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is not None and meta.get("grade_id") not in course_ids:
            del cell.metadata["nbgrader"]
            dup_flags.append(f"cell {i} carried nbgrader metadata the course never gave "
                             "(treated as the learner's own cell)")
    try:
        from nbgrader.nbgraderformat import MetadataValidator

        MetadataValidator().validate_nb(submitted)
    except Exception as exc:  # noqa: BLE001 - nbgrader would refuse it: say so, per student
        return done("unreadable", detail=f"{Path(nb_path).name}: its nbgrader cell metadata "
                                         f"is corrupted: {str(exc)[:300]}")
    release = None
    rel_path = root / "release" / day / notebook_name(day)
    if rel_path.is_file():
        release = nbformat.read(str(rel_path), as_version=4)
    static = scan_for_tampering(submitted, release) if settings.get("tamper", True) else []

    sub_dir = root / "submitted" / student / day
    out_dir = root / "autograded" / student / day
    shutil.rmtree(sub_dir, ignore_errors=True)
    shutil.rmtree(out_dir, ignore_errors=True)  # nbgrader skips an existing one
    sub_dir.mkdir(parents=True)
    nbformat.write(submitted, str(sub_dir / notebook_name(day)))
    # A fresh private folder per submission, host-only: kernel.log, the sandbox's pid and exit
    # status, the start-up script. The kernel writes only inside its own tmpfs.
    from autograder.kernel_startup import STARTUP

    private = Path(tempfile.mkdtemp(prefix="kernel-", dir=root))
    shutil.rmtree(private)
    sandbox.prepare_private(private, STARTUP)
    # The Python environment, read-only; a venv inside the instructor's checkout is shown at
    # a neutral path (/tmp/.venv), so that no path of the checkout reaches the kernel.
    python = sys.executable
    exe_prefix = str(Path(os.path.realpath(sys.executable)).parent.parent)
    ro = [[p, p] for p in dict.fromkeys([sys.base_prefix, exe_prefix])]
    course_root = Path(_WORKER["course_root"]).resolve()
    if sandboxed and sys.prefix != sys.base_prefix and \
            Path(sys.prefix).resolve().is_relative_to(course_root):
        ro.append([sys.prefix, sandbox.INNER_VENV])
        python = sandbox.INNER_VENV + sys.executable[len(sys.prefix):]
    elif sys.prefix not in (sys.base_prefix, exe_prefix):
        ro.append([sys.prefix, sys.prefix])
    kenv = sandbox.kernel_environment(private, sandboxed, python)
    kenv["TFS_DAY"] = day
    kenv["TFS_MAX_OUTPUT"] = str(settings["limits"]["output"])
    kenv["NBGRADER_EXECUTION"] = "autograde"
    hide = [str(_WORKER["course_root"]), str(_WORKER["base"]), str(Path.home()),
            *settings.get("hide", [])]
    bundle = None
    if sandboxed:
        ro.append([str(Path(_WORKER["course_root"]) / "course"), f"{sandbox.INNER_LIB}/course"])
        binds, data_env = sandbox.dataset_binds()
        ro += binds
        kenv.update(data_env)
        if not is_judged(day):  # a judged day's checks never enter the kernel
            bundle = str(_WORKER["template"] / "hidden.json")
        os.environ["TFS_KERNEL_PRIVATE"] = str(private)
    else:
        kenv["PYTHONPATH"] = str(_WORKER["course_root"])
        for var in ("COURSE_DATA_DIR", "COURSE_CACHE_DIR"):
            if os.environ.get(var):
                kenv[var] = os.environ[var]
        os.environ.pop("TFS_KERNEL_PRIVATE", None)
    spec = sandbox.Spec(sandbox=sandboxed, limits=settings["limits"], private=str(private),
                        startup=str(private / "ipython/profile_default/startup"
                                    / sandbox.STARTUP_NAME),
                        hide=hide, ro_bind=ro, bundle=bundle, env=kenv,
                        cgroup_parent=settings.get("cgroup_parent"))
    spec_path = private / "spec.json"
    spec_path.write_text(json.dumps(spec.__dict__))
    sandbox.write_kernelspec(root / "jupyter" / "kernels", "tfs-graded", spec_path, python)
    os.environ["JUPYTER_RUNTIME_DIR"] = str(private / "runtime")

    config = load_config(root, root / "gradebook.db")
    lim = settings["limits"]
    config.Autograde.autograde_preprocessors = [
        execute.GuardedExecute if p.__name__ == "Execute" else p
        for p in Autograde.class_traits()["autograde_preprocessors"].default()]
    config.GuardedExecute.timeout = lim["cell_timeout"]
    config.GuardedExecute.notebook_timeout = lim["notebook_timeout"]
    config.GuardedExecute.max_output = lim["output"]
    config.GuardedExecute.use_guard = 1 if settings.get("tamper", True) else 0
    config.GuardedExecute.judge_day = day if is_judged(day) else ""
    config.GuardedExecute.kernel_name = "tfs-graded"
    config.GuardedExecute.startup_timeout = 120
    config.GuardedExecute.interrupt_on_timeout = True
    config.GuardedExecute.raise_on_iopub_timeout = False
    config.GuardedExecute.iopub_timeout = 15
    # widget state (comm messages) counts against the same output budget as everything else
    config.KernelManager.transport = "ipc"
    execute.reset_events()
    try:
        return _autograde(config, root, student, day, private, out_dir, source_nb, static,
                          dup_flags, settings, sandboxed, done, _own_code(submitted, release))
    finally:
        shutil.rmtree(private, ignore_errors=True)
        os.environ.pop("TFS_KERNEL_PRIVATE", None)


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


def _autograde(config, root, student, day, private, out_dir, source_nb, static, dup_flags,
               settings, sandboxed, done, own_code) -> dict:
    """Run nbgrader's autograde on the written submission and turn its outcome into a result.

    Everything read here after the kernel ran is host-only: the autograded notebook (nbgrader
    wrote it in the worker's folder, which the sandbox never shows), and the private folder's
    log and exit record, read without following links and with a size cap.
    """
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde

    from autograder import execute, sandbox

    try:
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "transformers-from-scratch") as gb:
            gb.update_or_create_student(student)
        _run_converter(Autograde, config, day, student)
    except Exception as exc:  # noqa: BLE001
        log = _tail(private / "kernel.log")
        return done("environment-error",
                    detail=f"autograde failed: {type(exc).__name__}: {str(exc)[:400]}"
                           + (f"; kernel log: {log}" if log else ""))
    finally:
        if settings.get("cgroup_parent"):
            sandbox.cleanup_cgroups(settings["cgroup_parent"])
    out_nb = out_dir / notebook_name(day)
    limit = settings["limits"]["output"] * 4 + 4 * 1024 * 1024
    text = sandbox.read_capped(out_nb, limit + 1).decode("utf-8", "replace")
    if not text:
        return done("environment-error", detail="nbgrader produced no autograded notebook; "
                    "kernel log: " + _tail(private / "kernel.log"))
    if len(text) > limit:
        return done("environment-error", detail="the autograded notebook is larger than "
                    f"{limit // 1024**2} MiB despite the output cap")
    graded = nbformat.reads(text, as_version=4)
    tests = score_notebook(source_nb, graded)
    events = dict(execute.EVENTS)
    judged = bool(events.get("judged"))
    review = []
    if judged:
        from autograder.judge import static_review

        tests = _gate(tests, events["judged"])
        # Judged outside the kernel, a tampered kernel cannot earn a value check: what the
        # static scans find is for the instructor's eyes, not a reason to withhold points.
        forbidden = sorted({f for v in events["judged"].values() if v["passed"]
                            for f in v["forbidden"]})
        review = [f"review: {f}" for f in static + static_review(own_code, forbidden)]
        static = []
    score = sum(t.points for t in tests)
    events["tamper"] = static + list(events.get("tamper", []))
    try:
        events["exit"] = json.loads(sandbox.read_capped(private / "exit.json", 4096) or b"{}")
    except ValueError:
        events["exit"] = {}
    status, flags = _status_from(events, graded, _tail(private / "kernel.log", 4000))
    flags += dup_flags + review
    detail = "; ".join(flags[:5])
    if settings.get("tamper", True) and not events.get("guard") and not judged and any(
            True for _ in graded_cells(source_nb)) and status == "graded" and sandboxed:
        flags.append("the grading guard never ran")
    return done(status, score, tests, detail, flags, text)


def _gate(tests: list[TestResult], verdicts: dict) -> list[TestResult]:
    """Withhold the points of observed checks whose names failed a value check."""
    from autograder.judge import Verdict, gate

    unpaid = gate({gid: Verdict(**v) for gid, v in verdicts.items()})
    return [TestResult(t.grade_id, 0.0, t.max_points, unpaid[t.grade_id])
            if t.grade_id in unpaid else t for t in tests]


def _tail(path: Path, n: int = 600) -> str:
    """The end of a host-only log, never through a link, never more than ``n`` bytes."""
    from autograder.sandbox import read_capped

    return read_capped(path, n, tail=True).decode("utf-8", "replace").strip()


# --------------------------------------------------------------------------- worker pool


def _worker_main(conn, template: str, course_root: str, base: str, sandbox: bool) -> None:
    """A grading process: set up once, then grade jobs sent over ``conn`` until None."""
    log = os.open(Path(base) / f"worker-{os.getpid()}.log",
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)
    os.dup2(log, 1)
    try:
        _worker_setup(Path(template), Path(course_root), Path(base), sandbox)
    except Exception as exc:  # noqa: BLE001
        conn.send({"_setup_error": f"{type(exc).__name__}: {exc}"})
        return
    conn.send({"_ready": os.getpid()})
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            data = grade_one(job)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the batch
            import traceback

            data = Result(job["student"], job["day"], "environment-error", 0.0,
                          job.get("total", 0.0),
                          detail=f"grading crashed: {type(exc).__name__}: {exc}; "
                                 + traceback.format_exc()[-600:],
                          key=job.get("key", "")).to_json()
        conn.send(data)


def _log_tails(base: Path, chars: int = 1500) -> str:
    """The last ``chars`` characters of each worker log in ``base`` (which is about to be
    removed with the batch's temporary folder), newest first, at most three logs."""
    logs = sorted(base.glob("worker-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    parts = []
    for log in logs[:3]:
        text = log.read_text(errors="replace").strip()
        parts.append(f"--- {log.name}\n{text[-chars:] or '(empty)'}")
    return "\n".join(parts) or "(no worker wrote a log)"


class _Pool:
    """Worker processes with a hard deadline per job; a dead or stuck worker is replaced and
    its submission gets a status instead of aborting the batch."""

    def __init__(self, n: int, template: Path, course_root: Path, base: Path, sandbox: bool,
                 hard_timeout: float):
        import multiprocessing

        self.ctx = multiprocessing.get_context("spawn")
        self.args = (str(template), str(course_root), str(base), sandbox)
        self.hard_timeout = hard_timeout
        self.failed_starts = 0
        self.workers: list[dict] = [self._spawn() for _ in range(n)]

    def _spawn(self) -> dict:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main, args=(child, *self.args), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "job": None, "since": 0.0, "ready": False}

    def _kill(self, w: dict) -> None:
        try:
            os.kill(w["proc"].pid, signal.SIGKILL)
        except OSError:
            pass
        w["proc"].join(5)
        w["conn"].close()

    def run(self, jobs: list[dict]) -> Iterator[dict]:
        import time
        from multiprocessing.connection import wait

        todo = list(jobs)
        retries: dict[int, int] = {}
        pending = len(todo)
        while pending:
            for w in self.workers:
                if w["ready"] and w["job"] is None and todo:
                    w["job"] = todo.pop(0)
                    w["since"] = time.monotonic()
                    w["conn"].send(w["job"])
            waitables = {}
            for w in self.workers:
                waitables[w["conn"]] = w
                waitables[w["proc"].sentinel] = w
            ready = wait(list(waitables), timeout=2.0)
            now = time.monotonic()
            for i, w in enumerate(list(self.workers)):
                msg = None
                dead = False
                if w["conn"] in ready:
                    try:
                        msg = w["conn"].recv()
                    except (EOFError, OSError):
                        dead = True
                elif w["proc"].sentinel in ready:
                    dead = True
                if msg is not None:
                    if "_ready" in msg:
                        w["ready"] = True
                        continue
                    if "_setup_error" in msg:
                        raise PipelineError("a grading worker could not start: "
                                            + msg["_setup_error"])
                    w["job"] = None
                    pending -= 1
                    yield msg
                    continue
                job = w["job"]
                stuck = job is not None and now - w["since"] > self.hard_timeout
                if dead or stuck:
                    if not w["ready"]:
                        self.failed_starts += 1
                        if self.failed_starts > 2 * len(self.workers) + 2:
                            raise PipelineError(
                                "grading workers keep dying while they start (exit code "
                                f"{w['proc'].exitcode}); the end of their logs:\n"
                                + _log_tails(Path(self.args[2])))
                    self._kill(w)
                    self.workers[i] = self._spawn()
                    if job is None:
                        continue
                    jid = id(job)
                    if dead and retries.get(jid, 0) < 1:
                        retries[jid] = retries.get(jid, 0) + 1
                        todo.insert(0, job)
                        continue
                    pending -= 1
                    status = "timeout" if stuck else "environment-error"
                    why = (f"grading took longer than {self.hard_timeout:.0f} s; the worker "
                           "was stopped" if stuck else
                           f"the grading process died (exit code {w['proc'].exitcode}) twice")
                    yield Result(job["student"], job["day"], status, 0.0,
                                 job.get("total", 0.0), detail=why,
                                 key=job.get("key", "")).to_json()

    def close(self) -> None:
        for w in self.workers:
            try:
                w["conn"].send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self.workers:
            w["proc"].join(10)
            if w["proc"].is_alive():
                self._kill(w)


# --------------------------------------------------------------------------- batch


def sandbox_mode(sandbox: bool | str) -> bool:
    """Resolve ``sandbox`` (True: required, False: off, "auto": when bubblewrap works).

    Raises:
        PipelineError: the sandbox is required and bubblewrap cannot run here.
    """
    from autograder import sandbox as sb

    if sandbox == "auto":
        return sb.available()[0]
    if sandbox:
        ok, why = sb.available()
        if not ok:
            raise PipelineError(
                f"refusing to run submissions without a sandbox: {why}. Student code could "
                "read the hidden tests and the gradebook, change other students' work, or "
                "use the network. Install bubblewrap, or pass --no-sandbox to grade trusted "
                "notebooks without one.")
        return True
    return False


def prepare_template(root: Path, days: list[str], template: Path) -> None:
    """A course folder holding only what grading needs: source/, release/, the gradebook with
    the days' test cells, and the bundle of hidden grading modules."""
    from autograder.kernel_startup import hidden_bundle

    shutil.copytree(root / "source", template / "source",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    generate(template, days, template / "gradebook.db", solutions=False)
    hidden_bundle(root, template / "hidden.json")


def template_cache(root: Path, days: list[str]) -> Path:
    """A generated grading template for ``days``, made once per version of the course.

    Like an instructor's one-off ``nbgrader generate_assignment``: kept in
    ``$TFS_GRADING_CACHE`` (default ``~/.cache/transformers-from-scratch-grading``, apart
    from the dataset cache; the sandbox shows neither), keyed by the course fingerprint of
    each day.
    """
    base = Path(os.environ.get("TFS_GRADING_CACHE") or
                Path.home() / ".cache" / "transformers-from-scratch-grading")
    key = hashlib.sha256(json.dumps(
        [course_fingerprint(root, d) for d in sorted(days)]).encode()).hexdigest()[:20]
    target = base / key
    if (target / "hidden.json").is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=base))
    prepare_template(root, sorted(days), tmp / "t")
    try:
        os.replace(tmp / "t", target)
    except OSError:
        pass  # another run made it first
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def _settings(sandboxed: bool, limits, tamper: bool) -> dict:
    from autograder.sandbox import Limits, default_cgroup_parent

    lim = limits if limits is not None else Limits()
    return {"sandbox": sandboxed, "limits": lim.to_json(), "tamper": tamper,
            "cgroup_parent": default_cgroup_parent() if sandboxed else None}


def grade(
    root: Path,
    submissions: Path,
    days: list[str] | None = None,
    students: list[str] | None = None,
    jobs: int | None = None,
    results_dir: Path | None = None,
    work: list[tuple[str, str, Path | None]] | None = None,
    *,
    sandbox: bool | str = "auto",
    limits=None,
    tamper: bool = True,
    resume: bool = True,
    dask_scheduler: str | None = None,
    progress=None,
    collect_problems: list[str] | None = None,
) -> list[Result]:
    """Autograde every (student, day) under ``submissions``; never abort on one bad notebook.

    ``work`` replaces the discovery of ``submissions`` with an explicit list of
    (student, day, notebook) jobs. Each result is written atomically to
    ``results_dir/<student>/<day>.json`` (and the autograded notebook next to it as
    ``<day>.ipynb``) as soon as it is produced. With ``resume``, a result already there whose
    key (hash of the submitted notebook and the course's grading material) matches is reused.

    ``sandbox``: True requires bubblewrap (PipelineError otherwise), False runs kernels
    directly, "auto" uses bubblewrap when it works. ``limits``: a ``sandbox.Limits``.
    ``dask_scheduler``: send each submission to that Dask cluster instead of local workers.
    ``progress``: called with each Result as it arrives. ``collect_problems``: gets the files
    of a zip that could not be filed under one student unambiguously (left ungraded).
    """
    days = resolve_days(root, days)
    if work is None:
        if submissions.suffix == ".zip" and submissions.is_file():
            from autograder.collect import unzip_submissions

            tmp_subs = Path(tempfile.mkdtemp(prefix="tfs-unzip-"))
            submissions = unzip_submissions(submissions, tmp_subs, days, collect_problems)
        work = discover(submissions, days, students)
    days = sorted({d for _, d, _ in work})
    sandboxed = sandbox_mode(sandbox)
    settings = _settings(sandboxed, limits, tamper)
    hide = [str(Path(submissions).resolve())] if submissions else []
    if os.environ.get("TFS_GRADING_CACHE"):
        hide.append(str(Path(os.environ["TFS_GRADING_CACHE"]).resolve()))
    if results_dir is not None:
        hide.append(str(Path(results_dir).resolve()))
    hide += sorted({str(Path(p).resolve().parent.parent.parent) for _, _, p in work if p})
    fingerprints = {d: course_fingerprint(root, d, settings) for d in days}
    settings["hide"] = sorted(set(hide))
    totals = {d: max_score(root, d) for d in days}

    if progress is not None and hasattr(progress, "set_total"):
        progress.set_total(len(work))
    results: dict[tuple[str, str], Result] = {}
    todo: list[dict] = []
    for student, day, path in work:
        key = submission_key(path, fingerprints[day])
        if resume and results_dir is not None:
            old = results_dir / student / f"{day}.json"
            if old.is_file():
                try:
                    prev = Result.from_json(json.loads(old.read_text(encoding="utf-8")))
                except (ValueError, TypeError, KeyError):
                    prev = None
                if prev and prev.key == key and prev.status != "environment-error":
                    results[(student, day)] = prev
                    if progress:
                        progress(prev)
                    continue
        todo.append({"student": student, "day": day, "path": str(path) if path else None,
                     "key": key, "total": totals[day], "settings": settings})

    def record(data: dict) -> Result:
        notebook = data.pop("_notebook", None)
        result = Result.from_json(data)
        if results_dir is not None:
            if notebook is not None:
                _atomic_write_text(results_dir / result.student / f"{result.day}.ipynb",
                                   notebook)
            _atomic_write_json(results_dir / result.student / f"{result.day}.json",
                               result.to_json())
        results[(result.student, result.day)] = result
        if progress:
            progress(result)
        return result

    # cheap statuses need no worker
    quick = [j for j in todo if j["path"] is None]
    todo = [j for j in todo if j["path"] is not None]
    for j in quick:
        record(Result(j["student"], j["day"], "missing", 0.0, j["total"],
                      detail=f"no {notebook_name(j['day'])} submitted", key=j["key"],
                      sandboxed=sandboxed).to_json())
    if todo:
        lim = settings["limits"]
        with tempfile.TemporaryDirectory(prefix="tfs-grade-") as tmp:
            template = template_cache(root, days)
            if dask_scheduler:
                from autograder.distributed import grade_on_cluster

                for data in grade_on_cluster(dask_scheduler, template, todo):
                    record(data)
            else:
                n = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
                pool = _Pool(n, template, root, Path(tmp), sandboxed,
                             hard_timeout=lim["notebook_timeout"] + 240)
                try:
                    for data in pool.run(todo):
                        record(data)
                finally:
                    pool.close()
    order = {(s, d): i for i, (s, d, _) in enumerate(work)}
    return sorted(results.values(), key=lambda r: order.get((r.student, r.day), 0))


def write_csv(results: list[Result], days: list[str], path: Path,
              accepted: set[tuple[str, str, str]] | None = None) -> None:
    """One row per student, one column per day (points), plus total and max.

    A ``tampered`` result pays 0 unless ``accepted`` holds its (student, day, key)
    (:mod:`autograder.acceptance`; ``python -m autograder accept``).
    """
    import csv

    from autograder.acceptance import paid

    accepted = accepted or set()
    students = sorted({r.student for r in results})
    by_key = {(r.student, r.day): r for r in results}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student_id", *days, "total", "max_total"])
        for s in students:
            row = [by_key.get((s, d)) for d in days]
            w.writerow([s, *(f"{paid(r, accepted):g}" if r else "" for r in row),
                        f"{sum(paid(r, accepted) for r in row if r):g}",
                        f"{sum(r.max_score for r in row if r):g}"])
    os.replace(tmp, path)


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
            elif r.status != "graded":
                cells.append(f"{r.status:>{c}}")
            else:
                pct = 100.0 * r.score / r.max_score if r.max_score else 0.0
                cells.append(f"{pct:>{c - 1}.0f}%")
        lines.append("  ".join([f"{day:<{width}}", *cells]))
    return "\n".join(lines)
