"""A notebook runs to its end (issue 48, items 3 and 4): "Run All" on a blank or a wrong
notebook reaches the Self-check button, and a failed visible check reads in a few lines.

nbclient stops at the first cell whose execute_reply is an error, as JupyterLab's Run All
does; each notebook runs in a fresh kernel of the learner's kind (no NBGRADER_EXECUTION).
"""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

DAY = "day02_queries_keys_values"


def _run(nb, cwd):
    env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
    env["COURSE_SELFCHECK_STANDBY"] = "0"
    os.environ.pop("NBGRADER_EXECUTION", None)
    client = NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}})
    client.km = client.create_kernel_manager()
    client.km.extra_env = env  # noqa: B010 - jupyter_client reads it when it starts
    client.execute(env=env)
    return nb


def _text(cell) -> str:
    return "".join(o.get("text", "") + "".join(o.get("data", {}).get("text/plain", ""))
                   + "\n".join(o.get("traceback", [])) for o in cell.get("outputs", []))


def _answer(nb, gid: str, code: str):
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid:
            cell.source = code
    return nb


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["blank", "wrong", "crash"])
def test_run_all_reaches_the_self_check_button(root, tmp_path, kind):
    """Run All on a blank notebook, a wrong one, and one whose wrong answer makes later cells
    raise (a shape error far from the answer): does every cell run, down to the button?"""
    nb = nbformat.read(str(root / "release" / DAY / f"{DAY}.ipynb"), as_version=4)
    if kind == "wrong":
        nb = nbformat.read(str(root / "solutions" / DAY / f"{DAY}.ipynb"), as_version=4)
        nb = _answer(nb, "day02_softmax", "def softmax(x, dim=-1):\n    return x.exp()\n")
    if kind == "crash":
        nb = nbformat.read(str(root / "solutions" / DAY / f"{DAY}.ipynb"), as_version=4)
        nb = _answer(nb, "day02_softmax",
                     "def softmax(x, dim=-1):\n    return None\n")
        _run(nb, tmp_path)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.get("execution_count") for c in code), "Run All stopped before the end"
        crashed = [c for c in code if any(o.get("output_type") == "error" for o in c.outputs)]
        assert crashed, "the wrong softmax was meant to break a later cell"
        assert all("Run All goes on" in _text(c) for c in crashed)
        return
    (tmp_path / DAY).mkdir()
    _run(nb, tmp_path / DAY)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "Run All stopped before the end"
    assert "selfcheck_button" in code[-1].source
    check = next(c for c in code if "check.check_softmax" in c.source)
    text = _text(check)
    assert "✗ check failed" in text, text
    if kind == "blank":
        assert "raised NotImplementedError" in text and "Hint" in text, text
        others = "".join(_text(c) for c in code)
        assert "Traceback" not in others, "an unwritten stub still prints a traceback"
    assert "Traceback" not in text and text.count("\n") <= 8, text


@pytest.mark.slow
def test_a_record_run_still_stops_at_the_first_error(root, tmp_path, monkeypatch):
    """`record` must not record a notebook that fails: with COURSE_STOP_ON_ERROR=1 (which
    measure sets) a failing check stops the run as in plain Jupyter."""
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(str(root / "solutions" / DAY / f"{DAY}.ipynb"), as_version=4)
    nb = _answer(nb, "day02_softmax", "def softmax(x, dim=-1):\n    return None\n")
    monkeypatch.setenv("COURSE_STOP_ON_ERROR", "1")
    (tmp_path / DAY).mkdir()
    with pytest.raises(CellExecutionError):
        _run(nb, tmp_path / DAY)
    assert "COURSE_STOP_ON_ERROR" in (root / "autograder" / "authoring" / "measure.py").read_text()
