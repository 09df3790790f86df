"""The grading template: the course folder nbgrader autogrades in, generated once per version.

Like an instructor's one-off ``nbgrader generate_assignment``: source/ and the gradebook with
the days' test cells, cached under the grading cache (:func:`grading_base`), which the
sandbox never shows.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from autograder.core.nbgrader import generate
from autograder.core.records import course_fingerprint


def prepare_template(root: Path, days: list[str], template: Path) -> None:
    """A course folder holding only what grading needs: source/, release/, the gradebook with
    the days' test cells. (The hidden grading library stays in this process: the judge.)"""
    shutil.copytree(root / "source", template / "source",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    generate(template, days, template / "gradebook.db", solutions=False)


def template_cache(root: Path, days: list[str]) -> Path:
    """A generated grading template for ``days``, made once per version of the course.

    Like an instructor's one-off ``nbgrader generate_assignment``: kept in
    ``$TFS_GRADING_CACHE`` (default ``~/.cache/transformers-from-scratch-grading``, apart
    from the dataset cache; the sandbox shows neither), keyed by the course fingerprint of
    each day.
    """
    base = grading_base()
    key = hashlib.sha256(json.dumps(
        [course_fingerprint(root, d) for d in sorted(days)]).encode()).hexdigest()[:20]
    target = base / key
    if (target / "gradebook.db").is_file():  # complete: it is moved into place last
        return target
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=base))
    prepare_template(root, sorted(days), tmp / "t")
    try:
        os.replace(tmp / "t", target)
    except OSError:
        pass  # another run made it first
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def grading_base() -> Path:
    """The grading cache folder (``$TFS_GRADING_CACHE``, default
    ``~/.cache/transformers-from-scratch-grading``): templates and the grader's secret."""
    return Path(os.environ.get("TFS_GRADING_CACHE") or
                Path.home() / ".cache" / "transformers-from-scratch-grading")
