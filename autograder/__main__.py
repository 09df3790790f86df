"""``python -m autograder <command>``: the instructor's commands, over nbgrader.

Commands:
    build        generate release/ (student notebooks) and solutions/ (answer keys) from source/
    check-sync   regenerate into a temporary folder and diff with the committed release/, solutions/
    grade DIR    autograde DIR/<student_id>/<dayNN_slug>/*.ipynb (or a zip) in a sandbox,
                 print a table, write a CSV; re-running grades only what changed
    accept S D   show a tampered submission's evidence; --yes pays its points in grades.csv
    feedback     HTML feedback per student and day (after grade)
    report       class report: score distributions, pass rates, frequent diagnoses
    similarity S pairs of submissions whose own code is alike, ranked, with a side-by-side report
    export       the grades in an LMS's import layout (Canvas, Moodle, CSV), through its roster
    verify       prove the hidden tests: reference 100%, blank 0, every mutant caught
    demo         grade the reference solutions and the blank release notebooks of every day
    fetch-data   fetch and verify the course's datasets into the cache (grade, verify and demo
                 first check that the datasets, the sandbox and the grading template are ready)
    author F NB  turn a plain-text notebook (format: docs/authors.md) into a source notebook
    selfcheck NB grade one learner notebook with the hidden tests, offline (notebook untouched)
    progress     the 14 days with the points of each day's latest self-check
    workspace    make or update the learner's own folder of notebooks (never overwrites)
    classroom    run the course on a JupyterHub: start, stop; release, collect, grade, return DAY
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from autograder.core.course import PipelineError

# Each command imports what it needs (nbgrader, nbformat, the pipeline) when it runs: the
# learner's ``selfcheck``, answered by the warm helper in about a second, starts without them.


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=None,
                   help="course folder (default: found from cwd)")


def _cmd_workspace(args: argparse.Namespace) -> int:
    from autograder.grading import pipeline
    from autograder.selfcheck import workspace

    root = pipeline.find_root(args.root)
    folder = args.dir if args.dir.is_absolute() else root / args.dir
    for line in workspace.sync(root, folder):
        print(line)
    print(f"your notebooks: {folder} (nothing there is ever overwritten)")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from autograder.authoring import build
    from autograder.console import Progress
    from autograder.grading import pipeline

    root = pipeline.find_root(args.root)
    t0 = time.monotonic()
    progress = Progress("built")
    days = build.build(root, args.day, progress=progress)
    progress.close()
    print(f"built release/ and solutions/ for {len(days)} days in {time.monotonic() - t0:.1f} s")
    return 0


def _cmd_check_sync(args: argparse.Namespace) -> int:
    from autograder.authoring import build
    from autograder.grading import pipeline

    root = pipeline.find_root(args.root)
    problems = build.check_sync(root)
    if problems:
        print("release/ and solutions/ are out of sync with source/:\n")
        print("\n\n".join(problems))
        print("\nFix: python -m autograder build, then commit release/ and solutions/.")
        return 1
    print(f"release/ and solutions/ match source/ ({len(pipeline.list_days(root))} days)")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from autograder.authoring.verify import verify
    from autograder.console import Progress
    from autograder.grading import pipeline, preflight

    root = pipeline.find_root(args.root)
    preflight.check(root, pipeline.resolve_days(root, args.day),
                    sandbox=bool(getattr(args, "sandbox", False)))
    secrets = ([bytes.fromhex(args.secret)] if args.secret else
               [os.urandom(32) for _ in range(args.secrets)] if args.secrets else [None])
    failed = 0
    for n, secret in enumerate(secrets, 1):
        if secret is not None:
            print(f"secret {n} of {len(secrets)}: {secret.hex()} (--secret reproduces it)")
        progress = Progress("verified")
        report = verify(root, days=args.day, jobs=args.jobs, mutant_ids=args.mutant,
                        sandbox=bool(getattr(args, "sandbox", False)), progress=progress,
                        secret=secret, only_alternatives=args.only_alternatives)
        progress.close()
        days = sorted({r.day for r in report.results})
        refs = [r for r in report.results if r.student in ("reference", "blank")
                or r.student.startswith("alternative-")]
        print(pipeline.format_table(refs, days))
        print(f"\nmutants caught: {report.mutants_caught}/{report.mutants_total}; "
              f"alternatives graded: {report.alternatives_total}; "
              f"{len(report.results)} notebooks graded in {report.seconds:.1f} s")
        if report.problems:
            failed += 1
            print("\nverify FAILED:")
            for p in report.problems:
                print(f"  - {p}")
            continue
        print("verify passed: reference and every alternative 100%, blank 0, every mutant "
              "caught with its diagnosis")
    return 1 if failed else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import shutil

    from autograder.console import Progress
    from autograder.grade_commands import print_results
    from autograder.grading import pipeline, preflight

    root = pipeline.find_root(args.root)
    days = pipeline.resolve_days(root, args.day)
    out = args.output or Path("grading") / "demo"
    preflight.check(root, days, sandbox=bool(args.sandbox))
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
        progress = Progress("graded")
        results = pipeline.grade(root, subs, days=days, jobs=args.jobs,
                                 results_dir=out / "results", resume=False,
                                 sandbox=bool(args.sandbox), progress=progress)
        progress.close()
    print("Sample submissions: 'reference' = solutions/, 'blank' = untouched release/\n")
    print_results(results, days, out / "grades.csv")
    print(f"graded {len(results)} notebooks in {time.monotonic() - t0:.1f} s "
          f"with {args.jobs or os.cpu_count()} workers")
    return 0


def _cmd_fetch_data(args: argparse.Namespace) -> int:
    from autograder.grading import preflight
    from course import data

    names = [n for n in data.REGISTRY if args.optional or n in data.SHIPPED]
    problems = preflight.fetch_problems(names)
    for name in names:
        entry = data.REGISTRY[name]
        if not any(f"({entry.filename})" in p for p in problems):
            print(f"{name}: verified ({entry.checksum}), "
                  f"{data.cache_dir() / entry.dataset / entry.filename}")
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if problems:
        print(preflight.DATASET_FIX, file=sys.stderr)
        return 1
    print(f"the datasets are in {data.cache_dir()} (set {data.CACHE_ENV} to use another); "
          "grading kernels see them read-only")
    return 0


def _cmd_author(args: argparse.Namespace) -> int:
    from autograder.authoring.author import author

    author(args.text, args.notebook)
    print(f"wrote {args.notebook}")
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    from autograder.authoring.measure import main as record_main
    from autograder.grading import pipeline

    args.root = pipeline.find_root(args.root)
    return record_main(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    # Learner commands: selfcheck (grade one notebook with the hidden tests, offline) and
    # progress (points per day from the latest self-checks); see autograder/selfcheck/.
    from autograder.selfcheck import add_learner_commands
    if argv[:1] in (["selfcheck"], ["progress"]):
        add_learner_commands(sub, _add_common)
        return _run(parser.parse_args(argv))

    p = sub.add_parser("build", help="generate release/ and solutions/ from source/")
    _add_common(p)
    p.add_argument("--day", action="append", help="only this day (repeatable)")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("workspace", help="make or update your own folder of notebooks "
                       "from release/ (never overwrites a file)")
    _add_common(p)
    p.add_argument("--dir", type=Path, default=Path("notebooks"),
                   help="the folder (default: notebooks/ in the course folder)")
    p.set_defaults(func=_cmd_workspace)

    p = sub.add_parser("check-sync", help="fail if release/ or solutions/ differ from source/")
    _add_common(p)
    p.set_defaults(func=_cmd_check_sync)

    from autograder.grade_commands import add_grading_commands
    add_grading_commands(sub, _add_common)
    from autograder.cohort.export import add_export_command
    add_export_command(sub, _add_common)
    from autograder.cohort.similarity import add_similarity_command
    add_similarity_command(sub, _add_common)

    p = sub.add_parser("verify", help="reference 100%%, blank 0, every mutant caught")
    _add_common(p)
    p.add_argument("--day", action="append", help="only this day (repeatable)")
    p.add_argument("--mutant", action="append", help="only this mutant id (repeatable)")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--sandbox", action="store_true",
                   help="grade in the bubblewrap sandbox, as `grade` does (default: off, "
                        "these notebooks are trusted)")
    p.add_argument("--secrets", type=int, default=0, metavar="N",
                   help="verify N times, each under a fresh secret (the hidden checks' "
                        "inputs are drawn from it); default: once, under the grader's own")
    p.add_argument("--secret", help="verify under this secret (hex, as printed by --secrets)")
    p.add_argument("--only-alternatives", action="store_true",
                   help="grade only tests/alternatives/ (correct code written another way; "
                        "each must score 100%%)")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("demo", help="grade reference and blank notebooks of every day")
    _add_common(p)
    p.add_argument("--day", action="append")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--output", type=Path, default=None)
    p.add_argument("--sandbox", action="store_true",
                   help="grade in the bubblewrap sandbox (default: off, trusted notebooks)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("fetch-data", help="fetch and verify the datasets into the cache")
    p.add_argument("--optional", action="store_true",
                   help="also the optional data: the MNIST training set and CIFAR-10 (180 MB)")
    p.set_defaults(func=_cmd_fetch_data)

    p = sub.add_parser("author", help="plain-text notebook -> nbgrader source notebook")
    p.add_argument("text", type=Path)
    p.add_argument("notebook", type=Path)
    p.set_defaults(func=_cmd_author)

    p = sub.add_parser("record", help="run every answer key; write course/record.json and the "
                                      "table in docs/record.md (idle machine: minutes)")
    _add_common(p)
    p.add_argument("--profile", action="append", choices=["cpu", "grading", "gpu"],
                   help="profile to measure (repeatable; default: cpu and grading)")
    p.add_argument("--day", action="append", help="only this day (repeatable)")
    p.set_defaults(func=_cmd_record)

    add_learner_commands(sub, _add_common)
    from autograder.classroom import add_classroom_command
    add_classroom_command(sub, _add_common)
    return _run(parser.parse_args(argv))


def _run(args: argparse.Namespace) -> int:
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
