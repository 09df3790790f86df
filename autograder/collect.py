"""Turn a zip of LMS downloads into nbgrader's ``<student_id>/<assignment_id>/`` layout.

Accepted inside the zip:
- the layout itself, optionally under one top folder (``submitted/alice/day03_.../x.ipynb``);
- flat files named the way nbgrader's ``zip_collect`` expects by default
  (``FileNameCollector.named_regexp``): ``<anything>_<student_id>_attempt_<timestamp>_<file>``,
  e.g. ``day03_alice_attempt_2026-01-05-10-00-00_day03_self_attention.ipynb``. The day is
  read from the file name, else from the notebook's graded cells.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import nbformat

NAMED = re.compile(r".+_(?P<student_id>\w+?)_attempt_(?P<timestamp>[0-9\-]+)_(?P<file_id>.+)")


def _day_of(path: Path, name: str, days: list[str]) -> str | None:
    for d in days:
        if d in name or name.startswith(d[:5]):
            return d
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception:  # noqa: BLE001 - unreadable: let the grader give it its status
        return None
    ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "") for c in nb.cells}
    for d in days:
        if any(i.startswith(d[:5] + "_") for i in ids):
            return d
    return None


def unzip_submissions(zip_path: Path, out: Path, days: list[str]) -> Path:
    """Extract ``zip_path`` into ``out`` in the submissions layout; returns the folder."""
    raw = out / "raw"
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            name = Path(info.filename)
            if info.is_dir() or name.is_absolute() or ".." in name.parts:
                continue  # no path traversal out of the extraction folder
            target = raw / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
    subs = out / "submitted"
    subs.mkdir(parents=True, exist_ok=True)
    for nb in sorted(raw.rglob("*.ipynb")):
        rel = nb.relative_to(raw).parts
        if ".ipynb_checkpoints" in rel or "__MACOSX" in rel:
            continue
        if len(rel) >= 3 and rel[-2] in days:
            student, day, fname = rel[-3], rel[-2], rel[-1]
        else:
            m = NAMED.match(nb.name)
            if not m:
                continue
            student, fname = m.group("student_id"), m.group("file_id")
            day = _day_of(nb, fname, days)
            if day is None:
                continue
        dest = subs / student / day / fname
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, dest)
    return subs
