"""What a submission goes through before nbgrader sees it: a list of steps, each with one job.

Like nbgrader's preprocessors, each step takes the :class:`Submission` and either changes it
(drops a cell, adds a flag the instructor sees) or refuses it with a status and a reason
(:class:`Refused`). :data:`STEPS` is the list, in order; adding a check is adding one item.

1. :func:`read_notebook`: a plain file, at most the size limit, a valid notebook;
2. :func:`refuse_another_days_notebook`: its cells belong to this day;
3. :func:`drop_duplicate_cells`: a test cell pasted twice is kept once;
4. :func:`drop_foreign_metadata`: nbgrader metadata the course never gave is removed;
5. :func:`scan`: the static scan for tampering (``settings["tamper"]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.core.course import notebook_name
from autograder.grading.score import graded_cells, scan_for_tampering
from autograder.sandbox import kernel_files


class Refused(Exception):  # noqa: N818 - a verdict, not a failure of the grader
    """The submission is not graded: ``status`` (a Result status) and what the learner reads."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass
class Submission:
    """One submission on its way in: where it is, what the course gave, what was found."""

    day: str
    path: Path | None
    source: nbformat.NotebookNode            # the day's source notebook (tests and points)
    release: nbformat.NotebookNode | None    # what the learner was given
    settings: dict
    notebook: nbformat.NotebookNode | None = None   # the submitted notebook, once read
    flags: list[str] = field(default_factory=list)  # what the instructor is told
    static: list = field(default_factory=list)      # findings of the static scan


def read_notebook(sub: Submission) -> None:
    """Missing, a link, not a regular file, over the size limit (``max_notebook_bytes``,
    default 50 MB) or not a valid notebook: refused with the reason."""
    if sub.path is None:
        raise Refused("missing", f"no {notebook_name(sub.day)} submitted")
    path = Path(sub.path)
    cap = sub.settings.get("max_notebook_bytes", 50 * 1024 * 1024)
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("it is a link or not a regular file; only plain files are graded")
        raw = kernel_files.read_capped(path, cap + 1)
        if len(raw) > cap:
            raise ValueError(f"the file is larger than {cap / 1e6:.0f} MB, the limit")
        notebook = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(notebook)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets a status, not a crash
        raise Refused("unreadable", f"{path.name} is not a valid notebook: "
                                    f"{type(exc).__name__}: {str(exc)[:300]}") from None
    sub.notebook = notebook


def refuse_another_days_notebook(sub: Submission) -> None:
    """A notebook of another day in this day's folder is not graded as this day's."""
    own = {g for g, _ in graded_cells(sub.source)}
    ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
           for c in sub.notebook.cells} - {None}
    if ids and not ids & own:
        other = sorted({i.split("_")[0] for i in ids if i.startswith("day")})
        owner = ", ".join(other) or "another notebook"
        raise Refused("missing", f"{Path(sub.path).name} in {sub.day}/ is not the {sub.day} "
                                 f"notebook (its cells belong to {owner}); nothing was graded "
                                 "for this day")


def drop_duplicate_cells(sub: Submission) -> None:
    """A test cell pasted twice: nbgrader rejects duplicate grade ids; keep the first copy."""
    seen: set[str] = set()
    kept = []
    for cell in sub.notebook.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid and gid in seen:
            sub.flags.append(f"a second copy of cell {gid} was ignored")
            continue
        if gid:
            seen.add(gid)
        kept.append(cell)
    sub.notebook.cells = kept


def drop_foreign_metadata(sub: Submission) -> None:
    """nbgrader metadata the course never gave (a "read-only" cell of the learner's making)
    makes the cell the learner's own: nbgrader would reject the notebook, and a scan that
    trusts the metadata would skip the cell."""
    course_ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                  for c in sub.source.cells} - {None}
    for i, cell in enumerate(sub.notebook.cells, 1):
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is not None and meta.get("grade_id") not in course_ids:
            del cell.metadata["nbgrader"]
            sub.flags.append(f"cell {i} carried nbgrader metadata the course never gave "
                             "(treated as the learner's own cell)")


def scan(sub: Submission) -> None:
    """The static scan for tampering against the release notebook (``settings["tamper"]``,
    default on); its findings travel with the submission to scoring."""
    if sub.settings.get("tamper", True):
        sub.static = scan_for_tampering(sub.notebook, sub.release)


STEPS = (read_notebook, refuse_another_days_notebook, drop_duplicate_cells,
         drop_foreign_metadata, scan)


def admit(sub: Submission) -> None:
    """Run every step of :data:`STEPS` on ``sub``; raises :class:`Refused`."""
    for step in STEPS:
        step(sub)
