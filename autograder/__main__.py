"""``python -m autograder <command>``: the instructor's commands, over nbgrader.

Commands:
    build        generate release/ (student notebooks) and solutions/ (answer keys) from source/
    check-sync   regenerate into a temporary folder and diff with the committed release/, solutions/
    grade DIR    autograde DIR/<student_id>/<dayNN_slug>/*.ipynb, print a table, write a CSV
    verify       prove the hidden tests: reference 100%, blank 0, every mutant caught
    demo         grade the reference solutions and the blank release notebooks of every day
    author F NB  turn a plain-text notebook (see autograder/authoring.py) into a source notebook
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from autograder import pipeline
from autograder.pipeline import PipelineError


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=None,
                   help="course folder (default: found from cwd)")


def _cmd_build(args: argparse.Namespace) -> int:
    root = pipeline.find_root(args.root)
    t0 = time.monotonic()
    days = pipeline.build(root, args.day)
    print(f"built release/ and solutions/ for {len(days)} days in {time.monotonic() - t0:.1f} s")
    return 0


def _cmd_check_sync(args: argparse.Namespace) -> int:
    root = pipeline.find_root(args.root)
    problems = pipeline.check_sync(root)
    if problems:
        print("release/ and solutions/ are out of sync with source/:\n")
        print("\n\n".join(problems))
        print("\nFix: python -m autograder build, then commit release/ and solutions/.")
        return 1
    print(f"release/ and solutions/ match source/ ({len(pipeline.list_days(root))} days)")
    return 0


def _print_results(results: list[pipeline.Result], days: list[str], csv: Path | None) -> None:
    print(pipeline.format_table(results, days))
    for r in results:
        if r.status != "graded":
            print(f"  {r.student}/{r.day}: {r.status}: {r.detail}")
    if csv is not None:
        pipeline.write_csv(results, days, csv)
        print(f"\ngrades written to {csv}")


def _cmd_grade(args: argparse.Namespace) -> int:
    root = pipeline.find_root(args.root)
    days = pipeline.resolve_days(root, args.day)
    out = args.output or Path("grading")
    t0 = time.monotonic()
    results = pipeline.grade(root, args.submissions, days=days, students=args.student,
                             jobs=args.jobs, results_dir=out / "results")
    graded_days = [d for d in days if any(r.day == d for r in results)]
    _print_results(results, graded_days, out / "grades.csv")
    print(f"graded {len(results)} notebooks in {time.monotonic() - t0:.1f} s")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from autograder.verify import verify

    root = pipeline.find_root(args.root)
    report = verify(root, days=args.day, jobs=args.jobs, mutant_ids=args.mutant)
    days = sorted({r.day for r in report.results})
    refs = [r for r in report.results if r.student in ("reference", "blank")]
    print(pipeline.format_table(refs, days))
    print(f"\nmutants caught: {report.mutants_caught}/{report.mutants_total}; "
          f"{len(report.results)} notebooks graded in {report.seconds:.1f} s")
    if report.problems:
        print("\nverify FAILED:")
        for p in report.problems:
            print(f"  - {p}")
        return 1
    print("verify passed: reference 100%, blank 0, every mutant caught with its diagnosis")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import shutil

    root = pipeline.find_root(args.root)
    days = pipeline.resolve_days(root, args.day)
    out = args.output or Path("grading") / "demo"
    with tempfile.TemporaryDirectory(prefix="tfs-demo-") as tmp:
        subs = Path(tmp)
        for student, top in (("reference", "solutions"), ("blank", "release")):
            for day in days:
                src = root / top / day / pipeline.notebook_name(day)
                if not src.is_file():
                    raise PipelineError(f"{src} is missing: run `python -m autograder build`")
                (subs / student / day).mkdir(parents=True)
                shutil.copy2(src, subs / student / day / src.name)
        t0 = time.monotonic()
        results = pipeline.grade(root, subs, days=days, jobs=args.jobs,
                                 results_dir=out / "results")
    print("Sample submissions: 'reference' = solutions/, 'blank' = untouched release/\n")
    _print_results(results, days, out / "grades.csv")
    print(f"graded {len(results)} notebooks in {time.monotonic() - t0:.1f} s "
          f"with {args.jobs or os.cpu_count()} workers")
    return 0


def _cmd_author(args: argparse.Namespace) -> int:
    from autograder.authoring import author

    author(args.text, args.notebook)
    print(f"wrote {args.notebook}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="generate release/ and solutions/ from source/")
    _add_common(p)
    p.add_argument("--day", action="append", help="only this day (repeatable)")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("check-sync", help="fail if release/ or solutions/ differ from source/")
    _add_common(p)
    p.set_defaults(func=_cmd_check_sync)

    p = sub.add_parser("grade", help="autograde a folder of submissions")
    _add_common(p)
    p.add_argument("submissions", type=Path,
                   help="folder laid out as <student_id>/<dayNN_slug>/<notebook>.ipynb")
    p.add_argument("--day", action="append", help="only this day (repeatable)")
    p.add_argument("--student", action="append", help="only this student (repeatable)")
    p.add_argument("--jobs", type=int, default=None, help="parallel workers (default: cores)")
    p.add_argument("--output", type=Path, default=None,
                   help="where grades.csv and results/ go (default: ./grading)")
    p.set_defaults(func=_cmd_grade)

    p = sub.add_parser("verify", help="reference 100%%, blank 0, every mutant caught")
    _add_common(p)
    p.add_argument("--day", action="append", help="only this day (repeatable)")
    p.add_argument("--mutant", action="append", help="only this mutant id (repeatable)")
    p.add_argument("--jobs", type=int, default=None)
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("demo", help="grade reference and blank notebooks of every day")
    _add_common(p)
    p.add_argument("--day", action="append")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--output", type=Path, default=None)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("author", help="plain-text notebook -> nbgrader source notebook")
    p.add_argument("text", type=Path)
    p.add_argument("notebook", type=Path)
    p.set_defaults(func=_cmd_author)

    # Learner commands: selfcheck (grade one notebook with the hidden tests, offline) and
    # progress (points per day from the latest self-checks); see autograder/selfcheck.py.
    from autograder.selfcheck import add_learner_commands
    add_learner_commands(sub, _add_common)

    args = parser.parse_args(argv)
    # nbgrader runs helper executables (alembic) and kernels from PATH: make this
    # interpreter's bin folder come first even when it is called as .venv/bin/python.
    bindir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bindir:
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    try:
        return args.func(args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
