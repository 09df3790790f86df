"""Tests for autograder/selfcheck/: a learner grades one notebook and sees what to fix."""

from __future__ import annotations

import hashlib
import json
import shutil

import nbformat
import pytest

from autograder import selfcheck as S
from autograder.__main__ import main
from autograder.grading import pipeline

DAY2 = "day02_queries_keys_values"


def test_day_is_read_from_folder_or_file_name(root, tmp_path):
    """Is the day found from the folder, from a renamed file, and refused when unknown?"""
    assert S.day_of(root / "release" / DAY2 / f"{DAY2}.ipynb", root) == DAY2
    assert S.day_of(tmp_path / "day02-copy.ipynb", root) == DAY2
    with pytest.raises(pipeline.PipelineError, match="cannot tell which day"):
        S.day_of(tmp_path / "homework.ipynb", root)


def test_tests_are_grouped_under_their_exercise(root):
    """Is every Day 2 test cell mapped to its exercise heading and its visible comment?"""
    tests = S.test_map(root, DAY2)
    assert tests["day02_softmax_values"].exercise.startswith("Exercise 1")
    assert tests["day02_attention_mask"].exercise.startswith("Exercise 2")
    assert "masks" in tests["day02_attention_mask"].checks
    assert "BEGIN" not in tests["day02_attention_mask"].checks
    # a markdown cell with two headings: the exercise's, the later one, is the test's
    day3 = S.test_map(root, "day03_self_attention")
    assert day3["day03_parameters"].exercise.startswith("Exercise")


def test_explanations_for_unfinished_work():
    """Are NotImplementedError and NameError turned into advice, CheckFailure kept as is?"""
    assert "not written yet" in S.explain("NotImplementedError: ")
    assert "Restart & Run All" in S.explain("NameError: name 'softmax' is not defined")
    assert S.explain("CheckFailure: fill with -inf") == "fill with -inf"


def test_report_prints_points_status_and_diagnosis(root, tmp_path):
    """Does the report show per-exercise points, pass/fail and the failing test's diagnosis?"""
    nb = tmp_path / f"{DAY2}.ipynb"
    nb.write_text("{}", encoding="utf-8")
    tests = [pipeline.TestResult("day02_softmax_values", 2, 2),
             pipeline.TestResult("day02_softmax_stable", 1, 1),
             pipeline.TestResult("day02_attention_values", 3, 3),
             pipeline.TestResult("day02_attention_mask", 0, 2,
                                 "CheckFailure: masked positions still get weight")]
    result = pipeline.Result("learner", DAY2, "graded", 6, 8, tests)
    text, groups = S.format_report(result, S.test_map(root, DAY2), nb, 3.0, None)
    assert "3/3 points" in text and "3/5 points" in text
    assert "✘ FAIL  0/2  day02_attention_mask" in text
    assert "diagnosis: masked positions still get weight" in text
    assert "Total: 6/8 points (75%), 1 test to fix" in text
    assert len(groups) == 2


def test_cli_refuses_a_missing_notebook(tmp_path, capsys):
    """Does `selfcheck` on a path that does not exist say so and exit 2?"""
    assert main(["selfcheck", str(tmp_path / "nope.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_one_bug_is_diagnosed_and_progress_saved(root, tmp_path, capsys):
    """Does a Day 2 notebook with one bug lose exactly that test, with the right diagnosis,
    while the notebook itself is left byte-for-byte unchanged?"""
    nb_path = _buggy_day2(root, tmp_path)
    folder = nb_path.parent
    before = hashlib.sha256(nb_path.read_bytes()).hexdigest()

    assert main(["selfcheck", str(nb_path)]) == 1
    out = capsys.readouterr().out
    assert hashlib.sha256(nb_path.read_bytes()).hexdigest() == before
    assert "✘ FAIL  0/2  day02_attention_mask" in out and "-inf" in out
    assert "Total: 6/8 points (75%), 1 test to fix" in out
    saved = json.loads((tmp_path / "my-course" / ".course_progress.json").read_text())
    assert saved["days"][DAY2]["score"] == 6.0
    assert sorted(p.name for p in folder.iterdir()) == [nb_path.name]

    assert main(["progress", str(tmp_path / "my-course")]) == 0
    assert "6/8" in capsys.readouterr().out


def _buggy_day2(root, tmp_path):
    """my-course/day02.../day02....ipynb: the answer key with its mask filled with 0, not -inf."""
    folder = tmp_path / "my-course" / DAY2
    folder.mkdir(parents=True)
    nb_path = folder / f"{DAY2}.ipynb"
    shutil.copy2(root / "solutions" / DAY2 / f"{DAY2}.ipynb", nb_path)
    nb = nbformat.read(str(nb_path), as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            cell.source = cell.source.replace('masked_fill(~mask, float("-inf"))',
                                              "masked_fill(~mask, 0.0)")
    nbformat.write(nb, str(nb_path))
    return nb_path


def _standby_processes(marker: str = "tfs-standby-") -> dict[int, str]:
    """Live processes whose command line names ``marker``: pid -> command line."""
    from pathlib import Path

    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            if marker in cmdline:
                found[int(proc.name)] = cmdline
    return found


def _standby(nb_path):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "autograder", "selfcheck", "--standby",
                             str(nb_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=str(nb_path.parent))


def _wait_for_kernel(proc, seconds: float = 120) -> tuple[set[int], str]:
    """The standby's kernel processes and its folder, once its kernel has started."""
    import re
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        for pid, cmdline in _standby_processes().items():
            m = re.search(r"(/[^\x00]*?/tfs-standby-[^/\x00]+)/worker", cmdline)
            try:
                ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if m and ppid == proc.pid:        # this standby's kernel, not another's
                return set(_standby_processes(m.group(1))), m.group(1)
        time.sleep(0.2)
    raise AssertionError("the standby started no kernel")


@pytest.mark.slow
def test_standby_grades_like_selfcheck_and_leaves_nothing(root, tmp_path, capsys):
    """Does a self-check made ready ahead of time (the button's standby) report exactly what
    the usual self-check reports, give its exit status on the last line, and leave no
    kernel behind? And does one that is never told to grade stop when its input closes?"""
    from pathlib import Path

    nb_path = _buggy_day2(root, tmp_path)
    assert main(["selfcheck", "--no-save", str(nb_path)]) == 1
    # Each self-check draws its own inputs (a fresh secret), so the numbers of a diagnosis
    # differ from run to run; the verdicts, points and what each test checks do not.
    verdicts = ("  ✔", "  ✘", "         checks:")
    cold = [line for line in capsys.readouterr().out.splitlines() if line.startswith(verdicts)]
    assert any("✘ FAIL  0/2  day02_attention_mask" in line for line in cold)

    proc = _standby(nb_path)
    kernels, folder = _wait_for_kernel(proc)
    out, _ = proc.communicate("go\n", timeout=300)
    lines = out.rstrip("\n").split("\n")      # not splitlines(): it splits at \x1e too
    assert lines[0] == "\x1eready" and lines[-1] == "\x1eexit 1"
    assert [line for line in lines if line.startswith(verdicts)] == cold
    assert "Total: 6/8 points (75%), 1 test to fix" in out
    assert proc.returncode == 1
    assert not set(_standby_processes(folder)) & kernels
    assert not Path(folder).exists()

    idle = _standby(nb_path)
    kernels, folder = _wait_for_kernel(idle)
    out, _ = idle.communicate("", timeout=120)
    assert out == "\x1eready\n" and idle.returncode == 2
    assert not set(_standby_processes(folder)) & kernels
    assert not Path(folder).exists()


def test_a_killed_standby_leaves_nothing_for_long(tmp_path, monkeypatch):
    """The folder and log of a standby that was killed (no clean-up) go at the next standby's
    start; those of a live one stay."""
    import os
    import tempfile

    from autograder.selfcheck import standby

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = 4_000_000                      # above pid_max: no such process
    (tmp_path / f"tfs-standby-{dead}-abc" / "worker").mkdir(parents=True)
    (tmp_path / f"tfs-standby-{dead}-def.log").write_text("x")
    (tmp_path / f"tfs-standby-{os.getpid()}-ghi").mkdir()
    standby._sweep_stale()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"tfs-standby-{os.getpid()}-ghi"]
