"""Where the course lives and what its days are: the one place every package asks.

``find_root`` finds the repository (the folder holding ``source/`` and ``autograder/``),
``list_days``/``resolve_days`` name its assignments, ``notebook_name`` the notebook of each.
``day_title`` and ``test_map`` give the readable names of a day and of its hidden tests (what
learners and instructors read in reports). ``PipelineError`` is the error a user can fix,
raised across the packages.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path


class PipelineError(Exception):
    """A problem the user can fix (unknown day, missing notebook...); the message says how."""


# --------------------------------------------------------------------------- course layout


def find_root(start: Path | None = None) -> Path:
    """The course root: the nearest folder above ``start`` (default: cwd) holding ``source/``.

    Raises:
        PipelineError: when no such folder exists.
    """
    here = Path(start or Path.cwd()).resolve()
    for candidate in (here, *here.parents, Path(__file__).resolve().parents[2]):
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


def need(module: str, extra: str, what: str) -> None:
    """Raise a PipelineError naming the install when ``module`` (a package of the ``extra``
    of pyproject.toml) is missing: a learner's install has none of the instructor's."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise PipelineError(f"{what} needs the {extra}'s packages ({module} is not installed): "
                            f"pip install -e '.[{extra}]' in the course folder")


# --------------------------------------------------------------------------- readable names


@dataclass
class TestInfo:
    """A hidden test as its readers name it: the exercise it belongs to, what it checks."""

    grade_id: str
    exercise: str
    checks: str          # the visible comment saying what the hidden test checks


def test_map(root: Path, day: str) -> dict[str, TestInfo]:
    """grade_id -> the exercise heading above the test and the comment saying what it checks."""
    nb = json.loads((root / "source" / day / notebook_name(day)).read_text(encoding="utf-8"))
    heading = "Exercise"
    out: dict[str, TestInfo] = {}
    for cell in nb.get("cells", []):
        source = "".join(cell.get("source", []))
        if cell.get("cell_type") == "markdown":
            for line in source.splitlines():   # the last heading before the test counts
                if line.startswith("## "):
                    heading = line[3:].strip()
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "code" and meta.get("grade") and not meta.get("solution"):
            comment = []
            for line in source.splitlines():
                if line.startswith("### BEGIN HIDDEN TESTS"):
                    break
                if line.startswith("#"):
                    comment.append(line.lstrip("#").strip())
            text = " ".join(comment)
            text = re.sub(r"^Hidden tests?:\s*", "", text)
            out[meta["grade_id"]] = TestInfo(meta["grade_id"], heading, text)
    return out


def day_title(root: Path, day: str) -> str:
    """``Day 3: Self-attention as a module`` from the notebook's first heading, else the name."""
    n = int(re.match(r"day(\d+)", day).group(1))
    try:
        nb = json.loads((root / "source" / day / notebook_name(day)).read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            src = "".join(cell.get("source", [])) if cell.get("cell_type") == "markdown" else ""
            m = re.match(r"\s*#+\s*Day\s+\d+\s*[—–:-]+\s*(.+)", src)
            if m:
                return f"Day {n}: {m.group(1).strip()}"
    except (OSError, ValueError, AttributeError):
        pass
    return f"Day {n}: " + day.split("_", 1)[-1].replace("_", " ").capitalize()
