"""Where the course lives and what its days are: the one place every package asks.

``find_root`` finds the repository (the folder holding ``source/`` and ``autograder/``),
``list_days``/``resolve_days`` name its assignments, ``notebook_name`` the notebook of each.
``PipelineError`` is the error a user can fix, raised across the packages.
"""

from __future__ import annotations

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
