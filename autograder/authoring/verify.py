"""``verify``: the course's proof that its hidden tests grade correctly.

1. the reference solutions score 100% on every graded cell of every day;
2. the untouched release notebooks score 0 on every graded cell;
3. every mutant in the catalog loses points on its declared test, and that test's failure
   message contains the mutant's declared diagnosis;
4. every alternative (correct code written another way, ``tests/alternatives/``, see
   :mod:`autograder.authoring.alternatives`) scores 100%, as the reference does.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.authoring import alternatives, stated
from autograder.authoring.mutants import Mutant, load_catalog
from autograder.core.records import Status
from autograder.grading.pipeline import Result, grade, notebook_name, resolve_days


@dataclass
class Report:
    problems: list[str]
    mutants_total: int
    mutants_caught: int
    results: list[Result]
    seconds: float
    alternatives_total: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def check_mutant(m: Mutant, r: Result) -> str | None:
    """None when the mutant was caught with its diagnosis, else what went wrong."""
    if r.status != Status.GRADED:
        return f"mutant {m.id}: status {r.status} ({r.detail})"
    test = next((t for t in r.tests if t.grade_id == m.test), None)
    if test is None:
        return f"mutant {m.id}: no test cell {m.test!r} in {m.day}"
    if test.points >= test.max_points:
        return f"mutant {m.id}: test {m.test} still passed ({m.why or m.replace!r})"
    if m.diagnosis.lower() not in test.message.lower():
        return (f"mutant {m.id}: test {m.test} failed without the diagnosis "
                f"{m.diagnosis!r}; its message was: {test.message[:400]!r}")
    if m.alone:
        also = [t for t in r.tests if t.grade_id != m.test and t.grade_id not in m.also
                and t.points < t.max_points]
        if also:
            return (f"mutant {m.id}: one mistake cost more than its exercise: "
                    + "; ".join(f"{t.grade_id} lost {t.max_points - t.points:g} "
                                f"({t.message[:160]!r})" for t in also))
    return None


def verify(root: Path, days: list[str] | None = None, jobs: int | None = None,
           mutant_ids: list[str] | None = None, sandbox: bool | str = False,
           progress=None, secret: bytes | None = None,
           alternatives_dir: Path | None = None, only_alternatives: bool = False) -> Report:
    """Grade the reference, blank and mutant notebooks. They are trusted: no sandbox unless
    asked (``sandbox=True`` or "auto" grades them exactly as ``grade`` does). ``progress``:
    called with each result (see :class:`autograder.console.Progress`). ``secret``: the key
    the hidden checks' inputs are drawn from (default: the grader's own); a verify under
    several secrets proves the checks right for inputs nobody chose.
    ``alternatives_dir``: where the alternatives live (default ``root/tests/alternatives``);
    ``only_alternatives`` grades those alone (no reference, blank or mutants)."""
    start = time.monotonic()
    days = resolve_days(root, days)
    mutants = [m for m in load_catalog() if m.day in days
               and (not mutant_ids or m.id in mutant_ids) and not only_alternatives]
    alts = [a for a in alternatives.load(alternatives_dir or root / "tests" / "alternatives",
                                         resolve_days(root, None))
            if a.day in days and not mutant_ids]
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tfs-verify-") as tmp:
        subs = Path(tmp)
        work: list[tuple[str, str, Path | None]] = []
        for day in days if not only_alternatives else []:
            for student, top in (("reference", "solutions"), ("blank", "release")):
                src = root / top / day / notebook_name(day)
                if not src.is_file():
                    problems.append(f"{top}/{day} is missing: run `python -m autograder build`")
                    continue
                work.append((student, day, src))
        solution_nbs = {}
        for m in mutants:
            if m.day not in solution_nbs:
                solution_nbs[m.day] = nbformat.read(
                    str(root / "solutions" / m.day / notebook_name(m.day)), as_version=4)
            target = subs / f"mutant-{m.id}" / m.day / notebook_name(m.day)
            target.parent.mkdir(parents=True)
            nbformat.write(m.apply(solution_nbs[m.day]), str(target))
            work.append((f"mutant-{m.id}", m.day, target))
        for a in alts:
            nb = a.apply(nbformat.read(str(root / "release" / a.day / notebook_name(a.day)),
                                       as_version=4),
                         nbformat.read(str(root / "solutions" / a.day / notebook_name(a.day)),
                                       as_version=4))
            target = subs / f"alternative-{a.id}" / a.day / notebook_name(a.day)
            target.parent.mkdir(parents=True)
            nbformat.write(nb, str(target))
            work.append((f"alternative-{a.id}", a.day, target))
        results = grade(root, subs, days=days, jobs=jobs, work=work, sandbox=sandbox,
                        resume=False, progress=progress, results_dir=subs / "results",
                        secret=secret)
        by_key = {(r.student, r.day): r for r in results}
        for day in days:
            ref = by_key.get(("reference", day))
            if ref is None:
                continue
            bad = [t for t in ref.tests if t.points < t.max_points]
            if ref.status != Status.GRADED or bad:
                problems.append(f"reference {day}: status {ref.status}; failing tests: "
                                + "; ".join(f"{t.grade_id}: {t.message[:300]}" for t in bad))
            executed = subs / "results" / "reference" / f"{day}.ipynb"
            if executed.is_file():   # the numbers the notebook states, against what it prints
                problems += [f"reference {day}: {p}" for p in
                             stated.problems(nbformat.read(str(executed), as_version=4))]
    for day in days:
        blank = by_key.get(("blank", day))
        if blank is not None:
            bad = [t for t in blank.tests if t.points > 0]
            if blank.status != Status.GRADED or bad:
                problems.append(f"blank {day}: status {blank.status}; tests that passed on a "
                                "stub: " + ", ".join(t.grade_id for t in bad))
    for a in alts:
        r = by_key[(f"alternative-{a.id}", a.day)]
        bad = [t for t in r.tests if t.points < t.max_points]
        if r.status != Status.GRADED or bad:
            problems.append(f"alternative {a.path.name} (correct code written another way) "
                            f"lost points: status {r.status} {r.detail or ''}; "
                            + "; ".join(f"{t.grade_id}: {t.message[:400]}" for t in bad))
    caught = 0
    for m in mutants:
        err = check_mutant(m, by_key[(f"mutant-{m.id}", m.day)])
        if err:
            problems.append(err)
        else:
            caught += 1
    return Report(problems, len(mutants), caught, results, time.monotonic() - start,
                  len(alts))
