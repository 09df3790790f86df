"""The learner's own folder of notebooks: made once from ``release/``, never overwritten.

``release/`` is generated (``python -m autograder build`` deletes and rewrites it), so a learner
must not work there. ``make lab`` opens the learner's folder instead (``notebooks/`` in the
checkout, ignored by git; ``--dir`` or ``LAB_DIR`` elsewhere), which :func:`sync` fills:

- a day the folder lacks is copied from ``release/`` (the notebook alone; files are created,
  never replaced);
- a day the learner already has is never written. When the course's notebook for that day
  changed since the learner's copy was made, the new version is put *beside* theirs, as
  ``dayNN_slug.update-<hash>.ipynb``, once, with a line that says so;
- what each copy was made from is kept in ``.course_versions.json`` in the folder (the
  release notebook's SHA-256), so an update is offered once and a learner's edits never count
  as an update.

:func:`rescue` keeps a notebook a learner edited inside ``release/`` (where ``make lab``
opened before) before ``build`` regenerates it: it goes to the learner's folder, as their copy
if they have none, else beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

DEFAULT = "notebooks"
RECORD = ".course_versions.json"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load(folder: Path) -> dict:
    try:
        data = json.loads((folder / RECORD).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save(folder: Path, record: dict) -> None:
    tmp = folder / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, folder / RECORD)


def _copy_new(src: Path, dest: Path) -> bool:
    """Copy ``src`` to ``dest`` only if ``dest`` does not exist (never replaces a file)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
        shutil.copyfileobj(inp, out)
    return True


def sync(root: Path, folder: Path) -> list[str]:
    """Fill the learner's ``folder`` from ``root/release`` as the module doc says; return one
    line per day copied or update offered. Never writes an existing file of the learner."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    record = _load(folder)
    lines = []
    for src in sorted((Path(root) / "release").glob("day*/day*.ipynb")):
        day = src.parent.name
        if src.stem != day:
            continue
        sha = _sha(src)
        mine = folder / day / src.name
        entry = record.get(day) if isinstance(record.get(day), dict) else {}
        if _copy_new(src, mine):
            record[day] = {"copied": sha, "offered": []}
            lines.append(f"{day}: copied to {mine}")
            continue
        if not entry:
            # A notebook the learner had before the record: today's version is its origin.
            record[day] = {"copied": sha, "offered": []}
            continue
        if sha == entry.get("copied") or sha in entry.get("offered", []):
            continue
        update = folder / day / f"{day}.update-{sha[:8]}.ipynb"
        _copy_new(src, update)
        entry.setdefault("offered", []).append(sha)
        record[day] = entry
        lines.append(f"{day}: the course has a new version of this day; it is beside yours as "
                     f"{update.name} (your {src.name} is unchanged)")
    _save(folder, record)
    return lines


def edited(path: Path) -> bool:
    """Does a notebook in ``release/`` show a learner's work (any output or execution count;
    the course's release notebooks have none)?"""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return path.is_file()
    return any(c.get("outputs") or c.get("execution_count")
               for c in nb.get("cells", []) if isinstance(c, dict))


def rescue(path: Path, folder: Path) -> Path | None:
    """Keep ``path`` (a release notebook a learner worked in) in the learner's ``folder``:
    as their copy of the day if they have none, else beside it. Returns where it went."""
    day = path.parent.name
    dest = Path(folder) / day / path.name
    if not _copy_new(path, dest):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        dest = Path(folder) / day / f"{path.stem}.from-release-{stamp}{path.suffix}"
        if not _copy_new(path, dest):
            return None
    return dest
