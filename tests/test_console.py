"""Do the long commands say what they are doing when their output is a log, not a terminal?"""

from __future__ import annotations

import io

from autograder.console import Progress
from autograder.grading.pipeline import Result


def test_progress_prints_a_line_per_notebook_off_a_terminal():
    """Off a terminal: one flushed line per notebook, with count, total, time and outcome."""
    out = io.StringIO()
    p = Progress("graded", stream=out, tty=False)
    p.set_total(2)
    p(Result("alice", "day03_self_attention", "graded", 7.0, 7.0))
    p(Result("bob", "day03_self_attention", "timeout", 0.0, 7.0))
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[1/2 ") and lines[0].endswith(
        "alice/day03_self_attention: graded 7/7")
    assert lines[1].startswith("[2/2 ") and "bob/day03_self_attention: timeout 0/7" in lines[1]


def test_progress_draws_one_bar_on_a_terminal():
    """On a terminal: a tqdm bar (no line per notebook) with the count and the last item."""
    out = io.StringIO()
    p = Progress("built", total=3, stream=out, tty=True)
    for day in ("day01", "day02", "day03"):
        p.item(day)
    p.close()
    text = out.getvalue()
    assert "built" in text and "3/3" in text and "day03" in text
    assert "[1/3" not in text
