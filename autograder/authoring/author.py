"""Write an nbgrader source notebook as a plain text file, for authors who prefer an editor.

``python -m autograder author day02.py source/day02_x/day02_x.ipynb`` converts a file of cells
separated by marker lines into a notebook with nbgrader metadata and stable cell ids::

    # %% [markdown] id=intro
    # Day 2 ...                      (markdown, written as is)
    # %% id=setup
    import torch                     (an ordinary code cell)
    # %% solution id=day02_softmax
    def softmax(x, dim=-1): ...      (an autograded answer: ### BEGIN/END SOLUTION inside)
    # %% test id=day02_softmax_values points=2
    check.softmax(softmax)           (a locked test cell worth 2 points)

The id becomes both the cell id and, for solution and test cells, nbgrader's ``grade_id``,
so ids never change when a notebook is regenerated.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

_MARKER = re.compile(r"^# %%(?P<rest>.*)$")
_KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _parse_marker(rest: str) -> tuple[str, dict[str, str]]:
    kind = "code"
    attrs: dict[str, str] = {}
    for token in rest.split():
        if token == "[markdown]":
            kind = "markdown"
        elif token in ("solution", "test"):
            kind = token
        elif "=" in token:
            key, value = token.split("=", 1)
            attrs[key] = value
        else:
            raise ValueError(f"unknown token {token!r} in cell marker '# %%{rest}'")
    if "id" not in attrs:
        raise ValueError(f"cell marker '# %%{rest}' needs an id=...")
    return kind, attrs


def text_to_notebook(text: str) -> nbformat.NotebookNode:
    """Parse the marker format above into an nbformat 4.5 notebook."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(_KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    cells: list[tuple[str, dict[str, str], list[str]]] = []
    for line in text.splitlines():
        m = _MARKER.match(line)
        if m:
            kind, attrs = _parse_marker(m.group("rest"))
            cells.append((kind, attrs, []))
        elif cells:
            cells[-1][2].append(line)
        elif line.strip():
            raise ValueError("text before the first '# %%' marker")
    seen: set[str] = set()
    for kind, attrs, lines in cells:
        cid = attrs["id"]
        if cid in seen:
            raise ValueError(f"duplicate cell id {cid!r}")
        seen.add(cid)
        source = "\n".join(lines).strip("\n")
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(source)
        else:
            cell = nbformat.v4.new_code_cell(source)
        cell.id = cid
        if kind == "solution":
            cell.metadata["nbgrader"] = {
                "grade": False, "solution": True, "locked": False, "task": False,
                "grade_id": cid, "schema_version": 3,
            }
        elif kind == "test":
            cell.metadata["nbgrader"] = {
                "grade": True, "solution": False, "locked": True, "task": False,
                "grade_id": cid, "points": int(attrs.get("points", 1)), "schema_version": 3,
            }
        nb.cells.append(cell)
    return nb


def author(text_path: Path, notebook_path: Path) -> None:
    """Convert ``text_path`` into ``notebook_path`` (created or overwritten)."""
    nb = text_to_notebook(Path(text_path).read_text(encoding="utf-8"))
    nbformat.validate(nb)
    Path(notebook_path).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(notebook_path))
