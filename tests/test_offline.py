"""The course grades offline, and a machine without the data costs no student a point.

Each case runs the grader in a fresh process on a copy of this checkout (its own ``course``
package, so the shipped data can be taken away without touching this one), with an empty
dataset cache, no ``COURSE_DATA_DIR`` and every download pointed at a closed port:

1. the Day 8, 9 and 13 answer keys grade at 100% from the data shipped with the course;
2. with the shipped data removed as well, each of them is ``environment-error`` with the fix
   named, and nothing is charged; ``grade`` (the command) refuses to start and says why;
3. with the data back (the fix), grading again gives 100%.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DAYS = ["day08_mnist_as_sequences", "day09_training_loop", "day13_training_tinygpt"]

GRADE = r'''
import json, sys
from pathlib import Path
from autograder.grading import pipeline
from autograder.sandbox import GiB, Limits
root, subs, out = (Path(a) for a in sys.argv[1:4])
res = pipeline.grade(root, subs, days=sys.argv[4].split(","), jobs=2, results_dir=out,
                     sandbox="auto", limits=Limits(memory=3 * GiB, cell_timeout=180,
                                                   notebook_timeout=400))
print(json.dumps([r.to_json() for r in res]))
'''


def _copy_checkout(root: Path, dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = root / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _env(copy: Path, tmp: Path, tag: str) -> dict:
    """The environment of one round: a dataset cache of its own, empty when the round starts
    (a round that finds the shipped copy leaves it in its cache)."""
    env = {k: v for k, v in os.environ.items() if k != "COURSE_DATA_DIR"}
    cache = tmp / f"empty-cache-{tag}"
    cache.mkdir(exist_ok=True)
    env.update(PYTHONPATH=str(copy), COURSE_CACHE_DIR=str(cache),
               TFS_GRADING_CACHE=str(tmp / "grading-cache"),
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
               http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
               NO_PROXY="", no_proxy="")
    return env


def _grade(copy: Path, tmp: Path, tag: str) -> dict:
    subs = tmp / f"subs-{tag}"
    for day in DAYS:
        target = subs / "reference" / day / f"{day}.ipynb"
        target.parent.mkdir(parents=True)
        shutil.copy2(copy / "solutions" / day / f"{day}.ipynb", target)
    out = subprocess.run([sys.executable, "-c", GRADE, str(copy), str(subs),
                          str(tmp / f"out-{tag}"), ",".join(DAYS)], cwd=copy,
                         env=_env(copy, tmp, tag), capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    return {r["day"]: r for r in json.loads(out.stdout.strip().splitlines()[-1])}


@pytest.fixture(scope="module")
def offline(root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offline")
    copy = _copy_checkout(root, tmp / "checkout")
    probe = subprocess.run([sys.executable, "-c", "import course, autograder; "
                            "print(course.__file__, autograder.__file__)"], cwd=copy,
                           env=_env(copy, tmp, "probe"), capture_output=True, text=True,
                           check=True)
    assert probe.stdout.count(str(copy)) == 2, probe.stdout   # the copy's packages, not ours
    shipped = _grade(copy, tmp, "shipped")
    datasets = copy / "course" / "datasets"
    shutil.move(datasets, tmp / "datasets-aside")
    missing = _grade(copy, tmp, "missing")
    refused = subprocess.run([sys.executable, "-m", "autograder", "grade",
                              str(tmp / "subs-missing"),
                              "--output", str(tmp / "out-cli")], cwd=copy,
                             env=_env(copy, tmp, "cli"),
                             capture_output=True, text=True, timeout=600)
    shutil.move(tmp / "datasets-aside", datasets)
    fixed = _grade(copy, tmp, "fixed")
    return {"shipped": shipped, "missing": missing, "refused": refused, "fixed": fixed}


@pytest.mark.slow
@pytest.mark.parametrize("day", DAYS)
def test_answer_keys_grade_in_full_from_the_shipped_data(offline, day):
    r = offline["shipped"][day]
    assert (r["status"], r["score"]) == ("graded", r["max_score"]), r


@pytest.mark.slow
@pytest.mark.parametrize("day", DAYS)
def test_no_data_anywhere_is_the_machines_fault(offline, day):
    r = offline["missing"][day]
    assert r["status"] == "environment-error", r
    assert r["score"] == 0
    assert "fetch-data" in r["detail"] and "COURSE_DATA_DIR" in r["detail"], r["detail"]


@pytest.mark.slow
def test_grade_refuses_to_start_without_the_data(offline):
    out = offline["refused"]
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "fetch-data" in text and "Traceback" not in text, text[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("day", DAYS)
def test_grading_again_after_the_fix_pays_in_full(offline, day):
    r = offline["fixed"][day]
    assert (r["status"], r["score"]) == ("graded", r["max_score"]), r
