"""Is the mutant catalog well formed, and does every mutant apply to its solution cell?"""

from __future__ import annotations

import nbformat
import pytest

from autograder.mutants import MutantError, load_catalog
from autograder.pipeline import graded_cells, list_days


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
