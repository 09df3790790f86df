"""Tests for autograder/authoring/stated.py: a number a notebook states is one its answer key
prints."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.authoring import stated


def _cell(source: str, printed: str):
    cell = new_code_cell(source)
    cell.outputs = [new_output("stream", name="stdout", text=printed)]
    return cell


def _problems(*cells) -> list[str]:
    nb = new_notebook(cells=list(cells))
    nbformat.validate(nb)
    return stated.problems(nb)


def test_printed_health_checks_are_compared_with_the_value_beside_them():
    """Is a printed count next to a different stated count caught, and a bound held?"""
    code = 'print(f"parameters: {n:,} (health check: 136,586)")'
    assert _problems(_cell(code, "parameters: 136,586 (health check: 136,586)\n")) == []
    wrong = _problems(_cell(code, "parameters: 136,202 (health check: 136,586)\n"))
    assert len(wrong) == 1 and "prints 136,202 next to its health check 136,586" in wrong[0]
    code = 'print(f"last loss {x:.4f} (health check: < 0.05)")'
    assert _problems(_cell(code, "last loss 0.0253 (health check: < 0.05)\n")) == []
    assert _problems(_cell(code, "last loss 0.0510 (health check: < 0.05)\n"))
    assert _problems(_cell("print(n)", "66,048  (expected 66,048 = 4 x 16,512)\n")) == []


def test_commented_values_must_appear_in_the_output():
    """Are numbers and shapes in a '# health check' / '# expected' / '# ≈' comment looked up
    in what the cell printed, formulas and bounds left out?"""
    ok = _cell('print(tok.vocab_size)            # health check: 65', "vocab_size: 65\n")
    shapes = _cell("out, w = mha(x)\n# expected: output (2, 5, 128) | attn_weights (2, 8, 5, 5)",
                   "output (2, 5, 128) weights (2, 8, 5, 5)\n")
    approx = _cell("print(softmax(x))   # ≈ [0.4223, 0.4223, 0.1554], no NaN",
                   "tensor([0.4223, 0.4223, 0.1554])\n")
    formula = _cell("init()    # logits start near 0: loss ≈ ln(10)", "")
    bound = _cell("print(loss)  # health check: last < 0.05", "0.09\n")
    assert _problems(ok, shapes, approx, formula, bound) == []
    wrong = _problems(_cell("print(n)   # expected 410,115", "410,179\n"),
                      _cell("y = f(x)\n# expected: output (2, 5, 128)", "output (2, 5, 64)\n"))
    assert len(wrong) == 2
    assert "states 410,115" in wrong[0] and "states (2, 5, 128)" in wrong[1]


def test_hidden_test_cells_are_not_read():
    """A test cell's source may hold any numbers: is it skipped?"""
    cell = _cell("# expected 12,345\ncheck()", "")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "t",
                                 "points": 1, "locked": True, "schema_version": 3}
    assert _problems(cell) == []
