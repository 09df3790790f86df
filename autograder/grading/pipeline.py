"""The grading pipeline: collect, run each submission's sandboxed kernel, judge, score, record.

This module is the batch: it collects the submissions (:mod:`autograder.grading.collect`),
reuses the
results whose key did not change (:mod:`autograder.core.records`), and sends the rest to worker
processes (:mod:`autograder.grading.pool`, or a Dask cluster,
:mod:`autograder.grading.distributed`), each of
which grades one submission at a time (:mod:`autograder.grading.worker`: the sandboxed kernel,
:mod:`autograder.sandbox`; the judge, :mod:`autograder.judge`; the score,
:mod:`autograder.grading.score`). It also re-exports the names the CLI and the tests use.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
from pathlib import Path

from autograder.core.course import (  # noqa: F401 - re-exported
    PipelineError,
    find_root,
    list_days,
    need,
    notebook_name,
    resolve_days,
)
from autograder.core.nbgrader import CONFIG_FILE, generate, load_config  # noqa: F401
from autograder.core.records import (  # noqa: F401
    STATUSES,
    Result,
    Status,
    TestResult,
    _atomic_write_json,
    _atomic_write_text,
    course_fingerprint,
    format_table,
    load_results,
    submission_key,
    write_csv,
)
from autograder.grading import template as grading_template
from autograder.grading.collect import discover, find_submitted_notebook  # noqa: F401
from autograder.grading.pool import _log_tails, _Pool  # noqa: F401
from autograder.grading.score import (  # noqa: F401
    _exit_words,
    _status_from,
    graded_cells,
    max_score,
    scan_for_tampering,
    score_notebook,
)
from autograder.grading.template import grading_base  # noqa: F401 - re-exported
from autograder.grading.worker import _worker_setup, grade_one  # noqa: F401


def sandbox_mode(sandbox: bool | str) -> bool:
    """Resolve ``sandbox`` (True: required, False: off, "auto": when bubblewrap works).

    Raises:
        PipelineError: the sandbox is required and bubblewrap cannot run here.
    """
    from autograder import sandbox as sb

    if sandbox == "auto":
        return sb.available()[0]
    if sandbox:
        ok, why = sb.available()
        if not ok:
            raise PipelineError(
                f"refusing to run submissions without a sandbox: {why}. Student code could "
                "read the hidden tests and the gradebook, change other students' work, or "
                "use the network. Install bubblewrap, or pass --no-sandbox to grade trusted "
                "notebooks without one.")
        return True
    return False


def grading_secret() -> bytes:
    """The grader's secret (32 random bytes), made on first use and kept, owner-only, in the
    grading cache (``secret``). Every hidden check's inputs are derived from it and the
    submission (:func:`judge_seed`); it never enters a kernel's sandbox (the cache is hidden
    from it). Delete the file to draw new inputs for every later grading."""
    base = grading_base()
    path = base / "secret"
    try:
        data = path.read_bytes()
        if len(data) == 32:
            return data
    except FileNotFoundError:
        pass
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    tmp = base / f".secret-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    try:
        os.link(tmp, path)          # the first run to make one wins; the others read it
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    data = path.read_bytes()
    if len(data) != 32:
        raise PipelineError(f"{path} is not a grading secret (32 bytes): delete it")
    return data


def judge_seed(secret: bytes, student: str, day: str, key: str) -> str:
    """The seed of one submission's hidden checks (hex): the grader's ``secret`` with the
    student, the day and the submission's ``key`` (the hash of its notebook and the course's
    grading material). Graded again, the same submission draws the same inputs."""
    msg = "\0".join((student, day, key)).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def _settings(sandboxed: bool, limits, tamper: bool) -> dict:
    from autograder.sandbox import Limits
    from autograder.sandbox.cgroups import default_cgroup_parent

    lim = limits if limits is not None else Limits()
    return {"sandbox": sandboxed, "limits": lim.to_json(), "tamper": tamper,
            "cgroup_parent": default_cgroup_parent() if sandboxed else None}


def grade(
    root: Path,
    submissions: Path,
    days: list[str] | None = None,
    students: list[str] | None = None,
    jobs: int | None = None,
    results_dir: Path | None = None,
    work: list[tuple[str, str, Path | None]] | None = None,
    *,
    sandbox: bool | str = "auto",
    limits=None,
    tamper: bool = True,
    resume: bool = True,
    dask_scheduler: str | None = None,
    progress=None,
    collect_problems: list[str] | None = None,
    runner=None,
    secret: bytes | None = None,
    vouched: dict | None = None,
) -> list[Result]:
    """Autograde every (student, day) under ``submissions``; never abort on one bad notebook.

    ``work`` replaces the discovery of ``submissions`` with an explicit list of
    (student, day, notebook) jobs. Each result is written atomically to
    ``results_dir/<student>/<day>.json`` (and the autograded notebook next to it as
    ``<day>.ipynb``) as soon as it is produced. With ``resume``, a result already there whose
    key (hash of the submitted notebook and the course's grading material) matches is reused.

    ``sandbox``: True requires bubblewrap (PipelineError otherwise), False runs kernels
    directly, "auto" uses bubblewrap when it works. ``limits``: a ``sandbox.Limits``.
    ``dask_scheduler``: send each submission to that Dask cluster instead of local workers.
    ``progress``: called with each Result as it arrives. ``collect_problems``: gets the files
    of a zip that could not be filed under one student unambiguously (left ungraded).
    ``runner(template, jobs)``: yields each job's result instead of local workers
    (:class:`autograder.selfcheck.standby.Standby` grades in a kernel it started ahead of time).
    ``secret``: the key every hidden check's inputs are derived from, with each submission
    (default: :func:`grading_secret`, the grader's own, kept; ``selfcheck`` draws one per run).
    ``vouched``: {(student, day): aware datetime} the course itself recorded (the classroom's
    ``received-times.json``; a submission it lacks is ``unrecorded``); from an LMS zip, each
    file's own attempt time (``lms``); each result records its submission's time and source
    (:func:`autograder.core.deadlines.submission_time`), read by the host, never the kernel.
    """
    if dask_scheduler:
        need("distributed", "instructor", "grade --dask-scheduler")
    from autograder.core.deadlines import submission_time

    days = resolve_days(root, days)
    lms_times = None
    if work is None:
        if submissions.suffix == ".zip" and submissions.is_file():
            from autograder.grading.collect import unzip_submissions

            lms_times = {}   # the LMS's attempt times, in memory: no file in the zip is read
            tmp_subs = Path(tempfile.mkdtemp(prefix="tfs-unzip-"))
            submissions = unzip_submissions(submissions, tmp_subs, days, collect_problems,
                                            lms_times)
        work = discover(submissions, days, students)
    days = sorted({d for _, d, _ in work})
    # A time the course or the LMS recorded wins; with the classroom's record, a submission
    # it lacks is "unrecorded" (never trusted, whatever its timestamp.txt says).
    def when(s: str, d: str, p: Path | None) -> tuple[str, str]:
        if vouched and (s, d) in vouched:
            return submission_time(p, vouched[(s, d)], "classroom")
        return submission_time(p, (lms_times or {}).get((s, d)), "lms",
                               recorded_only=vouched is not None)

    times = {(s, d): when(s, d, p) for s, d, p in work}
    sandboxed = sandbox_mode(sandbox)
    settings = _settings(sandboxed, limits, tamper)
    hide = [str(Path(submissions).resolve())] if submissions else []
    if os.environ.get("TFS_GRADING_CACHE"):
        hide.append(str(Path(os.environ["TFS_GRADING_CACHE"]).resolve()))
    if results_dir is not None:
        hide.append(str(Path(results_dir).resolve()))
    hide += sorted({str(Path(p).resolve().parent.parent.parent) for _, _, p in work if p})
    fingerprints = {d: course_fingerprint(root, d, settings) for d in days}
    settings["hide"] = sorted(set(hide))
    totals = {d: max_score(root, d) for d in days}
    if secret is None:
        secret = grading_secret()

    if progress is not None and hasattr(progress, "set_total"):
        progress.set_total(len(work))
    results: dict[tuple[str, str], Result] = {}
    todo: list[dict] = []
    for student, day, path in work:
        key = submission_key(path, fingerprints[day])
        if resume and results_dir is not None:
            old = results_dir / student / f"{day}.json"
            if old.is_file():
                try:
                    prev = Result.from_json(json.loads(old.read_text(encoding="utf-8")))
                except (ValueError, TypeError, KeyError):
                    prev = None
                if prev and prev.key == key and prev.status != Status.ENVIRONMENT_ERROR:
                    if (prev.submitted_at, prev.time_source) != times[(student, day)]:
                        prev.submitted_at, prev.time_source = times[(student, day)]
                        _atomic_write_json(old, prev.to_json())
                    results[(student, day)] = prev
                    if progress:
                        progress(prev)
                    continue
        todo.append({"student": student, "day": day, "path": str(path) if path else None,
                     "key": key, "total": totals[day], "settings": settings,
                     "seed": judge_seed(secret, student, day, key)})

    def record(data: dict) -> Result:
        notebook = data.pop("_notebook", None)
        result = Result.from_json(data)
        result.submitted_at, result.time_source = times.get((result.student, result.day),
                                                            ("", ""))
        if results_dir is not None:
            if notebook is not None:
                _atomic_write_text(results_dir / result.student / f"{result.day}.ipynb",
                                   notebook)
            _atomic_write_json(results_dir / result.student / f"{result.day}.json",
                               result.to_json())
        results[(result.student, result.day)] = result
        if progress:
            progress(result)
        return result

    # cheap statuses need no worker
    quick = [j for j in todo if j["path"] is None]
    todo = [j for j in todo if j["path"] is not None]
    for j in quick:
        record(Result.failed(j, Status.MISSING, f"no {notebook_name(j['day'])} submitted",
                             sandboxed=sandboxed).to_json())
    if todo:
        lim = settings["limits"]
        with tempfile.TemporaryDirectory(prefix="tfs-grade-") as tmp:
            template = grading_template.template_cache(root, days)
            if runner is not None:
                for data in runner(template, todo):
                    record(data)
            elif dask_scheduler:
                from autograder.grading.distributed import grade_on_cluster

                for data in grade_on_cluster(dask_scheduler, template, todo):
                    record(data)
            else:
                n = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
                pool = _Pool(n, template, root, Path(tmp), sandboxed,
                             hard_timeout=lim["notebook_timeout"] + 240)
                try:
                    for data in pool.run(todo):
                        record(data)
                finally:
                    pool.close()
    order = {(s, d): i for i, (s, d, _) in enumerate(work)}
    return sorted(results.values(), key=lambda r: order.get((r.student, r.day), 0))
