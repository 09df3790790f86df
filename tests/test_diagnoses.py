"""Diagnoses are true (issue 48, item 5): an answer cell that does not compile is named with
its error and line, not "run the cell that defines it"."""

from __future__ import annotations

from autograder.core.records import TestResult
from autograder.grading.score import _explain_undefined


def test_a_name_left_undefined_by_a_broken_cell_is_explained():
    cells = ["import torch\n",
             "def softmax(x, dim=-1):\n  e = x.exp()\n    return e / e.sum(dim, keepdim=True)\n"]
    tests = [TestResult("day02_softmax_values", 0, 2,
                        "name 'softmax' is not defined in the notebook: run the cell that "
                        "defines it"),
             TestResult("day02_attention_values", 0, 2,
                        "name 'scaled_dot_product_attention' is not defined in the notebook")]
    out = _explain_undefined(tests, cells)
    assert "cell 2 of your own code does not run: IndentationError at line 3" in out[0].message
    assert "run the cell that defines it" not in out[0].message
    assert out[1] == tests[1]                        # no broken cell names it: unchanged
    assert _explain_undefined(tests, cells[:1]) == tests
