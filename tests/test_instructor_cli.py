"""What the instructor reads is true (issue 48, item 7): a submission in the wrong place is
named with the day it looks like, the summary counts what was graded, and a command given an
empty or wrong folder exits non-zero with one line."""

from __future__ import annotations

import re
import shutil

import pytest

from autograder.__main__ import main
from autograder.grading.collect import unplaced

DAY2 = "day02_queries_keys_values"
DAY3 = "day03_self_attention"
DAYS = [DAY2, DAY3]


def _put(root, path, day):
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "release" / day / f"{day}.ipynb", path)


def test_unplaced_notebooks_are_named_with_their_day(root, tmp_path):
    """Is every notebook outside <student>/<day>/ named, with the day its name or its graded
    cells point to, and a placed one left alone?"""
    subs = tmp_path / "subs"
    _put(root, subs / "erin" / "day2" / f"{DAY2}.ipynb", DAY2)          # wrong folder name
    _put(root, subs / "erin" / "my homework.ipynb", DAY3)                # no day folder
    _put(root, subs / "ada" / DAY2 / f"{DAY2}.ipynb", DAY2)              # placed
    lines = unplaced(subs, DAYS)
    assert len(lines) == 2, lines
    by = {line.split(":")[0]: line for line in lines}
    assert f"move it to erin/{DAY2}/" in by[f"erin/day2/{DAY2}.ipynb"]
    assert f"move it to erin/{DAY3}/" in by["erin/my homework.ipynb"]
    assert unplaced(subs, DAYS, students=["ada"]) == []


def test_grade_names_what_it_could_not_place_and_counts_what_it_graded(root, tmp_path,
                                                                        capsys):
    """With nothing placed, does grade say so, name the file, print no row of missing days
    and exit non-zero?"""
    subs = tmp_path / "subs"
    _put(root, subs / "erin" / "day2" / f"{DAY2}.ipynb", DAY2)
    rc = main(["grade", str(subs), "--root", str(root), "--no-sandbox", "--quiet",
               "--output", str(tmp_path / "grading")])
    out, err = capsys.readouterr()
    assert rc == 1
    assert f"not graded: erin/day2/{DAY2}.ipynb" in err and f"looks like {DAY2}" in err
    assert "graded 0 notebooks of 1 student(s)" in out
    assert out.count(": missing") == 0, out


def test_feedback_and_report_on_an_empty_folder_exit_non_zero(root, tmp_path, capsys):
    for cmd in ("feedback", "report"):
        rc = main([cmd, "--root", str(root), "--output", str(tmp_path / "nothing")])
        err = capsys.readouterr().err
        assert rc == 1 and err.count("\n") == 1 and "no results in" in err, (cmd, err)


def test_a_courses_settings_come_from_one_file_and_flags_win(tmp_path):
    """grading.toml in the grading folder sets the limits, jobs and sandbox once for a
    course; a flag given on the command line wins; a wrong key or value stops with one line
    that lists the keys."""
    import argparse

    from autograder import grade_commands as gc
    from autograder.grading.pipeline import PipelineError
    from autograder.sandbox import GiB

    def args(**given):
        keys = ("jobs", "memory_limit", "timeout", "notebook_timeout", "output_limit",
                "file_limit", "dask_scheduler")
        return argparse.Namespace(**({k: None for k in keys} | given), no_sandbox=False)

    out = tmp_path / "grading"
    out.mkdir()
    assert gc.course_settings(args(), out) is None
    (out / "grading.toml").write_text("jobs = 3\nmemory_limit = 6\ntimeout = 90\n"
                                      "sandbox = false\n")
    a = args(timeout=120)
    assert gc.course_settings(a, out) == out / "grading.toml"
    assert (a.jobs, a.memory_limit, a.timeout, a.no_sandbox) == (3, 6, 120, True)
    assert gc._limits(a).memory == 6 * GiB and gc._limits(a).cell_timeout == 120
    for text, said in (("memory = 6\n", "unknown setting 'memory'"),
                       ('jobs = "many"\n', "jobs = 'many' should be a positive int"),
                       ("jobs = true\n", "should be a positive int"),
                       ("timeout = -5\n", "should be a positive int"),
                       ("sandbox = 1\n", "sandbox should be true or false"),
                       ("jobs = [\n", "grading.toml")):
        (out / "grading.toml").write_text(text)
        with pytest.raises(PipelineError, match=re.escape(said)):
            gc.course_settings(args(), out)
