"""The mutant catalog: known mistakes applied to the reference solutions.

Each ``autograder/authoring/mutants/dayNN.toml`` lists mutants as tables::

    [[mutant]]
    id = "softmax-no-max-shift"              # unique, used as the student id when grading
    day = "day02_queries_keys_values"        # the assignment
    cell = "day02_softmax"                   # grade_id of the solution cell to edit
    find = "x - x.amax(dim=dim, keepdim=True)"   # text that occurs exactly once in that cell
    replace = "x"                            # what a learner wrote instead
    test = "day02_softmax_stable"            # the test cell that must lose its points
    diagnosis = "subtract the row maximum"   # words its failure message must contain
    why = "exp(1000) overflows to inf, and inf / inf is NaN"

``verify`` grades every mutant and checks that it loses points on ``test`` and that the
message of that test's failure contains ``diagnosis`` (case-insensitive). With
``alone = true`` it also checks that no other test of the day lost a point (but those listed
in ``also``, other tests of the same exercise): a mistake in one exercise costs that exercise
alone, not the exercises built on it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat

CATALOG = Path(__file__).with_name("mutants")
_FIELDS = ("id", "day", "cell", "find", "replace", "test", "diagnosis")


class MutantError(ValueError):
    """A malformed catalog entry; the message names the file and the mutant."""


@dataclass(frozen=True)
class Mutant:
    id: str
    day: str
    cell: str
    find: str
    replace: str
    test: str
    diagnosis: str
    why: str = ""
    all: bool = False  # replace every occurrence instead of exactly one
    # "one mistake costs once": every other test of the day keeps its points, but those of
    # ``also`` (other tests of the same exercise)
    alone: bool = False
    also: tuple[str, ...] = ()

    def apply(self, nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
        """Return a copy of ``nb`` with the mistake applied to the cell ``self.cell``."""
        nb = nbformat.from_dict(nb)  # deep copy
        for cell in nb.cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == self.cell:
                count = cell.source.count(self.find)
                if count == 0 or (count > 1 and not self.all):
                    raise MutantError(
                        f"mutant {self.id}: {self.find!r} occurs {count} times in cell "
                        f"{self.cell} (expected exactly once, or set all = true)"
                    )
                cell.source = cell.source.replace(self.find, self.replace)
                return nb
        raise MutantError(f"mutant {self.id}: no cell with grade_id {self.cell!r} in {self.day}")


def load_catalog(folder: Path = CATALOG) -> list[Mutant]:
    """Every mutant in ``folder/*.toml``, checked for required fields and unique ids."""
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for path in sorted(folder.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for entry in data.get("mutant", []):
            missing = [f for f in _FIELDS if f not in entry]
            if missing:
                raise MutantError(f"{path.name}: mutant {entry.get('id', '?')} lacks {missing}")
            unknown = set(entry) - set(Mutant.__dataclass_fields__)
            if unknown:
                raise MutantError(f"{path.name}: mutant {entry['id']} has unknown keys "
                                  f"{sorted(unknown)}")
            if entry["id"] in seen:
                raise MutantError(f"{path.name}: duplicate mutant id {entry['id']}")
            seen.add(entry["id"])
            mutants.append(Mutant(**entry))
    return mutants
