"""The instructor's grading commands: ``grade``, ``accept``, ``feedback``, ``report``.

``grade`` runs the batch (:mod:`autograder.grading.pipeline`) and writes ``grades.csv``, with
the late policy of ``deadlines.toml`` applied when there is one
(:mod:`autograder.core.deadlines`); ``accept`` pays a tampered submission after the evidence is
read; ``feedback`` and ``report`` are the learners' and the instructor's pages. Registered in
:mod:`autograder.__main__` by :func:`add_grading_commands`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from autograder.console import Progress
from autograder.core.records import Status
from autograder.grading import pipeline


def print_results(results: list[pipeline.Result], days: list[str], csv: Path | None,
                  deadlines=None) -> None:
    """The table, the results that need a look, and ``csv`` (grades.csv) written, with the
    late policy of ``deadlines`` (:class:`autograder.core.deadlines.Deadlines`) applied."""
    from autograder.core import acceptance
    from autograder.core.records import late_of

    print(pipeline.format_table(results, days))
    for r in results:
        if r.status != Status.GRADED:
            print(f"  {r.student}/{r.day}: {r.status}: {r.detail}")
    if csv is not None:
        accepted = acceptance.load(csv.parent / "accepted.json")
        pipeline.write_csv(results, days, csv, accepted, deadlines)
        unpaid = [r for r in results if acceptance.paid(r, accepted) != r.score]
        print(f"\ngrades written to {csv}")
        if deadlines is not None:
            lates = [(r, late_of(r, deadlines, acceptance.paid(r, accepted)))
                     for r in results if r.status != Status.ENVIRONMENT_ERROR]
            late = [(r, x) for r, x in lates if x.hours_late]
            flagged = [(r, x) for r, x in lates if x.flagged]
            print(f"deadlines: {len(late)} late submission(s), "
                  f"{sum(x.penalty for _, x in late):g} point(s) of penalty in all")
            for r, x in late + flagged:
                print(f"  {r.student}/{r.day}: {x.note}")
        if unpaid:
            print(f"{len(unpaid)} tampered submission(s) pay 0 until you accept them, after "
                  "reading the evidence: python -m autograder accept STUDENT DAY")
    faults = sum(r.status == Status.ENVIRONMENT_ERROR for r in results)
    if faults:
        print(f"{faults} environment-error result(s): the grader's fault, not the student's; "
              "nothing charged (empty in grades.csv). Fix what each says, then grade again: "
              "they are graded again, unchanged results are kept.")


def _deadlines(args: argparse.Namespace, root: Path, out: Path):
    from autograder.core import deadlines

    return deadlines.find(out, root, getattr(args, "deadlines", None))


def _cmd_accept(args: argparse.Namespace) -> int:
    from autograder.core import acceptance

    root = pipeline.find_root(args.root)
    day = pipeline.resolve_days(root, [args.day])[0]
    out = args.output or Path("grading")
    path = out / "results" / args.student / f"{day}.json"
    if not path.is_file():
        print(f"no result for {args.student}/{day} in {out / 'results'}", file=sys.stderr)
        return 2
    try:
        result = pipeline.Result.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, KeyError) as exc:
        print(f"{path}: {exc}; run grade again first", file=sys.stderr)
        return 2
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
    pipeline.write_csv(results, days, out / "grades.csv", accepted,
                       _deadlines(args, root, out))
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


# grading.toml in the grading folder: a course's settings once, for every `grade` run; a flag
# given on the command line wins. Key -> its type (the flag of the same name, dashes as "_").
SETTINGS_FILE = "grading.toml"
SETTINGS = {"jobs": int, "memory_limit": float, "timeout": int, "notebook_timeout": int,
            "output_limit": float, "file_limit": float, "dask_scheduler": str, "sandbox": bool}


def course_settings(args: argparse.Namespace, out: Path) -> Path | None:
    """Fill the settings ``args`` lacks from ``out/grading.toml`` (its path; None when there
    is none). ``sandbox = false`` there is ``--no-sandbox``.

    Raises:
        PipelineError: the file does not parse, names a key it may not hold, or a value of
            the wrong type; the message lists the keys.
    """
    import tomllib

    path = out / SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise pipeline.PipelineError(f"{path}: {exc}") from None
    keys = ", ".join(SETTINGS)
    for key, value in data.items():
        kind = SETTINGS.get(key)
        if kind is None:
            raise pipeline.PipelineError(f"{path}: unknown setting {key!r} (it may hold: {keys})")
        if kind is bool or kind is str:
            if not isinstance(value, kind):
                raise pipeline.PipelineError(f"{path}: {key} should be "
                                             + ("true or false" if kind is bool else "a string"))
            continue
        number = (int, float) if kind is float else int      # TOML's 6 is a fine 6.0
        if isinstance(value, bool) or not isinstance(value, number) or value <= 0:
            raise pipeline.PipelineError(f"{path}: {key} = {value!r} should be a positive "
                                         f"{kind.__name__}")
    for key, value in data.items():
        if key == "sandbox":
            args.no_sandbox = args.no_sandbox or value is False
        elif getattr(args, key, None) is None:
            setattr(args, key, value)
    return path


def _cmd_grade(args: argparse.Namespace) -> int:
    root = pipeline.find_root(args.root)
    days = pipeline.resolve_days(root, args.day)
    out = args.output or Path("grading")
    settings_file = course_settings(args, out)
    if settings_file is not None:
        print(f"settings from {settings_file} (flags win)", file=sys.stderr)
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
    deadlines = _deadlines(args, root, out)  # a bad file stops before anything is graded
    vouched = None
    if args.submission_times:
        from autograder.core.deadlines import load_vouched

        vouched = load_vouched(args.submission_times)
    problems: list[str] = []
    progress = None if args.quiet else Progress("graded")
    results = pipeline.grade(root, args.submissions, days=days, students=args.student,
                             jobs=args.jobs, results_dir=out / "results",
                             sandbox=not args.no_sandbox, limits=_limits(args),
                             resume=not args.no_resume, dask_scheduler=args.dask_scheduler,
                             progress=progress, collect_problems=problems, vouched=vouched)
    if progress is not None:
        progress.close()
    if args.submissions.is_dir():
        from autograder.grading.collect import unplaced

        problems += unplaced(args.submissions, days, args.student)
    for why in problems:
        print(f"not graded: {why}", file=sys.stderr)
    # Only the days someone submitted, unless the instructor named them.
    graded_days = [d for d in days if any(r.day == d and (args.day or r.status != Status.MISSING)
                                          for r in results)]
    shown = [r for r in results if r.day in graded_days]
    print_results(shown, graded_days, out / "grades.csv", deadlines)
    counts = {s: sum(r.status == s for r in shown) for s in pipeline.STATUSES}
    print("statuses: " + ", ".join(f"{s} {n}" for s, n in counts.items() if n))
    found = sum(r.status != Status.MISSING for r in results)
    print(f"graded {found} notebook{'s' * (found != 1)} of {len({r.student for r in results})} "
          f"student(s) in {time.monotonic() - t0:.1f} s; results in {out / 'results'} "
          "(re-running grades only what changed)")
    return 0 if found else 1


def _cmd_feedback(args: argparse.Namespace) -> int:
    from autograder.grading.feedback import write_feedback

    out = args.output or Path("grading")
    root = pipeline.find_root(args.root)
    deadlines = _deadlines(args, root, out)
    if not _has_results(out):
        return 1
    pages = write_feedback(out / "results", out / "feedback", students=args.student,
                           days=args.day, deadlines=deadlines, root=root)
    if not pages:
        print(f"error: no result in {out / 'results'} matches --student/--day",
              file=sys.stderr)
        return 1
    print(f"wrote {len(pages)} feedback pages under {out / 'feedback'}")
    return 0


def _has_results(out: Path) -> bool:
    """Does ``out/results`` hold a graded result? Else one line on stderr."""
    results = out / "results"
    if results.is_dir() and any(results.glob("*/*.json")):
        return True
    print(f"error: no results in {results}: run `python -m autograder grade SUBMISSIONS "
          f"--output {out}` first (or pass the --output that grade used)", file=sys.stderr)
    return False


def _cmd_report(args: argparse.Namespace) -> int:
    from autograder.grading.report import write_report

    out = args.output or Path("grading")
    if not _has_results(out):
        return 1
    page = write_report(out / "results", out / "report", pipeline.find_root(args.root))
    print(f"class report: {page}")
    return 0


def _add_deadlines(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deadlines", type=Path, metavar="TOML",
                   help="due dates, extensions and the late policy (default: the grading "
                        "folder's deadlines.toml when there is one; format: "
                        "docs/instructors.md, 'Deadlines and late submissions')")


def add_grading_commands(sub, _add_common) -> None:
    """Register ``grade``, ``accept``, ``feedback`` and ``report``."""
    p = sub.add_parser("grade", help="autograde a folder of submissions (settings: flags, "
                                     "else the grading folder's grading.toml)")
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
    _add_deadlines(p)
    p.add_argument("--submission-times", type=Path, metavar="JSON",
                   help="times the course vouches for, {student: {day: ISO time}} (the "
                        "classroom's received-times.json); they win over timestamp.txt")
    p.set_defaults(func=_cmd_grade)

    p = sub.add_parser("accept", help="show a tampered submission's evidence and pay it")
    p.add_argument("student")
    p.add_argument("day", help="day number or name (3, day03, day03_self_attention)")
    p.add_argument("--output", type=Path, help="grading folder (default: grading)")
    p.add_argument("--yes", action="store_true", help="accept: pay the points it earned")
    p.add_argument("--revoke", action="store_true", help="take an acceptance back")
    _add_common(p)
    _add_deadlines(p)
    p.set_defaults(func=_cmd_accept)

    p = sub.add_parser("feedback", help="HTML feedback per student and day from grade results")
    _add_common(p)
    p.add_argument("--output", type=Path, default=None,
                   help="the folder given to grade --output (default: ./grading)")
    p.add_argument("--day", action="append")
    p.add_argument("--student", action="append")
    _add_deadlines(p)
    p.set_defaults(func=_cmd_feedback)

    p = sub.add_parser("report", help="class report (HTML + PNG figures) from grade results")
    _add_common(p)
    p.add_argument("--output", type=Path, default=None,
                   help="the folder given to grade --output (default: ./grading)")
    p.set_defaults(func=_cmd_report)

