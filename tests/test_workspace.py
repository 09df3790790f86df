"""The learner's work is never lost: the learner's folder, course updates, and rebuilds of
release/ (issue 48, item 1: `make demo` used to rebuild release/, where `make lab` opened)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.authoring import build
from autograder.selfcheck import workspace

DAY = "day02_queries_keys_values"
EDIT = "# my own answer, typed in JupyterLab\n"


def _edit(path: Path) -> None:
    """Change an answer cell and leave outputs, as a learner's saved notebook has."""
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {})
                .get("solution"))
    cell["source"] = EDIT + "".join(cell["source"])
    cell["execution_count"] = 3
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "hello\n"}]
    path.write_text(json.dumps(nb))


def _course_copy(root: Path, tmp: Path, days: list[str]) -> Path:
    copy = tmp / "course"
    for top in ("source", "release"):
        for day in days:
            shutil.copytree(root / top / day, copy / top / day)
    return copy


def test_each_day_is_copied_once_and_never_overwritten(root, tmp_path):
    """Does sync copy every day, keep a learner's edit through later syncs, and put a new
    version of a day beside the learner's (once) instead of over it?"""
    course = _course_copy(root, tmp_path, [DAY, "day03_self_attention"])
    mine = tmp_path / "notebooks"
    lines = workspace.sync(course, mine)
    assert len(lines) == 2 and all("copied" in line for line in lines)
    nb = mine / DAY / f"{DAY}.ipynb"
    _edit(nb)
    kept = nb.read_bytes()
    assert workspace.sync(course, mine) == []
    assert nb.read_bytes() == kept
    # The course publishes a new version of Day 2.
    rel = course / "release" / DAY / f"{DAY}.ipynb"
    rel.write_text(rel.read_text().replace("Day 2", "Day 2 (revised)", 1))
    lines = workspace.sync(course, mine)
    assert len(lines) == 1 and "beside yours" in lines[0], lines
    updates = list((mine / DAY).glob("*.update-*.ipynb"))
    assert len(updates) == 1 and updates[0].read_bytes() == rel.read_bytes()
    assert nb.read_bytes() == kept
    assert workspace.sync(course, mine) == []          # offered once
    assert len(list((mine / DAY).glob("*.update-*.ipynb"))) == 1


def test_a_release_notebook_with_work_is_kept_before_a_rebuild(root, tmp_path):
    """Is a notebook a learner edited inside release/ (where `make lab` used to open) kept in
    notebooks/ before `build` regenerates release/, with a line that says where?"""
    course = _course_copy(root, tmp_path, [DAY])
    rel = course / "release" / DAY / f"{DAY}.ipynb"
    _edit(rel)
    work = rel.read_bytes()
    said = []
    build.build(course, [DAY], say=said.append)
    kept = course / "notebooks" / DAY / f"{DAY}.ipynb"
    assert kept.read_bytes() == work and said and str(kept) in said[0]
    assert EDIT not in rel.read_text()                 # release/ is the course's again
    # A second edit and rebuild: the learner's copy stays, the new one goes beside it.
    _edit(rel)
    build.build(course, [DAY], say=said.append)
    assert kept.read_bytes() == work
    assert len(list((course / "notebooks" / DAY).glob("*.from-release-*.ipynb"))) == 1
    # A release notebook as the course made it (no outputs) is not "work".
    assert not workspace.edited(root / "release" / DAY / f"{DAY}.ipynb")


@pytest.mark.slow
def test_the_documented_commands_leave_an_edit_intact(root, tmp_path):
    """Edit a notebook in the learner's folder, run the commands the docs give (workspace,
    build, demo, selfcheck, then workspace again): is the edit still there, byte for byte?"""
    mine = tmp_path / "notebooks"

    def run(*args: str) -> None:
        out = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=root,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode in (0, 1), (args, out.stdout[-2000:], out.stderr[-2000:])

    run("workspace", "--dir", str(mine))
    nb = mine / DAY / f"{DAY}.ipynb"
    _edit(nb)
    kept = nb.read_bytes()
    run("build", "--day", DAY)
    run("demo", "--day", DAY, "--output", str(tmp_path / "demo"))
    run("selfcheck", str(nb))
    run("workspace", "--dir", str(mine))
    assert nb.read_bytes() == kept


def test_the_learners_lab_has_no_nbgrader_menus_or_validate(root):
    """Does `make lab`'s Jupyter config turn nbgrader's JupyterLab extension off (its Validate
    said "Success" for wrong notebooks: the hidden tests are judged outside the kernel)?"""
    import os

    lab = root / "autograder" / "selfcheck" / "lab"
    assert "JUPYTER_CONFIG_PATH='$(CURDIR)/autograder/selfcheck/lab'" in \
        (root / "Makefile").read_text()
    env = dict(os.environ, JUPYTER_CONFIG_PATH=str(lab))
    out = subprocess.run([str(Path(sys.executable).with_name("jupyter")), "labextension",
                          "list"], env=env, capture_output=True, text=True, timeout=120)
    line = next(x for x in (out.stdout + out.stderr).splitlines() if "@jupyter/nbgrader v" in x)
    assert "disabled" in line, line
