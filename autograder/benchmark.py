"""Benchmark: plain ``nbgrader autograde`` against ``grade --jobs N`` on the same submissions.

    python -m autograder.benchmark [--students 8] [--days 1 2 3] [--jobs 2] [--no-sandbox]
    python -m autograder.benchmark --students 200 --days 3 --dask [--plain-sample 16]
    python -m autograder.benchmark --selfcheck [--days 1 2 ... 14]
    ... --record docs/benchmark-record.md   (also append the figures to the course's record)

Builds a synthetic cohort for Days 1-3 (each student/day is the reference solution, the blank
release notebook, or the reference with one mutant from the catalog, in turn), then times

1. plain nbgrader: a course folder with the days already generated (not timed), and one
   ``nbgrader autograde <day>`` per day over every student (nbgrader's own sequential loop);
2. this course's ``pipeline.grade`` with ``--jobs`` workers and the sandbox (when bubblewrap
   works); its cached grading template (the counterpart of nbgrader's generated assignment)
   is made before the clock starts; worker start-up and kernels count.

Prints submissions per minute for both, the ratio, the CPU seconds per notebook each spent
(the machine's busy CPU time during each run: keep the machine otherwise idle) and the peak
memory in use above the idle machine's. ``--dask`` grades on a Dask cluster started here as an
instructor would (``dask scheduler``; ``dask worker --nworkers JOBS --nthreads 1``; its
start is not timed), ``--dask-scheduler ADDRESS`` on one already running; ``--local`` with
either also times the local pool. For a cohort (``--students 200``), plain nbgrader grades
``--plain-sample`` students (default 16) and its rate per notebook gives the ratio.
``--selfcheck`` instead times ``python -m autograder selfcheck`` of each day's answer key,
as a learner runs it, with and without the warm helper (its grading template made
beforehand). Not a test: timings depend on the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from autograder.authoring.mutants import load_catalog
from autograder.grading import pipeline, template


def synthetic_cohort(root: Path, days: list[str], students: int, out: Path
                     ) -> list[tuple[str, str, str]]:
    """Write ``out/<student>/<day>/<day>.ipynb``; returns (student, day, kind)."""
    catalog = load_catalog()
    made = []
    for day in days:
        ref = nbformat.read(str(root / "solutions" / day / pipeline.notebook_name(day)),
                            as_version=4)
        blank = nbformat.read(str(root / "release" / day / pipeline.notebook_name(day)),
                              as_version=4)
        kinds = [("correct", ref), ("blank", blank)]
        kinds += [(f"mutant {m.id}", m.apply(ref)) for m in catalog if m.day == day]
        for i in range(students):
            kind, nb = kinds[i % len(kinds)]
            student = f"student{i + 1:02d}"
            target = out / student / day / pipeline.notebook_name(day)
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, str(target))
            made.append((student, day, kind))
    return made


def plain_nbgrader(root: Path, days: list[str], subs: Path, work: Path) -> float:
    """Seconds for ``nbgrader autograde`` of every day (generation done beforehand)."""
    course = work / "plain"
    shutil.copytree(root / "source", course / "source")
    pipeline.generate(course, days, course / "gradebook.db", solutions=False)
    shutil.copytree(subs, course / "submitted")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    t0 = time.monotonic()
    for day in days:
        subprocess.run(
            [sys.executable, "-m", "nbgrader", "autograde", day,
             f"--config={pipeline.CONFIG_FILE}", f"--CourseDirectory.root={course}",
             f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}",
             "--log-level=ERROR"],
            cwd=course, env=env, check=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine so far (``/proc/stat``: user, nice, system, irq,
    softirq, steal), so that every process a run starts counts, sandboxed kernels included
    (their parents do not always wait for them). Meaningful on an otherwise idle machine."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    busy = sum(fields[:3]) + sum(fields[5:8])   # skip idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def selfcheck_times(root: Path, days: list[str]) -> None:
    """Wall seconds of ``python -m autograder selfcheck`` of each day's answer key, as a
    learner runs it: in the command's own process (``--no-helper``, what every run cost before
    the helper), then through the warm helper (:mod:`autograder.selfcheck.helper`): its first
    run (the helper has no standby for the notebook yet) and the next one, once the standby
    the helper started after the first is ready. The helper is private to this benchmark and
    stopped at the end."""
    from autograder.selfcheck import helper

    folder = Path(tempfile.mkdtemp(prefix="tfs-bench-h-", dir="/tmp"))
    env = dict(os.environ, TFS_SELFCHECK_DIR=str(folder), TFS_SELFCHECK_HELPER="1")

    def run(nb: Path, *extra: str) -> tuple[float, str]:
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "autograder", "selfcheck", "--no-save",
                              *extra, str(nb)], cwd=root, capture_output=True, text=True,
                             env=env)
        took = time.monotonic() - t0
        total = next((x for x in reversed(out.stdout.splitlines()) if x.startswith("Total")),
                     "(no report)")
        return took, total.split(";")[0]

    try:
        for day in days:
            template.template_cache(root, [day])
            nb = root / "solutions" / day / pipeline.notebook_name(day)
            cold, total = run(nb, "--no-helper")
            first, _ = run(nb)
            time.sleep(8.0)          # the standby started after the first run gets ready
            warm, warm_total = run(nb)
            same = "" if warm_total == total else f" (helper: {warm_total})"
            print(f"selfcheck {day}: own process {cold:.1f} s; helper, first run {first:.1f} "
                  f"s, next run {warm:.1f} s  ({total}{same})", flush=True)
    finally:
        old = os.environ.copy()
        os.environ.update(env)
        try:
            helper.stop(folder)
        finally:
            os.environ.clear()
            os.environ.update(old)
        shutil.rmtree(folder, ignore_errors=True)


def _compare(root: Path, subs: Path, days: list[str], jobs: int, sandbox, results) -> None:
    """Grade the same submissions with a sandbox per kernel; print every difference in
    status, score or test outcome (points and message)."""
    saved = os.environ.get("TFS_FORK_SERVER")
    os.environ["TFS_FORK_SERVER"] = "0"
    try:
        t0 = time.monotonic()
        again = pipeline.grade(root, subs, days=days, jobs=jobs, sandbox=sandbox, resume=False)
        took = time.monotonic() - t0
    finally:
        if saved is None:
            os.environ.pop("TFS_FORK_SERVER")
        else:
            os.environ["TFS_FORK_SERVER"] = saved

    def outcome(r):
        return (r.status, r.score, [(t.grade_id, t.points, t.message) for t in r.tests])

    before = {(r.student, r.day): outcome(r) for r in again}
    diff = [(k, before.get(k), outcome(r)) for r in results
            if before.get(k := (r.student, r.day)) != outcome(r)]
    print(f"a sandbox per kernel: {took:.1f} s; identical results (status, score, every "
          f"test's points and message): {len(results) - len(diff)} of {len(results)}")
    for k, a, b in diff[:10]:
        print(f"  differs {k}: per kernel {a} / forked {b}")


class PeakMemory:
    """The machine's peak memory in use (``MemTotal - MemAvailable``) above what was in use
    when it started, sampled every 0.2 s in a thread: kernels, workers and servers alike."""

    def __init__(self):
        import threading

        self.base = self.peak = self._used()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _used() -> int:
        info = {}
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                key, value = line.split(":", 1)
                info[key] = int(value.split()[0]) * 1024
        return info["MemTotal"] - info["MemAvailable"]

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self._used())

    def stop(self) -> float:
        """GiB above the start."""
        self._stop.set()
        self._thread.join()
        return max(0, self.peak - self.base) / 2 ** 30


def start_cluster(workers: int, folder: Path) -> tuple[str, list[subprocess.Popen]]:
    """A Dask cluster on loopback as an instructor starts one: ``dask scheduler`` and
    ``dask worker --nworkers N --nthreads 1``, separate processes; returns the scheduler's
    address and the processes (stop them with :func:`stop_cluster`)."""
    import json

    dask = str(Path(sys.executable).parent / "dask")
    file = folder / "scheduler.json"
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    deadline = time.monotonic() + 60
    while not file.is_file():
        if time.monotonic() > deadline:
            stop_cluster(procs)
            raise pipeline.PipelineError("the Dask scheduler did not start within 60 s")
        time.sleep(0.2)
    address = json.loads(file.read_text())["address"]
    procs.append(subprocess.Popen(
        [dask, "worker", "--scheduler-file", str(file), "--nworkers", str(workers),
         "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
         "--local-directory", str(folder / "dask-work")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(workers, timeout=120)
    return address, procs


def stop_cluster(procs: list[subprocess.Popen]) -> None:
    import signal

    for p in reversed(procs):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except OSError:
            pass
    for p in reversed(procs):
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _timed_grade(label: str, n: int, root: Path, subs: Path, days: list[str], **kw):
    """Grade and print one line of figures; returns (results, seconds)."""
    memory = PeakMemory()
    t0, cpu0 = time.monotonic(), cpu_seconds()
    results = pipeline.grade(root, subs, days=days, resume=False, **kw)
    took, cpu = time.monotonic() - t0, cpu_seconds() - cpu0
    peak = memory.stop()
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    print(f"{label}: {took:.1f} s, {60 * n / took:.1f} submissions/min, {cpu / n:.2f} CPU s "
          f"per notebook, peak memory +{peak:.2f} GiB; statuses {statuses}", flush=True)
    return results, took


def widget_times(repeat: int = 5) -> dict[str, float]:
    """Median seconds of an explorer's redraw after a control moves (what a slider drag
    costs), for the scaling and positional-encoding explorers on the course's own code;
    printed, and returned. The goal is well under a second on a 2-core laptop."""
    import statistics

    import torch

    from course import widgets as W
    from course.standins import SinusoidalPositionalEncoding

    out = {}
    scaling = W.scaling_explorer(interactive=True)
    pe = SinusoidalPositionalEncoding(64, max_len=128)
    positional = W.positional_encoding_explorer(pe, max_len=128, interactive=True)
    moves = {"scaling explorer, d_k": (scaling, "d_k", [4, 1024]),
             "positional explorer, position": (positional, "position", [5, 90])}
    torch.manual_seed(0)
    for label, (explorer, name, values) in moves.items():
        times = []
        for i in range(repeat):
            explorer.update(**{name: values[i % 2]})
            times.append(explorer.seconds)
        out[label] = statistics.median(times)
        print(f"{label}: median redraw {out[label]:.3f} s over {repeat}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.benchmark", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=8)
    ap.add_argument("--days", nargs="+", default=None,
                    help="days to use (default: 1 2 3 for grading, every day for --selfcheck)")
    ap.add_argument("--jobs", type=int, default=2,
                    help="local workers, or Dask workers with --dask (default 2)")
    ap.add_argument("--no-sandbox", action="store_true")
    ap.add_argument("--skip-plain", action="store_true")
    ap.add_argument("--plain-sample", type=int, default=16, metavar="N",
                    help="plain nbgrader grades at most N students (default 16); the ratio "
                         "is taken per notebook")
    ap.add_argument("--dask", action="store_true",
                    help="grade on a Dask cluster started here (scheduler + --jobs workers)")
    ap.add_argument("--dask-scheduler", metavar="ADDRESS",
                    help="grade on this running Dask cluster")
    ap.add_argument("--local", action="store_true",
                    help="with --dask or --dask-scheduler: also time the local pool")
    ap.add_argument("--no-fork-server", action="store_true",
                    help="start every kernel in a sandbox of its own (as without root)")
    ap.add_argument("--compare", action="store_true",
                    help="grade again with a sandbox per kernel and compare every result")
    ap.add_argument("--selfcheck", action="store_true",
                    help="time the self-check of each day's answer key instead")
    ap.add_argument("--widgets", action="store_true",
                    help="time the explorers' redraws instead (a slider move to a new figure)")
    ap.add_argument("--record", type=Path, metavar="FILE",
                    help="also append the figures, the command and the machine to FILE (the "
                         "course's record: docs/benchmark-record.md)")
    args = ap.parse_args(argv)
    if args.record:
        from autograder.benchmark_record import recorded

        return recorded(main, args.record, argv if argv is not None else sys.argv[1:])
    bindir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    root = pipeline.find_root()
    if args.no_fork_server:
        os.environ["TFS_FORK_SERVER"] = "0"
    if args.selfcheck:
        selfcheck_times(root, pipeline.resolve_days(root, args.days))
        return 0
    if args.widgets:
        widget_times()
        return 0
    days = pipeline.resolve_days(root, args.days or ["1", "2", "3"])
    with tempfile.TemporaryDirectory(prefix="tfs-bench-") as tmp:
        work = Path(tmp)
        subs = work / "submitted"
        made = synthetic_cohort(root, days, args.students, subs)
        n = len(made)
        kinds = {}
        for _, _, k in made:
            kinds[k.split()[0]] = kinds.get(k.split()[0], 0) + 1
        print(f"{n} submissions ({', '.join(f'{v} {k}' for k, v in kinds.items())}) "
              f"of {', '.join(days)}; {os.cpu_count()} cores")
        plain_rate = None   # seconds per notebook
        if not args.skip_plain:
            sample = subs
            m = n
            if args.students > args.plain_sample:
                sample = work / "plain-sample"
                keep = sorted({s for s, _, _ in made})[:args.plain_sample]
                for student in keep:
                    shutil.copytree(subs / student, sample / student)
                m = sum(1 for s, _, _ in made if s in keep)
            cpu0 = cpu_seconds()
            plain = plain_nbgrader(root, days, sample, work)
            cpu = cpu_seconds() - cpu0
            plain_rate = plain / m
            print(f"plain nbgrader autograde ({m} notebooks): {plain:.1f} s, "
                  f"{60 * m / plain:.1f} submissions/min, {cpu / m:.2f} CPU s per notebook",
                  flush=True)
        sandbox = False if args.no_sandbox else "auto"
        # like nbgrader's generate_assignment above, the grading template is made once per
        # course version (cached), not per run: make it before the clock starts
        template.template_cache(root, days)
        from autograder.sandbox import forkserver

        sb = "sandbox off"
        if sandbox and pipeline.sandbox_mode(sandbox):
            sb = "sandbox on, " + ("kernels forked from a server per worker"
                                   if forkserver.wanted({"sandbox": True})
                                   else "a sandbox per kernel")
        runs = []
        if not (args.dask or args.dask_scheduler) or args.local:
            results, took = _timed_grade(f"grade --jobs {args.jobs} ({sb})", n, root, subs,
                                         days, jobs=args.jobs, sandbox=sandbox)
            runs.append(("local pool", took))
        if args.dask or args.dask_scheduler:
            procs = []
            address = args.dask_scheduler
            if args.dask:
                address, procs = start_cluster(args.jobs, work)
            try:
                label = (f"grade --dask-scheduler ({args.jobs} workers x 1 thread started "
                         "here" if args.dask else f"grade --dask-scheduler {address}") \
                    + f"; {sb})"
                results, took = _timed_grade(label, n, root, subs, days, sandbox=sandbox,
                                             dask_scheduler=address)
                runs.append(("Dask", took))
            finally:
                stop_cluster(procs)
        if plain_rate:
            for name, took in runs:
                print(f"ratio ({name}): {plain_rate * n / took:.2f}x plain nbgrader's "
                      f"throughput")
        if args.compare:
            _compare(root, subs, days, args.jobs, sandbox, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
