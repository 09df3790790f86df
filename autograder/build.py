"""The course as nbgrader sees it: where it lives, its days, and release/ + solutions/.

Everything here drives nbgrader's own converters (GenerateAssignment, GenerateSolution) with
the configuration in ``autograder/nbgrader_config.py``: ``build`` regenerates the committed
student notebooks and answer keys, ``check_sync`` proves they match ``source/``.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat  # autograder/__init__.py has marked rfc3987_syntax absent (0.75 s)

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
    errors = _ErrorLog()
    converter.log.addHandler(errors)
    try:
        with _quiet_logs():
            converter.start()
    except Exception as exc:
        # nbgrader logs what went wrong and raises "Please see the above traceback": keep
        # the logged error with the exception, so the result's detail says what it was.
        if errors.last:
            raise PipelineError(f"{exc} {errors.last[-800:]}") from exc
        raise
    finally:
        converter.log.removeHandler(errors)


class _ErrorLog(logging.Handler):
    """Keeps the last ERROR a converter logged, preferring one with a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage() + (
            "\n" + logging.Formatter().formatException(record.exc_info)
            if record.exc_info else "")
        if "Traceback" in text or "Traceback" not in self.last:  # the traceback is the news
            self.last = text


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
