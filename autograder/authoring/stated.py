"""The numbers a notebook states next to its code, held against what its answer key prints.

A learner compares what a cell prints with the number the notebook gives as a health check; a
stated number that a correct answer does not print tells a correct learner they are wrong.
``verify`` runs every answer key; :func:`problems` then reads each code cell of the executed
answer key and checks two forms of statement:

- printed: ``... 136,586 (health check: 136,586)``, ``66,048  (expected 66,048 = ...)`` or
  ``last loss 0.0312 (health check: < 0.05)`` in a cell's output: the last number before the
  parenthesis must be the stated one, or on the stated side of the bound;
- commented: ``# health check: 65``, ``# expected 410,115``, ``# expected: output (2, 5, 128)``
  or ``# ≈ [0.4223, 0.4223, 0.1554]`` on a line of code: every number and shape in the comment
  must appear in the cell's output. A comment that states a bound (``last < 0.05``) is a
  condition, not a value, and is left out.

Hidden-test cells are not read (they print nothing).
"""

from __future__ import annotations

import re

import nbformat

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
# "<value> (health check: <stated>" or "<value> (expected <stated>" in what a cell printed
_PRINTED = re.compile(
    rf"({_NUMBER})[^\d(]*\((?:health check|expected):?\s*([<>]?)\s*({_NUMBER})")
# "# health check: ...", "# expected ...", "# ≈ ..." at the end of a line of code
_COMMENT = re.compile(r"#\s*(?:health check:|expected:?|≈)\s*(.+)$")
# what a comment states: shapes "(2, 5, 128)", lists "[0.4223, 0.1554]" and numbers
_SHAPE = re.compile(r"\(\d+(?:, \d+)+\)")
_STATED = re.compile(rf"(?<![\w.]){_NUMBER}(?![\w])")


def _value(text: str) -> float:
    return float(text.replace(",", ""))


def _output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            parts.append(str(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def _comment_problems(line: str, printed: str) -> list[str]:
    m = _COMMENT.search(line)
    if not m or "<" in m.group(1) or ">" in m.group(1):
        return []
    stated = m.group(1)
    wanted = _SHAPE.findall(stated)
    rest = _SHAPE.sub(" ", stated)
    # numbers inside a formula ("≈ ln(10)", "4 x 16,512") are not printed values
    rest = re.sub(r"\b(?:ln|log|exp|sqrt)\([^)]*\)", " ", rest)
    wanted += [n for n in _STATED.findall(rest) if n not in ("0", "1")]
    out_numbers = [_value(n) for n in _STATED.findall(printed)]
    missing = []
    for item in wanted:
        if item.startswith("("):
            if item not in printed:
                missing.append(item)
        elif not any(abs(v - _value(item)) <= 1e-9 + 0.5 * 10 ** -_decimals(item)
                     for v in out_numbers):
            missing.append(item)
    return [f"states {', '.join(missing)} (`{line.strip()[:90]}`), which the cell does not "
            "print"] if missing else []


def _decimals(number: str) -> int:
    return len(number.split(".")[1]) if "." in number else 0


def problems(graded: nbformat.NotebookNode) -> list[str]:
    """What the executed answer key ``graded`` states but does not print, one line each."""
    found = []
    for index, cell in enumerate(graded.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or (meta.get("grade") and not meta.get("solution")):
            continue
        printed = _output_text(cell)
        where = f"cell {index + 1} ({cell.get('id', '?')})"
        for value, bound, stated in _PRINTED.findall(printed):
            v, x = _value(value), _value(stated)
            ok = v < x if bound == "<" else v > x if bound == ">" else abs(v - x) <= 1e-9
            if not ok:
                found.append(f"{where}: prints {value} next to its health check "
                             f"{bound}{stated}")
        for line in cell.source.splitlines():
            if "print(" in line and "(health check:" in line:
                continue          # the printed form, checked above
            found += [f"{where}: {p}" for p in _comment_problems(line, printed)]
    return found
