"""The learner's progress file and the table made from it.

The points of each day's latest self-check live in one small JSON file,
``.course_progress.json`` (:data:`FILENAME`), in the learner's folder: the folder that holds the
``dayNN_slug/`` folders, or the course repository's root for its generated ``release/``,
``solutions/`` and ``source/`` folders; ``COURSE_PROGRESS_FILE`` overrides the location
(:func:`progress_path`, :func:`find_progress_file`). :func:`record` replaces the file atomically,
so an interrupted self-check never corrupts it; :func:`load` reads it, and
:func:`show_progress` prints the table of all days (:func:`format_progress`).

:mod:`course.progress`, which runs the self-checks, re-exports every public name here. This
module never imports solutions or hidden tests.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["FILENAME", "find_progress_file", "format_progress", "load", "progress_path",
           "progress_text", "record", "show_progress"]

FILENAME = ".course_progress.json"
VERSION = 1
GENERATED = ("release", "solutions", "source")
DAY_RE = re.compile(r"^day(\d{2})_[a-z0-9_]+$")
COURSE_DAYS = 14


def _is_course_root(folder: Path) -> bool:
    return (folder / "source").is_dir() and (folder / "autograder").is_dir()


def progress_path(notebook: str | os.PathLike) -> Path:
    """Where the progress of the learner who owns ``notebook`` is kept.

    ``<folder>/dayNN_slug/dayNN_slug.ipynb`` -> ``<folder>/.course_progress.json``, except that a
    course repository's ``release/``, ``solutions/`` or ``source/`` folder sends it to the
    repository root. ``COURSE_PROGRESS_FILE`` overrides both.
    """
    forced = os.environ.get("COURSE_PROGRESS_FILE", "").strip()
    if forced:
        return Path(forced).expanduser().resolve()
    nb = Path(notebook).resolve()
    folder = nb.parent.parent if DAY_RE.match(nb.parent.name) else nb.parent
    if folder.name in GENERATED and _is_course_root(folder.parent):
        folder = folder.parent
    return folder / FILENAME


def find_progress_file(start: str | os.PathLike | None = None) -> Path:
    """The progress file seen from ``start`` (default: the current folder).

    The first ``.course_progress.json`` in ``start`` or a folder above it; else the newest one
    in a folder just below ``start`` (the course root, seen from above the learner's folder of
    days); else, for a folder inside a course repository, the repository root's (it may not
    exist yet); else ``start/.course_progress.json``.
    """
    forced = os.environ.get("COURSE_PROGRESS_FILE", "").strip()
    if forced:
        return Path(forced).expanduser().resolve()
    here = Path(start or Path.cwd()).resolve()
    if here.is_file():
        return progress_path(here)
    for folder in (here, *here.parents):
        if (folder / FILENAME).is_file():
            return folder / FILENAME
    below = [p for p in here.glob(f"*/{FILENAME}") if p.is_file()]
    if below:
        return max(below, key=lambda p: p.stat().st_mtime)
    for folder in (here, *here.parents):
        if _is_course_root(folder):
            return folder / FILENAME
    if DAY_RE.match(here.name):
        return here.parent / FILENAME
    return here / FILENAME


def load(path: str | os.PathLike) -> dict[str, Any]:
    """The progress data (``{"version": 1, "days": {day: entry}}``); empty when missing.

    An unreadable file is reported on stdout and treated as empty (the next self-check
    replaces it).
    """
    p = Path(path)
    empty: dict[str, Any] = {"version": VERSION, "days": {}}
    if not p.is_file():
        return empty
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("days"), dict):
            raise ValueError("no 'days' table")
    except (OSError, ValueError) as exc:
        print(f"progress: ignoring {p} ({exc}); the next self-check rewrites it")
        return empty
    return data


def record(path: str | os.PathLike, day: str, score: float, max_score: float,
           tests: dict[str, tuple[float, float]], notebook: str | os.PathLike,
           status: str = "graded") -> dict[str, Any]:
    """Store one day's self-check result in the progress file (atomically). Returns the entry."""
    p = Path(path)
    data = load(p)
    entry = {
        "score": float(score),
        "max_score": float(max_score),
        "status": status,
        "checked_at": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "notebook": str(notebook),
        "tests": {k: [float(a), float(b)] for k, (a, b) in tests.items()},
    }
    data["version"] = VERSION
    data["days"][day] = entry
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-progress-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return entry


def _bar(fraction: float, width: int = 10) -> str:
    full = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * full + "░" * (width - full)


def format_progress(data: dict[str, Any], days: list[str],
                    max_scores: dict[str, float] | None = None, source: str = "") -> str:
    """The progress table: one row per day (all ``days``, checked or not), then the total."""
    max_scores = max_scores or {}
    entries = data.get("days", {})
    width = max([len(d) for d in days] + [8])
    lines = [f"Your progress{f' ({source})' if source else ''}", "",
             f"{'day':>3}  {'notebook':<{width}}  {'points':>9}  {'':10}  {'':>4}  last self-check"]
    got = total = 0.0
    checked = 0
    for day in days:
        m = DAY_RE.match(day)
        num = str(int(m.group(1))) if m else "?"
        e = entries.get(day)
        mx = float(e["max_score"]) if e else float(max_scores.get(day, 0.0))
        total += mx
        if e is None:
            pts = f"-/{mx:g}" if mx else "-"
            lines.append(f"{num:>3}  {day:<{width}}  {pts:>9}  {_bar(0):10}  {'':>4}  "
                         "not checked yet")
            continue
        checked += 1
        got += float(e["score"])
        frac = float(e["score"]) / mx if mx else 0.0
        when = str(e.get("checked_at", ""))[:16].replace("T", " ")
        status = "" if e.get("status", "graded") == "graded" else f" ({e['status']})"
        pts = f"{float(e['score']):g}/{mx:g}"
        lines.append(f"{num:>3}  {day:<{width}}  {pts:>9}  {_bar(frac)}  "
                     f"{frac:>4.0%}  {when}{status}")
    extra = [d for d in entries if d not in days]
    for day in extra:
        lines.append(f"  ?  {day:<{width}}  (not part of this course version)")
    lines.append("")
    pct = f" ({got / total:.0%})" if total else ""
    lines.append(f"{checked} of {len(days)} days self-checked; {got:g} of {total:g} points{pct}.")
    if len(days) < COURSE_DAYS:
        lines.append(f"(this copy of the course has {len(days)} of its {COURSE_DAYS} days)")
    return "\n".join(lines)


def _course_days(root: Path | None) -> tuple[list[str], dict[str, float]]:
    """Day names and their maximum points (the points of every graded cell), read from the
    course's source/ notebooks; none when no course folder is found above ``root``."""
    here = Path(root or Path.cwd()).resolve()
    # the learner's folder, else the course this package belongs to
    course = next((c for c in (here, *here.parents, Path(__file__).resolve().parents[1])
                   if _is_course_root(c)), None)
    if course is None:
        return [], {}
    days, points = [], {}
    for nb_path in sorted((course / "source").glob("day*/day*.ipynb")):
        if nb_path.stem != nb_path.parent.name:
            continue
        try:
            cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
        except (OSError, ValueError, KeyError):
            continue
        days.append(nb_path.stem)
        points[nb_path.stem] = float(sum(
            c.get("metadata", {}).get("nbgrader", {}).get("points", 0) or 0 for c in cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade")))
    return days, points


def show_progress(folder: str | os.PathLike | None = None) -> None:
    """Print the progress table seen from ``folder`` (default: current folder).

    Returns nothing, so that a notebook cell ending in ``show_progress()`` shows the table
    once (:func:`progress_text` gives the text). While nbgrader grades a notebook it prints one
    line instead (grades must not depend on the grader's files).
    """
    print(progress_text(folder))


def progress_text(folder: str | os.PathLike | None = None) -> str:
    """The progress table :func:`show_progress` prints (one line while nbgrader grades)."""
    if os.environ.get("NBGRADER_EXECUTION"):
        return "progress: not shown while nbgrader grades this notebook"
    path = find_progress_file(folder)
    here = Path(folder or Path.cwd()).resolve()
    days, maxes = _course_days(here if here.is_dir() else here.parent)
    data = load(path)
    if not days:
        days = sorted(data.get("days", {}))
    return format_progress(data, days, maxes, source=str(path))
