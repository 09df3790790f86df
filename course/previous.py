"""Reuse what a learner built on an earlier day: ``load_previous``.

Day 6 needs Day 4's ``MultiHeadSelfAttention``; Day 7 needs Day 5's positional encoding and
Day 6's encoder layer. Rather than asking learners to paste old code, a notebook writes::

    MultiHeadSelfAttention = load_previous("day04_multi_head_attention", "MultiHeadSelfAttention")

In a learner's own notebook this reads the learner's earlier notebook from the sibling folder
(``../day04_multi_head_attention/day04_multi_head_attention.ipynb``, next to today's folder),
runs only its import lines and its answer cells (never its tests, plots or training) in a fresh
module, and returns the named objects. Each object must pass the day's quick visible check; if
the notebook is missing, the answer still raises ``NotImplementedError``, or the check fails,
one line says so and the course's stand-in from :mod:`course.standins` is returned instead, so
a learner stuck on Day 4 can still do Day 6.

While nbgrader grades a notebook (it sets ``NBGRADER_EXECUTION``) the stand-ins are always
used: each day is graded on that day's code only, deterministically. ``COURSE_USE_STANDINS=1``
asks for the same behaviour by hand.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

__all__ = ["load_previous", "SELF_CHECKS"]

# The quick check an object must pass to be used: {(assignment, name): "module:function"}.
# These are the visible checks of each day; a missing module means "no check".
SELF_CHECKS: dict[tuple[str, str], str] = {
    ("day02_queries_keys_values", "scaled_dot_product_attention"):
        "course.checks.day02:check_attention",
    ("day04_multi_head_attention", "MultiHeadSelfAttention"): "course.checks.day04:check_mha",
    ("day05_positional_encoding", "SinusoidalPositionalEncoding"):
        "course.checks.day05:check_sinusoidal",
    ("day05_positional_encoding", "LearnedPositionalEncoding"):
        "course.checks.day05:check_learned",
    ("day06_encoder_layer", "FeedForward"): "course.checks.day06:check_feed_forward",
    ("day06_encoder_layer", "LayerNorm"): "course.checks.day06:check_layer_norm",
    ("day06_encoder_layer", "TransformerEncoderLayer"): "course.checks.day06:check_encoder_layer",
    ("day07_transformer_classifier", "TransformerClassifier"):
        "course.checks.day07:check_classifier",
    ("day08_mnist_as_sequences", "SequenceClassifier"): "course.checks.day08:check_classifier",
    ("day09_training_loop", "train_one_epoch"): "course.checks.day09:check_train_one_epoch",
    ("day09_training_loop", "evaluate"): "course.checks.day09:check_evaluate",
    ("day09_training_loop", "warmup_cosine_schedule"):
        "course.checks.day09:check_warmup_cosine_schedule",
    # Days 13-14 need a TinyGPT that runs and is causal; its exact size is Day 12's business.
    ("day12_causal_attention_tinygpt", "TinyGPT"): "course.checks.day12:check_tinygpt_runs",
}

_CACHE: dict[tuple[str, int], dict[str, Any]] = {}
_LOADING: set[str] = set()


def _say(message: str) -> None:
    # Loads nested inside an earlier notebook (Day 6 loading Day 4 for Day 7) stay quiet: the
    # outer object's own quick check decides whether it is used.
    if not _LOADING:
        print(f"load_previous: {message}")


def _use_standins() -> bool:
    return bool(os.environ.get("NBGRADER_EXECUTION")) or os.environ.get(
        "COURSE_USE_STANDINS", "").strip().lower() in ("1", "true", "yes")


def _standin(day: str, name: str) -> Any:
    # Imported here, not with the module: a fork server that preloads the course's helpers
    # must not import the stand-ins before a kernel's own folder of them exists.
    from course import standins

    try:
        return standins.STANDINS[day][name]
    except KeyError:
        known = ", ".join(f"{d}.{n}" for d, names in standins.STANDINS.items() for n in names)
        raise LookupError(
            f"the course has no stand-in for {name} of {day}; stand-ins exist for: {known}"
        ) from None


def _notebook_path(day: str, folder: str | os.PathLike | None) -> Path:
    base = Path(folder) if folder is not None else Path.cwd().parent
    return base / day / f"{day}.ipynb"


def _keep_statement(node: ast.stmt) -> bool:
    """Lines of a non-answer cell that definitions may depend on: imports, constants,
    and other ``load_previous`` calls."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
        value = node.value
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id == "load_previous"):
            return True
        try:
            ast.literal_eval(value)
            return True
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
    return False


def _without_magics(source: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


def _read_cells(path: Path) -> list[dict]:
    """The cells of a notebook file (nbformat 4 JSON), each ``source`` joined into one string.

    Plain JSON, not nbformat: importing nbformat pulls in jsonschema's format checkers, about
    a second of every notebook's imports cell on a 2-core machine.

    Raises:
        ValueError: the file is not a notebook's JSON.
    """
    data = json.loads(path.read_text(encoding="utf-8"))
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise ValueError(f"{path.name} is not a notebook (no list of cells)")
    out = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        source = cell.get("source", "")
        out.append({**cell, "source": "".join(source) if isinstance(source, list) else
                    str(source)})
    return out


def _cell_programs(cells: list[dict]) -> list[tuple[str, str]]:
    """(label, code) to run: import lines of ordinary cells, and whole answer cells."""
    programs: list[tuple[str, str]] = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        label = meta.get("grade_id") or cell.get("id") or f"cell {index}"
        source = _without_magics(cell["source"])
        if meta.get("solution"):
            programs.append((label, source))
        elif meta.get("grade"):
            continue  # tests
        else:
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            kept = [node for node in tree.body if _keep_statement(node)]
            if kept:
                programs.append((label, ast.unparse(ast.Module(body=kept, type_ignores=[]))))
    return programs


def _execute(path: Path, day: str) -> tuple[dict[str, Any], str]:
    """Run the notebook's imports and answers in a fresh module; (namespace, first error)."""
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    if key in _CACHE:
        return _CACHE[key], ""
    if key[0] in _LOADING:
        raise RecursionError(f"{path.name} loads itself through load_previous")
    _LOADING.add(key[0])
    try:
        cells = _read_cells(path)
        module = types.ModuleType(f"course._previous_{day}", f"answers of {path}")
        module.__file__ = str(path)
        sys.modules[module.__name__] = module   # so classes defined there can be pickled
        namespace = module.__dict__
        first_error = ""
        for label, code in _cell_programs(cells):
            try:
                exec(compile(code, f"{path.name}:{label}", "exec"), namespace)  # noqa: S102
            except Exception as exc:  # noqa: BLE001 - a broken cell must not stop today's work
                first_error = first_error or f"cell {label} raised {type(exc).__name__}: {exc}"
    finally:
        _LOADING.discard(key[0])
    _CACHE[key] = namespace
    return namespace, first_error


def _first_line(text: str) -> str:
    line = next((s for s in str(text).splitlines() if s.strip()), "")
    return line if len(line) <= 160 else line[:157] + "..."


def _raised_not_implemented(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, NotImplementedError) or "NotImplementedError" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _self_check(day: str, name: str, obj: Any) -> str:
    """'' when ``obj`` passes its day's quick check (or none exists), else the reason."""
    target = SELF_CHECKS.get((day, name))
    if target is None:
        return ""
    module_name, func_name = target.split(":")
    try:
        check = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError):
        return ""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            check(obj)
    except Exception as exc:  # noqa: BLE001 - CheckFailure or anything the learner's code raised
        if _raised_not_implemented(exc):
            return "it still raises NotImplementedError"
        return f"it failed a quick check: {_first_line(str(exc))}"
    return ""


def load_previous(day: str, *names: str, folder: str | os.PathLike | None = None,
                  notebook: str | os.PathLike | None = None) -> Any:
    """The objects ``names`` from the learner's notebook of ``day``, or the course's stand-ins.

    Args:
        day: the assignment that defines them, e.g. ``"day04_multi_head_attention"``.
        *names: one or more names defined in that notebook's answer cells.
        folder: the folder holding the day folders (default: the parent of the working
            directory, i.e. the folder next to today's notebook folder).
        notebook: the notebook file itself, instead of ``folder/day/day.ipynb``.

    Returns:
        The object itself for one name, a tuple for several (in the order asked).

    Raises:
        LookupError: when a name can be found neither in the notebook nor among the
            stand-ins.
    """
    if not names:
        raise TypeError("load_previous needs at least one name, e.g. "
                        "load_previous('day04_multi_head_attention', 'MultiHeadSelfAttention')")
    if _use_standins():
        found = [_standin(day, n) for n in names]
        why = ("nbgrader is grading this notebook" if os.environ.get("NBGRADER_EXECUTION")
               else "COURSE_USE_STANDINS is set")
        _say(f"{why}: using the course's stand-in {', '.join(names)} from {day}, so that "
             "today's notebook is graded on today's code only.")
        return found[0] if len(found) == 1 else tuple(found)

    path = Path(notebook) if notebook is not None else _notebook_path(day, folder)
    namespace: dict[str, Any] = {}
    problem_all = ""
    if not path.is_file():
        problem_all = f"no notebook at {path}"
    else:
        try:
            namespace, first_error = _execute(path, day)
        except Exception as exc:  # noqa: BLE001 - the learner's notebook may raise anything: reported
            problem_all = f"{path.name} could not be read or run ({type(exc).__name__}: {exc})"
            first_error = ""
    found = []
    for name in names:
        obj = namespace.get(name)
        if problem_all:
            problem = problem_all
        elif obj is None:
            problem = f"{path.name} defines no {name}" + (
                f" ({_first_line(first_error)})" if first_error else "")
        else:
            problem = _self_check(day, name, obj)
        if problem:
            try:
                standin = _standin(day, name)
            except LookupError as exc:
                raise LookupError(f"{name} from {day}: {problem}, and {exc}") from None
            _say(f"{name} from {day}: {problem}; using the course's stand-in instead.")
            found.append(standin)
        else:
            _say(f"using your {name} from {path} (it passed the quick check).")
            found.append(obj)
    return found[0] if len(found) == 1 else tuple(found)
