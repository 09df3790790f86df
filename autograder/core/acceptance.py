"""Which flagged submissions an instructor has accepted, and what each result pays.

A result with status ``tampered`` pays 0 points in ``grades.csv`` until the instructor has
looked at the evidence (the result's flags, shown by ``python -m autograder accept``) and
accepted that very submission. An acceptance names the submission's key (the hash of the
submitted notebook and the course's grading material): a new submission needs a new look.

Acceptances live in ``<output>/accepted.json``, a list of ``{"student", "day", "key"}``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from autograder.core.status import Status

UNPAID = (Status.TAMPERED,)


def load(path: Path) -> set[tuple[str, str, str]]:
    """The accepted (student, day, key) triples; empty when the file does not exist.

    Raises:
        ValueError: the file exists but is not a list of {student, day, key} records.
    """
    if not path.is_file():
        return set()
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path} must hold a list of {{student, day, key}} records")
    return {(str(d["student"]), str(d["day"]), str(d["key"])) for d in data}


def save(path: Path, accepted: set[tuple[str, str, str]]) -> None:
    """Write the acceptances atomically (sorted, one record per line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [{"student": s, "day": d, "key": k} for s, d, k in sorted(accepted)]
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(records, f, indent=1)
    os.replace(tmp, path)


def paid(result, accepted: set[tuple[str, str, str]]) -> float:
    """The points a result pays in the grades file: 0 for an unaccepted tampered one."""
    if result.status in UNPAID and (result.student, result.day, result.key) not in accepted:
        return 0.0
    return result.score
