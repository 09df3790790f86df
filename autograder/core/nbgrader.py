"""nbgrader, driven with the course's configuration (``core/nbgrader_config.py``): the
converters that build release/ and solutions/ (``autograder.authoring.build``) and autograde a
submission (``autograder.grading.worker``) run through :func:`_run_converter`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import nbformat  # autograder/__init__.py has marked rfc3987_syntax absent (0.75 s)

from autograder.core.course import PipelineError

CONFIG_FILE = Path(__file__).with_name("nbgrader_config.py")


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
