"""Is the mutant catalog well formed, and does every mutant apply to its solution cell?"""

from __future__ import annotations

import nbformat
import pytest

from autograder.authoring.mutants import MutantError, load_catalog
from autograder.grading.pipeline import graded_cells, list_days


def test_catalog_loads_with_unique_ids():
    """Does every catalog file parse, with required fields and unique ids?"""
    mutants = load_catalog()
    assert len({m.id for m in mutants}) == len(mutants)
    assert len([m for m in mutants if m.day[:5] in ("day01", "day02", "day03")]) >= 10


@pytest.mark.parametrize("mutant", load_catalog(), ids=lambda m: m.id)
def test_mutant_applies_and_targets_a_real_test(root, mutant):
    """Does the mutant's text occur in its cell, and does its declared test cell exist?"""
    assert mutant.day in list_days(root)
    nb = nbformat.read(str(root / "solutions" / mutant.day / f"{mutant.day}.ipynb"),
                       as_version=4)
    changed = mutant.apply(nb)
    assert changed.cells != nb.cells
    assert mutant.test in {gid for gid, _ in graded_cells(nb)}


def test_a_mutant_whose_text_is_absent_is_an_error(root):
    """Is a stale catalog entry reported with its id instead of silently doing nothing?"""
    import dataclasses

    m = dataclasses.replace(load_catalog()[0], find="this text is nowhere")
    nb = nbformat.read(str(root / "solutions" / m.day / f"{m.day}.ipynb"), as_version=4)
    with pytest.raises(MutantError, match=m.id):
        m.apply(nb)


def test_a_mutant_marked_alone_fails_verify_when_another_exercise_loses_points():
    """Does verify hold "one mistake costs once": a mutant marked alone that also costs a test
    outside its exercise is reported, naming that test; one of ``also`` is allowed?"""
    from autograder.authoring.mutants import Mutant
    from autograder.authoring.verify import check_mutant
    from autograder.core.records import Result, TestResult

    m = Mutant(id="m", day="d", cell="c", find="a", replace="b", test="t_own",
               diagnosis="sorted order", alone=True, also=("t_same_exercise",))
    own = TestResult("t_own", 0, 1, "number the characters in sorted order")
    same = TestResult("t_same_exercise", 0, 1, "differs")
    other = TestResult("t_other", 1, 2, "loss too high")
    result = Result("m", "d", "graded", tests=[own, same, TestResult("t_other", 2, 2)])
    assert check_mutant(m, result) is None
    result = Result("m", "d", "graded", tests=[own, same, other])
    problem = check_mutant(m, result)
    assert problem and "t_other lost 1" in problem and "t_same_exercise" not in problem


def test_every_day_has_a_mutant_whose_mistake_costs_its_own_exercise_alone(root):
    """One mistake costs once: every day's catalog holds a mutant marked alone, so verify
    proves, for each day, that a notebook whose only mistake is in one exercise loses points
    in that exercise's tests alone."""
    days = set(list_days(root))
    alone = {m.day for m in load_catalog() if m.alone}
    assert days <= alone, f"no mutant marked alone for {sorted(days - alone)}"
