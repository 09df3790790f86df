"""What a submission goes through before nbgrader sees it: a list of steps, each with one job.

Like nbgrader's preprocessors, each step takes the :class:`Submission` and either changes it
(drops a cell, adds a flag the instructor sees) or refuses it with a status and a reason
(:class:`Refused`). :data:`STEPS` is the list, in order; adding a check is adding one item.

1. :func:`read_notebook`: a plain file, at most the size limit, a valid notebook;
2. :func:`drop_malformed_metadata`: nbgrader metadata that is not a dict with a text grade id
   is removed;
3. :func:`refuse_another_days_notebook`: its cells belong to this day;
4. :func:`drop_duplicate_cells`: a test cell pasted twice is kept once;
5. :func:`drop_foreign_metadata`: nbgrader metadata the course never gave is removed, and every
   cell the course gave gets back the course's own (nbgrader never sees the learner's);
6. :func:`scan`: the static scan for tampering (``settings["tamper"]``);
7. :func:`write_out`: the notebook as nbgrader will read it, at most the size limit again.

The size limit (:func:`notebook_cap`) also decides how much of the autograded notebook the
worker reads back (:func:`readback_limit`), so that no notebook admitted here is lost there.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.core.course import notebook_name
from autograder.core.records import Status
from autograder.grading.score import graded_cells, scan_for_tampering
from autograder.sandbox import kernel_files

#: The largest notebook graded, in bytes, both as submitted and as written out for nbgrader
#: (``settings["max_notebook_bytes"]`` overrides it).
MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
#: How many bytes of the autograded notebook each byte of output the executor lets through
#: (``limits["output"]``, measured as JSON) may take once nbformat writes it: a stream of
#: newlines, 2 bytes each as measured, is written one line per list item, 6 spaces of indent,
#: quotes and a comma: 12 bytes, so 6; twice the output allowed, as errors still come through
#: (trimmed) past the output limit.
OUTPUT_EXPANSION = 12
#: The autograded notebook against the one nbgrader was given: its code cells may each gain
#: a notice of ~300 bytes (not executed, timed out, the kernel died) while each takes at least
#: ~100 bytes written, plus the graded cells' verdicts (each message capped, one per test).
CELL_EXPANSION = 4
#: Room for the rest: nbgrader's metadata, the judge's capped messages, the notices.
READBACK_SLACK = 8 * 1024 * 1024


def notebook_cap(settings: dict) -> int:
    """The largest notebook admitted, in bytes (as submitted, and as written for nbgrader)."""
    return int(settings.get("max_notebook_bytes", MAX_NOTEBOOK_BYTES))


def readback_limit(settings: dict, written: int | None = None) -> int:
    """How many bytes of the autograded notebook the worker reads back: what nbgrader was
    given (``written`` bytes, default the largest admitted, :func:`notebook_cap`) with the
    notices each cell may gain, plus every byte of output the limits let through
    (``settings["limits"]["output"]``) as nbformat writes it. Past it, what came back is the
    submission's doing (its outputs), never the machine's."""
    written = notebook_cap(settings) if written is None else written
    return (CELL_EXPANSION * written + OUTPUT_EXPANSION * settings["limits"]["output"]
            + READBACK_SLACK)


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
    text: str = ""                                  # ...as written for nbgrader (write_out)
    flags: list[str] = field(default_factory=list)  # what the instructor is told
    static: list = field(default_factory=list)      # findings of the static scan


def read_notebook(sub: Submission) -> None:
    """Missing, a link, not a regular file, over the size limit (:func:`notebook_cap`,
    default 50 MiB) or not a valid notebook: refused with the reason."""
    if sub.path is None:
        raise Refused(Status.MISSING, f"no {notebook_name(sub.day)} submitted")
    path = Path(sub.path)
    cap = notebook_cap(sub.settings)
    try:
        if path.is_symlink() or not path.is_file():
            raise ValueError("it is a link or not a regular file; only plain files are graded")
        raw = kernel_files.read_capped(path, cap + 1)
        if len(raw) > cap:
            raise ValueError(f"the file is larger than {cap / 2**20:.0f} MiB, the limit")
        notebook = nbformat.reads(raw.decode("utf-8"), as_version=4)
        nbformat.validate(notebook)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets a status, not a crash
        raise Refused(Status.UNREADABLE, f"{path.name} is not a valid notebook: "
                                    f"{type(exc).__name__}: {str(exc)[:300]}") from None
    sub.notebook = notebook


def _nbgrader(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader") or {}


def drop_malformed_metadata(sub: Submission) -> None:
    """nbgrader metadata that is not a dict whose grade id (if any) is text is no metadata the
    course gave: removed, so that no later step (nor nbgrader) trips on it; flagged."""
    for i, cell in enumerate(sub.notebook.cells, 1):
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None or (isinstance(meta, dict)
                            and isinstance(meta.get("grade_id", ""), str)):
            continue
        del cell.metadata["nbgrader"]
        sub.flags.append(f"cell {i} carried malformed nbgrader metadata (removed; treated as "
                         "the learner's own cell)")


def refuse_another_days_notebook(sub: Submission) -> None:
    """A notebook of another day in this day's folder is not graded as this day's."""
    own = {g for g, _ in graded_cells(sub.source)}
    ids = {_nbgrader(c).get("grade_id") for c in sub.notebook.cells} - {None}
    if ids and not ids & own:
        other = sorted({i.split("_")[0] for i in ids if i.startswith("day")})
        owner = ", ".join(other) or "another notebook"
        raise Refused(Status.MISSING, f"{Path(sub.path).name} in {sub.day}/ is not the {sub.day} "
                                 f"notebook (its cells belong to {owner}); nothing was graded "
                                 "for this day")


def drop_duplicate_cells(sub: Submission) -> None:
    """A test cell pasted twice: nbgrader rejects duplicate grade ids; keep the first copy."""
    seen: set[str] = set()
    kept = []
    for cell in sub.notebook.cells:
        gid = _nbgrader(cell).get("grade_id")
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
    trusts the metadata would skip the cell. A cell with a grade id the course gave gets the
    course's metadata for that id back, whatever the learner's said (a ``schema_version`` of
    99 or ``"task": true`` crashed nbgrader), from the release notebook (else the source);
    a change is flagged."""
    course: dict[str, list] = {}   # grade id -> its metadata in the source, the release
    for given in (sub.source, sub.release):  # the release's last: it holds the checksums
        for c in given.cells if given is not None else ():
            meta = _nbgrader(c)
            if meta.get("grade_id"):
                course.setdefault(meta["grade_id"], []).append(meta)
    for i, cell in enumerate(sub.notebook.cells, 1):
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None:
            continue
        if meta.get("grade_id") not in course:
            del cell.metadata["nbgrader"]
            sub.flags.append(f"cell {i} carried nbgrader metadata the course never gave "
                             "(treated as the learner's own cell)")
            continue
        given = course[meta["grade_id"]]
        cell.metadata["nbgrader"] = nbformat.from_dict(copy.deepcopy(given[-1]))
        if meta not in given:
            sub.flags.append(f"cell {i} ({meta['grade_id']}) carried nbgrader metadata other "
                             "than the course's (the course's was restored)")


def scan(sub: Submission) -> None:
    """The static scan for tampering against the release notebook (``settings["tamper"]``,
    default on); its findings travel with the submission to scoring."""
    if sub.settings.get("tamper", True):
        sub.static = scan_for_tampering(sub.notebook, sub.release)


def write_out(sub: Submission) -> None:
    """The notebook as nbgrader will read it (``sub.text``, which the worker writes), held to
    the size limit again: written out with indents, one line per list item, a file under the
    limit can grow past it (a cell of 13 MB of newlines grows five-fold). Past it: rejected."""
    text = nbformat.writes(sub.notebook)
    cap = notebook_cap(sub.settings)
    if len(text.encode("utf-8")) > cap:
        raise Refused(Status.REJECTED, f"the notebook, written out for grading, is larger than "
                                  f"{cap / 2**20:.0f} MiB, the limit: make its cells or "
                                  "attachments smaller")
    sub.text = text


STEPS = (read_notebook, drop_malformed_metadata, refuse_another_days_notebook,
         drop_duplicate_cells, drop_foreign_metadata, scan, write_out)


def admit(sub: Submission) -> None:
    """Run every step of :data:`STEPS` on ``sub``; raises :class:`Refused`."""
    for step in STEPS:
        step(sub)
