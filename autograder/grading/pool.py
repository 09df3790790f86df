"""The local worker pool: processes that grade one submission at a time, with deadlines.

A dead or stuck worker is replaced and its submission gets a status instead of aborting the
batch. A submission whose worker died is retried once in a fresh one; when it dies again, the
day's answer key is graded next (:func:`autograder.grading.preflight.control_job`): if that
grades, the deaths were the submission's doing (``kernel-died``, 0), else the machine's
(``environment-error``).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from autograder.core.course import PipelineError
from autograder.core.records import Result, Status
from autograder.grading import preflight
from autograder.grading.worker import _worker_setup, grade_one


def _worker_main(conn, template: str, course_root: str, base: str, sandbox: bool,
                 threads: int = 1) -> None:
    """A grading process: set up once, then grade jobs sent over ``conn`` until None.

    Its kernels (and its own PyTorch) use ``threads`` threads unless the instructor set
    ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``: with one kernel per core, PyTorch's default of
    one thread per core would have every kernel's OpenMP threads spin against the others'
    (measured: twice the CPU per notebook; Dask workers set 1 for the same reason)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    log = os.open(Path(base) / f"worker-{os.getpid()}.log",
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)
    os.dup2(log, 1)
    try:
        _worker_setup(Path(template), Path(course_root), Path(base), sandbox)
    except Exception as exc:  # noqa: BLE001 - sent to the parent, which reports it
        conn.send({"_setup_error": f"{type(exc).__name__}: {exc}"})
        return
    conn.send({"_ready": os.getpid()})
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            # Done: skip the interpreter's finalisation (about a second with PyTorch loaded);
            # every result has been sent and the kernels' folders are already removed.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        try:
            data = grade_one(job)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the batch
            import traceback

            data = Result.failed(job, Status.ENVIRONMENT_ERROR,
                                 f"grading crashed: {type(exc).__name__}: {exc}; "
                                 + traceback.format_exc()[-600:]).to_json()
        conn.send(data)


def _log_tails(base: Path, chars: int = 1500) -> str:
    """The last ``chars`` characters of each worker log in ``base`` (which is about to be
    removed with the batch's temporary folder), newest first, at most three logs."""
    logs = sorted(base.glob("worker-*.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    parts = []
    for log in logs[:3]:
        text = log.read_text(errors="replace").strip()
        parts.append(f"--- {log.name}\n{text[-chars:] or '(empty)'}")
    return "\n".join(parts) or "(no worker wrote a log)"


class _Pool:
    """Worker processes with a hard deadline per job; a dead or stuck worker is replaced and
    its submission gets a status instead of aborting the batch."""

    def __init__(self, n: int, template: Path, course_root: Path, base: Path, sandbox: bool,
                 hard_timeout: float):
        import multiprocessing

        self.ctx = multiprocessing.get_context("spawn")
        self.args = (str(template), str(course_root), str(base), sandbox,
                     max(1, (os.cpu_count() or 1) // n))
        self.hard_timeout = hard_timeout
        self.failed_starts = 0
        self.workers: list[dict] = [self._spawn() for _ in range(n)]

    def _spawn(self) -> dict:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main, args=(child, *self.args), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "job": None, "since": 0.0, "ready": False}

    def _kill(self, w: dict) -> None:
        try:
            os.kill(w["proc"].pid, signal.SIGKILL)
        except OSError:
            pass
        w["proc"].join(5)
        w["conn"].close()

    def run(self, jobs: list[dict]) -> Iterator[dict]:
        import time
        from multiprocessing.connection import wait

        todo = list(jobs)
        retries: dict[int, int] = {}
        controls: dict[int, tuple[dict, str]] = {}   # control job -> (the job, why it died)
        pending = len(todo)
        while pending:
            for w in self.workers:
                if w["ready"] and w["job"] is None and todo:
                    w["job"] = todo.pop(0)
                    w["since"] = time.monotonic()
                    w["conn"].send(w["job"])
            waitables = {}
            for w in self.workers:
                waitables[w["conn"]] = w
                waitables[w["proc"].sentinel] = w
            ready = wait(list(waitables), timeout=2.0)
            now = time.monotonic()
            for i, w in enumerate(list(self.workers)):
                msg = None
                dead = False
                if w["conn"] in ready:
                    try:
                        msg = w["conn"].recv()
                    except (EOFError, OSError):
                        dead = True
                elif w["proc"].sentinel in ready:
                    dead = True
                if msg is not None:
                    if "_ready" in msg:
                        w["ready"] = True
                        continue
                    if "_setup_error" in msg:
                        raise PipelineError("a grading worker could not start: "
                                            + msg["_setup_error"])
                    job, w["job"] = w["job"], None
                    pending -= 1
                    if job is not None and id(job) in controls:
                        yield preflight.after_death(*controls.pop(id(job)), msg)
                    else:
                        yield msg
                    continue
                job = w["job"]
                stuck = job is not None and now - w["since"] > self.hard_timeout
                if dead or stuck:
                    if not w["ready"]:
                        self.failed_starts += 1
                        if self.failed_starts > 2 * len(self.workers) + 2:
                            raise PipelineError(
                                "grading workers keep dying while they start (exit code "
                                f"{w['proc'].exitcode}); the end of their logs:\n"
                                + _log_tails(Path(self.args[2])))
                    self._kill(w)
                    self.workers[i] = self._spawn()
                    if job is None:
                        continue
                    jid = id(job)
                    if jid in controls:  # the control died or hung too: the machine's fault
                        pending -= 1
                        yield preflight.after_death(*controls.pop(jid), None)
                        continue
                    if dead and retries.get(jid, 0) < 1:
                        retries[jid] = retries.get(jid, 0) + 1
                        todo.insert(0, job)
                        continue
                    if dead:  # twice: the machine is asked before anyone is blamed
                        control = preflight.control_job(job["day"], job["settings"])
                        controls[id(control)] = (job, "the grading process died (exit code "
                                                 f"{w['proc'].exitcode}) twice on this notebook")
                        todo.insert(0, control)
                        continue
                    pending -= 1
                    yield Result.failed(job, Status.TIMEOUT, f"grading took longer than "
                                        f"{self.hard_timeout:.0f} s; the worker was stopped"
                                        ).to_json()

    def close(self) -> None:
        for w in self.workers:
            try:
                w["conn"].send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self.workers:
            w["proc"].join(10)
            if w["proc"].is_alive():
                self._kill(w)
