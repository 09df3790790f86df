"""Every self-test question has an answer to reveal, and every numeric check says what it states.

Each day's recap lists its questions after "**Self-test.**"; the answers follow, one
``<details><summary>Answer k</summary>`` block per question (collapsed in JupyterLab and in the
exported HTML), in the recap cell or the markdown cells right after it. A question with a number
for an answer is checked by ``course.selftest.check_answer``; its expected value is computed
there, the revealed answer writes it, and the day's check cell offers one commented call per such
question.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from course import selftest
from course.selftest import QUESTIONS, check_answer, verdict

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "source").glob("day*/day*.ipynb"))
MARKER = "**Self-test.**"
DETAILS = re.compile(r"<details(?P<attrs>[^>]*)>\s*<summary>(?P<summary>.*?)</summary>"
                     r"(?P<body>.*?)</details>", re.S)
CALL = re.compile(r"^#\s*check_answer\((\d+),\s*(\d+),\s*(.+?)\)\s*(?:#.*)?$", re.M)


def _day(path: Path) -> int:
    return int(path.name[3:5])


def _self_test(path: Path) -> tuple[list[int], list[re.Match], nbformat.NotebookNode, int]:
    """The question numbers, the <details> blocks that answer them, the notebook, the recap."""
    nb = nbformat.read(path, as_version=4)
    recaps = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and MARKER in c.source]
    assert len(recaps) == 1, f"{path.name}: {len(recaps)} cells hold {MARKER}"
    recap = recaps[0]
    after = nb.cells[recap].source.split(MARKER, 1)[1]
    lines = after.splitlines()
    numbers, end = [], 0
    for i, line in enumerate(lines):
        m = re.match(r"(\d+)\. \S", line)
        if m:
            numbers.append(int(m.group(1)))
            end = i + 1
        elif line.strip() and not line.startswith(" ") and numbers:
            break                                        # the list is over
        elif line.startswith(" ") and numbers:
            end = i + 1                                  # a continuation line of an item
    text = "\n".join(lines[end:])
    for cell in nb.cells[recap + 1:]:
        if cell.cell_type != "markdown":
            break
        text += "\n\n" + cell.source
    return numbers, list(DETAILS.finditer(text)), nb, recap


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_every_self_test_question_has_an_answer_to_reveal(path):
    numbers, answers, _, _ = _self_test(path)
    assert numbers, f"{path.name}: no numbered questions after {MARKER}"
    assert numbers == list(range(1, len(numbers) + 1)), f"{path.name}: questions {numbers}"
    summaries = [a.group("summary").strip() for a in answers]
    assert summaries == [f"Answer {n}" for n in numbers], (
        f"{path.name}: {len(numbers)} questions, answers {summaries}: every question needs a "
        "<details><summary>Answer k</summary> block after the list")
    for n, a in zip(numbers, answers, strict=True):
        assert "open" not in a.group("attrs"), f"{path.name}: answer {n} is not collapsed"
        body = a.group("body")
        # markdown inside <details> renders only when blank lines separate it from the tags
        assert body.startswith("\n\n") and body.endswith("\n\n"), \
            f"{path.name}: answer {n} needs a blank line after <summary> and before </details>"
        words = len(re.findall(r"\w+", body))
        assert words >= 40, f"{path.name}: answer {n} has {words} words: give the reasoning"


def _answer_text(day: int, question: int) -> str:
    path = next(p for p in NOTEBOOKS if _day(p) == day)
    _, answers, _, _ = _self_test(path)
    return answers[question - 1].group("body")


def _parse(stated: str):
    if stated.startswith("("):
        return tuple(int(x) for x in stated.strip("()").split(","))
    return float(stated.replace(",", ""))


@pytest.mark.parametrize("key", sorted(QUESTIONS), ids=lambda k: f"day{k[0]}-q{k[1]}")
def test_a_numeric_check_agrees_with_the_answer_it_states(key, capsys):
    day, number = key
    q = QUESTIONS[key]
    path = next(p for p in NOTEBOOKS if _day(p) == day)
    numbers, _, _, _ = _self_test(path)
    assert number in numbers, f"Day {day} has no question {number}"
    text = " ".join(_answer_text(day, number).split())
    for part in q.parts:
        # the answer writes the value the check expects, and that text is the value
        assert part.stated in text, (
            f"Day {day} question {number}: the answer does not state {part.stated!r} "
            f"({part.what})")
        stated = _parse(part.stated)
        if isinstance(part.value, tuple):
            assert stated == part.value
        else:
            decimals = len(part.stated.split(".")[1]) if "." in part.stated else 0
            assert abs(stated - part.value) <= 0.5 * 10**-decimals + 1e-12, (
                f"Day {day} question {number}: {part.stated} is not {part.value}")
    right = tuple(p.value for p in q.parts) if len(q.parts) > 1 else q.parts[0].value
    ok, message = verdict(day, number, right)
    assert ok and message.startswith("✅ right: "), message
    # the form the answer writes is accepted too ("787,968", "(2, 10, 7)")
    written = tuple(p.stated for p in q.parts) if len(q.parts) > 1 else q.parts[0].stated
    assert verdict(day, number, written)[0], f"{written!r} is refused"
    check_answer(day, number, right)
    assert capsys.readouterr().out == message + "\n"


def _wrong(value):
    if isinstance(value, tuple):
        return (value[0] + 1, *value[1:])
    return value * 1.5 + 1


@pytest.mark.parametrize("key", sorted(QUESTIONS), ids=lambda k: f"day{k[0]}-q{k[1]}")
def test_a_wrong_answer_says_not_quite_and_never_raises(key):
    day, number = key
    q = QUESTIONS[key]
    for i in range(len(q.parts)):
        answer = [p.value for p in q.parts]
        answer[i] = _wrong(answer[i])
        answer = tuple(answer) if len(q.parts) > 1 else answer[0]
        ok, message = verdict(day, number, answer)
        assert not ok and message.startswith("❌ not quite: "), message
    for part_index, part in enumerate(q.parts):
        for slip, _ in part.slips:
            answer = [p.value for p in q.parts]
            answer[part_index] = slip
            ok, message = verdict(day, number, tuple(answer) if len(q.parts) > 1 else slip)
            assert not ok, f"the slip {slip!r} is accepted"
    for junk in ("many", None, True, float("nan"), ..., [1, 2, 3, 4, 5]):
        ok, message = verdict(day, number, junk)
        assert not ok and message.startswith("❌ not quite: "), (junk, message)


def test_an_unknown_question_raises_value_error():
    with pytest.raises(ValueError, match="no numeric check"):
        check_answer(1, 1, 3)
    with pytest.raises(ValueError, match="numeric questions: 2"):
        check_answer(3, 1, 3)
    with pytest.raises(ValueError):
        check_answer(99, 1, 0)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_the_check_cell_offers_every_numeric_question_and_runs_silently(path, capsys):
    day = _day(path)
    _, _, nb, recap = _self_test(path)
    wanted = sorted(n for d, n in QUESTIONS if d == day)
    cells = [c for c in nb.cells if c.cell_type == "code" and "course.selftest" in c.source]
    if not wanted:
        assert not cells, f"{path.name}: a check cell without numeric questions"
        return
    assert len(cells) == 1, f"{path.name}: {len(cells)} check cells"
    cell = cells[0]
    index = nb.cells.index(cell)
    assert index > recap and all(c.cell_type == "markdown" for c in nb.cells[recap:index]), \
        f"{path.name}: the check cell must follow the recap and its answers"
    assert not cell.get("metadata", {}).get("nbgrader"), "the check cell is never graded"
    calls = CALL.findall(cell.source)
    assert sorted(int(n) for d, n, _ in calls if int(d) == day) == wanted, calls
    for d, n, arg in calls:
        parts = len(QUESTIONS[(int(d), int(n))].parts)
        assert arg == ("..." if parts == 1 else "(" + ", ".join(["..."] * parts) + ")"), \
            f"{path.name}: an example must not give the answer away: {arg}"
    exec(compile(cell.source, path.name, "exec"), {})      # uncommented: only the import
    assert capsys.readouterr().out == ""


def test_selftest_stays_away_from_the_grader():
    """A learning aid: it imports nothing but the standard library, and no grading material."""
    import ast

    source = Path(selftest.__file__).read_text(encoding="utf-8")
    assert "autograder" not in source
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "math", "dataclasses"}, imported
