"""Build the course: release/ (student notebooks) and solutions/ (answer keys) from source/.

``build`` regenerates them with nbgrader's own converters (GenerateAssignment,
GenerateSolution) under the course's configuration (:mod:`autograder.core.nbgrader`);
``check_sync`` proves the committed ones match ``source/``.
"""

from __future__ import annotations

import difflib
import shutil
import tempfile
from pathlib import Path

from autograder.core.course import list_days, resolve_days
from autograder.core.nbgrader import generate


def build(root: Path, days: list[str] | None = None, progress=None,
          say=print) -> list[str]:
    """Generate ``release/`` and ``solutions/`` from ``source/`` in place. Returns the days.

    A release notebook a learner worked in (it has outputs: the course's have none) is first
    kept in the learner's folder (:func:`autograder.selfcheck.workspace.rescue`), with a line
    from ``say``: nothing a learner wrote is deleted.
    """
    from autograder.selfcheck import workspace

    days = resolve_days(root, days)
    for day in days:
        for nb in sorted((root / "release" / day).glob("*.ipynb")):
            if workspace.edited(nb):
                kept = workspace.rescue(nb, root / workspace.DEFAULT)
                say(f"{nb.relative_to(root)} holds your work: kept as {kept} before "
                    "release/ is rebuilt (work in notebooks/: `make lab` opens it)")
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
