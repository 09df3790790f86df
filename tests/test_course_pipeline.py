"""The course's proof of correctness, as CI runs it: in sync, and every hidden test verified."""

from __future__ import annotations

import json
import os

import nbformat
import pytest

from autograder.authoring import build
from autograder.authoring.verify import verify


def test_release_and_solutions_are_in_sync(root):
    """Do the committed release/ and solutions/ equal what source/ generates?"""
    problems = build.check_sync(root)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("top", ["source", "release", "solutions"])
def test_committed_notebooks_are_clean(root, top):
    """Are committed notebooks free of outputs, with ids and a kernelspec?"""
    for path in sorted((root / top).rglob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        nbformat.validate(nb)
        assert nb.metadata.get("kernelspec", {}).get("name") == "python3", path
        for cell in nb.cells:
            assert cell.get("id"), f"{path}: a cell without an id"
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path}: outputs"


def test_release_holds_no_solution_or_hidden_test(root):
    """Does release/ contain no solution region and no hidden-test text?"""
    for path in sorted((root / "release").rglob("*.ipynb")):
        text = path.read_text()
        markers = ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "autograder.judge.checks",
                   "hidden.check_")
        for marker in markers:
            assert marker not in text, f"{path} contains {marker!r}"
        nb = json.loads(text)
        sources = {c["id"]: "".join(c["source"]) for c in nb["cells"]}
        src_nb = nbformat.read(str(root / "source" / path.parent.name / path.name), 4)
        for cell in src_nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("solution") and "### BEGIN SOLUTION" in cell.source:
                body = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
                for line in body.strip().splitlines():
                    if len(line.strip()) > 25:
                        assert line.strip() not in sources.get(cell.id, ""), (path, line)


@pytest.mark.slow
def test_verify_every_day(root):
    """Reference 100% and blank 0 on every test cell of every day; every mutant caught?"""
    secret = os.urandom(32)   # inputs nobody chose: a failure prints the secret to replay
    report = verify(root, secret=secret)
    print(f"verify: {report.mutants_caught}/{report.mutants_total} mutants caught, "
          f"{len(report.results)} notebooks in {report.seconds:.0f} s")
    assert report.ok, (f"python -m autograder verify --secret {secret.hex()}\n"
                       + "\n".join(report.problems))
    assert report.mutants_total >= 10
