"""``python -m autograder <command>``: the instructor's commands, over nbgrader.

Commands:
    build        generate release/ (student notebooks) and solutions/ (answer keys) from source/
    check-sync   regenerate into a temporary folder and diff with the committed release/, solutions/
    grade DIR    autograde DIR/<student_id>/<dayNN_slug>/*.ipynb (or a zip) in a sandbox,
                 print a table, write a CSV; re-running grades only what changed
    accept S D   show a tampered submission's evidence; --yes pays its points in grades.csv
    feedback     HTML feedback per student and day (after grade)
    report       class report: score distributions, pass rates, frequent diagnoses
    verify       prove the hidden tests: reference 100%, blank 0, every mutant caught
    demo         grade the reference solutions and the blank release notebooks of every day
    fetch-data   fetch and verify the course's datasets into the cache (grade, verify and demo
                 first check that the datasets, the sandbox and the grading template are ready)
    author F NB  turn a plain-text notebook (format: docs/authors.md) into a source notebook
    selfcheck NB grade one learner notebook with the hidden tests, offline (notebook untouched)
    progress     the 14 days with the points of each day's latest self-check
    classroom    run the course on a JupyterHub: start, stop; release, collect, grade, return DAY
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from autograder.authoring import build
from autograder.console import Progress
from autograder.grading import pipeline
from autograder.grading.pipeline import PipelineError


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=None,
                   help="course folder (default: found from cwd)")


def _cmd_build(args: argparse.Namespace) -> int:
    root = pipeline.find_root(args.root)
    t0 = time.monotonic()
    progress = Progress("built")
    days = build.build(root, args.day, progress=progress)
    progress.close()
    print(f"built release/ and solutions/ for {len(days)} days in {time.monotonic() - t0:.1f} s")
    return 0


def _cmd_check_sync(args: argparse.Namespace) -> int:
    root = pipeline.find_root(args.root)
    problems = build.check_sync(root)
    if problems:
        print("release/ and solutions/ are out of sync with source/:\n")
        print("\n\n".join(problems))
        print("\nFix: python -m autograder build, then commit release/ and solutions/.")
        return 1
    print(f"release/ and solutions/ match source/ ({len(pipeline.list_days(root))} days)")
    return 0


def _print_results(results: list[pipeline.Result], days: list[str], csv: Path | None) -> None:
    from autograder.core import acceptance

    print(pipeline.format_table(results, days))
    for r in results:
        if r.status != "graded":
            print(f"  {r.student}/{r.day}: {r.status}: {r.detail}")
    if csv is not None:
        accepted = acceptance.load(csv.parent / "accepted.json")
        pipeline.write_csv(results, days, csv, accepted)
        unpaid = [r for r in results if acceptance.paid(r, accepted) != r.score]
        print(f"\ngrades written to {csv}")
        if unpaid:
            print(f"{len(unpaid)} tampered submission(s) pay 0 until you accept them, after "
                  "reading the evidence: python -m autograder accept STUDENT DAY")
    faults = sum(r.status == "environment-error" for r in results)
    if faults:
        print(f"{faults} environment-error result(s): the grader's fault, not the student's; "
              "nothing charged (empty in grades.csv). Fix what each says, then grade again: "
              "they are graded again, unchanged results are kept.")


def _cmd_accept(args: argparse.Namespace) -> int:
    from autograder.core import acceptance

    root = pipeline.find_root(args.root)
    day = pipeline.resolve_days(root, [args.day])[0]
    out = args.output or Path("grading")
    path = out / "results" / args.student / f"{day}.json"
    if not path.is_file():
        print(f"no result for {args.student}/{day} in {out / 'results'}", file=sys.stderr)
        return 2
    result = pipeline.Result.from_json(json.loads(path.read_text(encoding="utf-8")))
    print(f"{result.student}/{result.day}: {result.status}, {result.score:g}/"
          f"{result.max_score:g} points")
    for flag in result.flags or ["(no flags)"]:
        print(f"  evidence: {flag}")
    if result.status not in acceptance.UNPAID:
        print("nothing to accept: this result already pays its points")
        return 0
    file = out / "accepted.json"
    accepted = acceptance.load(file)
    if args.revoke:
        accepted.discard((result.student, result.day, result.key))
    elif not args.yes:
        print("re-run with --yes to pay these points (or --revoke to take an acceptance back)")
        return 0
    else:
        accepted.add((result.student, result.day, result.key))
    acceptance.save(file, accepted)
    results = pipeline.load_results(out / "results")
    days = [d for d in pipeline.list_days(root) if any(r.day == d for r in results)]
    pipeline.write_csv(results, days, out / "grades.csv", accepted)
    paid = acceptance.paid(result, accepted)
    print(f"{'revoked' if args.revoke else 'accepted'}: {result.student}/{result.day} now "
          f"pays {paid:g} points; {out / 'grades.csv'} rewritten")
    return 0


def _limits(args: argparse.Namespace):
    from autograder.sandbox import GiB, Limits, MiB

    lim = Limits()
    if getattr(args, "memory_limit", None):
        lim.memory = int(args.memory_limit * GiB)
    if getattr(args, "timeout", None):
        lim.cell_timeout = args.timeout
    if getattr(args, "notebook_timeout", None):
        lim.notebook_timeout = args.notebook_timeout
    if getattr(args, "output_limit", None):
        lim.output = int(args.output_limit * MiB)
    if getattr(args, "file_limit", None):
        lim.file_size = int(args.file_limit * MiB)
    return lim


def _cmd_grade(args: argparse.Namespace) -> int:
    root = pipeline.find_root(args.root)
    days = pipeline.resolve_days(root, args.day)
    out = args.output or Path("grading")
    t0 = time.monotonic()
    if args.no_sandbox:
        print("warning: --no-sandbox: student code runs with your permissions, sees the hidden "
              "tests and can reach the network; grade only notebooks you trust.",
              file=sys.stderr)
    from autograder.grading import preflight

    ready = days
    if args.submissions.is_dir():  # the days there are (a zip is unpacked by grade)
        ready = sorted({d for _, d, _ in pipeline.discover(args.submissions, days,
                                                           args.student)})
    if ready:
        preflight.check(root, ready, sandbox=not args.no_sandbox)
    problems: list[str] = []
    progress = None if args.quiet else Progress("graded")
    results = pipeline.grade(root, args.submissions, days=days, students=args.student,
                             jobs=args.jobs, results_dir=out / "results",
                             sandbox=not args.no_sandbox, limits=_limits(args),
                             resume=not args.no_resume, dask_scheduler=args.dask_scheduler,
                             progress=progress, collect_problems=problems)
    if progress is not None:
        progress.close()
    for why in problems:
        print(f"not graded: {why}", file=sys.stderr)
    graded_days = [d for d in days if any(r.day == d for r in results)]
    _print_results(results, graded_days, out / "grades.csv")
    counts = {s: sum(r.status == s for r in results) for s in pipeline.STATUSES}
    print("statuses: " + ", ".join(f"{s} {n}" for s, n in counts.items() if n))
    print(f"graded {len(results)} notebooks in {time.monotonic() - t0:.1f} s; results in "
          f"{out / 'results'} (re-running grades only what changed)")
    return 0


def _cmd_feedback(args: argparse.Namespace) -> int:
    from autograder.grading.feedback import write_feedback

    out = args.output or Path("grading")
    pages = write_feedback(out / "results", out / "feedback", students=args.student,
                           days=args.day)
    print(f"wrote {len(pages)} feedback pages under {out / 'feedback'}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from autograder.grading.report import write_report

    out = args.output or Path("grading")
    page = write_report(out / "results", out / "report")
    print(f"class report: {page}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from autograder.authoring.verify import verify
    from autograder.grading import preflight

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

    from autograder.grading import preflight

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
    _print_results(results, days, out / "grades.csv")
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

    args.root = pipeline.find_root(args.root)
    return record_main(args)


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
    p.add_argument("--no-sandbox", action="store_true",
                   help="run kernels without bubblewrap (only for notebooks you trust)")
    p.add_argument("--no-resume", action="store_true",
                   help="re-grade everything, even unchanged submissions")
    p.add_argument("--dask-scheduler", metavar="ADDRESS", default=None,
                   help="send each submission to this Dask scheduler (tcp://host:8786)")
    p.add_argument("--memory-limit", type=float, metavar="GiB", help="per kernel (default 4)")
    p.add_argument("--timeout", type=int, metavar="S", help="per cell (default 180)")
    p.add_argument("--notebook-timeout", type=int, metavar="S",
                   help="per notebook (default 600)")
    p.add_argument("--output-limit", type=float, metavar="MiB",
                   help="output a notebook may print (default 2)")
    p.add_argument("--file-limit", type=float, metavar="MiB",
                   help="largest file a notebook may write (default 256)")
    p.add_argument("--quiet", action="store_true", help="no line per graded notebook")
    p.set_defaults(func=_cmd_grade)

    p = sub.add_parser("accept", help="show a tampered submission's evidence and pay it")
    p.add_argument("student")
    p.add_argument("day", help="day number or name (3, day03, day03_self_attention)")
    p.add_argument("--output", type=Path, help="grading folder (default: grading)")
    p.add_argument("--yes", action="store_true", help="accept: pay the points it earned")
    p.add_argument("--revoke", action="store_true", help="take an acceptance back")
    _add_common(p)
    p.set_defaults(func=_cmd_accept)

    p = sub.add_parser("feedback", help="HTML feedback per student and day from grade results")
    _add_common(p)
    p.add_argument("--output", type=Path, default=None,
                   help="the folder given to grade --output (default: ./grading)")
    p.add_argument("--day", action="append")
    p.add_argument("--student", action="append")
    p.set_defaults(func=_cmd_feedback)

    p = sub.add_parser("report", help="class report (HTML + PNG figures) from grade results")
    _add_common(p)
    p.add_argument("--output", type=Path, default=None,
                   help="the folder given to grade --output (default: ./grading)")
    p.set_defaults(func=_cmd_report)

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

    # Learner commands: selfcheck (grade one notebook with the hidden tests, offline) and
    # progress (points per day from the latest self-checks); see autograder/selfcheck.py.
    from autograder.selfcheck import add_learner_commands
    add_learner_commands(sub, _add_common)
    from autograder.classroom import add_classroom_command
    add_classroom_command(sub, _add_common)

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
