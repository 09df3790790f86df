"""Grading one submission in a worker: its own course folder, a sandboxed kernel, nbgrader.

A worker process sets up a private copy of the grading template once (:func:`_worker_setup`),
then :func:`grade_one` grades each submission sent to it: admits it (the steps of
:mod:`autograder.grading.admission`: readable, this day's, cleaned, scanned), writes it where
nbgrader expects it, starts the kernel through the sandbox launcher with a fresh private
folder (or, as root, forks it from the worker's fork server, :mod:`autograder.sandbox.forkserver`),
runs nbgrader's autograde with :class:`autograder.grading.execute.GuardedExecute` (which judges the
hidden tests itself, outside the kernel), and scores the outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder.core.course import notebook_name
from autograder.core.nbgrader import _run_converter, load_config
from autograder.core.records import Result, Status
from autograder.grading import admission
from autograder.grading.score import (
    MEMORY_WORDS,
    _explain_undefined,
    _gate,
    _own_code,
    _withhold_internals,
    graded_cells,
    score_notebook,
    status_confirmed,
)

_WORKER: dict = {}


def _worker_setup(template: Path, course_root: Path, base: Path, sandbox: bool) -> Path:
    """A private course folder for this process: template copy, gradebook, kernelspec dir."""
    import warnings

    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(course_root), *filter(None, [os.environ.get("PYTHONPATH")])])
    work = Path(tempfile.mkdtemp(prefix=f"worker-{os.getpid()}-", dir=base))
    warnings.filterwarnings("ignore")
    shutil.copytree(template / "source", work / "source")
    shutil.copy2(template / "gradebook.db", work / "gradebook.db")
    if (template / "release").is_dir():
        shutil.copytree(template / "release", work / "release")
    (work / "jupyter" / "kernels").mkdir(parents=True)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(work / "jupyter"), *filter(None, [os.environ.get("JUPYTER_PATH")])])
    _WORKER.update(root=work, template=template, course_root=course_root, base=base,
                   sandbox=sandbox)
    _disposable_gradebook(work / "gradebook.db")
    return work


def _disposable_gradebook(path: Path) -> None:
    """Open this worker's gradebook copy without waiting for the disk: nbgrader commits about
    30 times per notebook, and each commit of a default SQLite database waits for an fsync
    and creates and deletes a journal file (measured: ~12 ms of a notebook's time, when the
    CPU waits). The copy is thrown away with the worker; results travel as JSON, and the
    instructor's gradebook is written elsewhere (``autograder.core.nbgrader``) with SQLite's
    defaults. One listener per process, for the copy set up last."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    first = "gradebook" not in _WORKER
    _WORKER["gradebook"] = str(path)
    if not first:
        return
    _one_engine_per_gradebook()

    @event.listens_for(Engine, "connect")
    def _pragmas(dbapi_connection, _record):
        try:
            name = dbapi_connection.execute("PRAGMA database_list").fetchone()[2]
        except Exception:  # noqa: BLE001 - not SQLite: leave it as it is
            return
        if name == _WORKER.get("gradebook"):
            dbapi_connection.execute("PRAGMA synchronous=OFF")
            dbapi_connection.execute("PRAGMA journal_mode=MEMORY")


def _one_engine_per_gradebook() -> None:
    """nbgrader opens a new SQLAlchemy engine for every ``Gradebook`` (several per notebook),
    and an engine compiles each SQL statement the first time it runs it: about 0.13 s of CPU
    per notebook, measured. This worker's gradebook copy gets one engine for the process,
    which keeps its compiled statements from one notebook to the next (``Gradebook.close``
    only closes the engine's connections; the engine opens new ones when used again)."""
    import nbgrader.api as api
    from sqlalchemy import create_engine

    engines: dict[tuple, object] = {}

    def engine_for(url, **kwargs):
        if not str(url).endswith(_WORKER.get("gradebook", "\0")):
            return create_engine(url, **kwargs)
        key = (str(url), tuple(sorted(kwargs.items())))
        if key not in engines:
            engines[key] = create_engine(url, **kwargs)
        return engines[key]

    api.create_engine = engine_for


def grade_one(job: dict, prepared: tuple | None = None) -> dict:
    """Autograde one submission in this worker's course folder; returns a Result as JSON plus
    ``_notebook`` (the autograded notebook's text) when nbgrader produced one.

    ``prepared``: what :func:`kernel_setup` returned for this day and these settings, when the
    kernel was made ready before the submission arrived (:mod:`autograder.selfcheck.standby`).
    """
    import time

    from autograder.grading import execute, preflight

    t0 = time.monotonic()
    student, day, nb_path = job["student"], job["day"], job["path"]
    settings = job["settings"]
    root: Path = _WORKER["root"]
    source_path = root / "source" / day / notebook_name(day)
    release_path = root / "release" / day / notebook_name(day)
    if job.get("control"):  # the machine's control: the day's answer key, else its blank
        key_path = Path(_WORKER["course_root"]) / "solutions" / day / notebook_name(day)
        nb_path = key_path if key_path.is_file() else release_path
    sandboxed = bool(settings.get("sandbox"))

    total = job.get("total", 0.0)  # until the source notebook says

    def done(status, score=0.0, tests=(), detail="", flags=(), notebook=None):
        data = Result(student, day, status, score, total, list(tests), detail,
                      job.get("key", ""), round(time.monotonic() - t0, 2), sandboxed,
                      list(flags)).to_json()
        if notebook is not None:
            data["_notebook"] = notebook
        return data

    def blame(what: str) -> dict:
        """Grading failed on this submission: its doing unless the control fails too."""
        status, detail = preflight.whose_failure(job, what, grade_one)
        return done(status, detail=detail)

    def confirm() -> str:
        return ("this was the machine's control" if job.get("control") else
                preflight.confirm_machine(day, settings, grade_one))

    try:
        source_nb = nbformat.read(str(source_path), as_version=4)
        total = sum(p for _, p in graded_cells(source_nb))
        sub = admission.Submission(day, nb_path, source_nb, nbformat.read(str(release_path), 4)
                                   if release_path.is_file() else None, settings)
        try:
            admission.admit(sub)
        except admission.Refused as refused:
            return done(refused.status, detail=refused.detail)
        sub_dir = root / "submitted" / student / day
        out_dir = root / "autograded" / student / day
        shutil.rmtree(sub_dir, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)  # nbgrader skips an existing one
        sub_dir.mkdir(parents=True)
        (sub_dir / notebook_name(day)).write_text(sub.text, encoding="utf-8")
        if prepared is None:
            prepared = kernel_setup(day, settings)
        private, config = prepared
        execute.begin(bytes.fromhex(job["seed"]) if job.get("seed") else None)
        try:
            return _autograde(config, root, student, day, private, out_dir, source_nb, sub,
                              settings, sandboxed, done, blame, confirm,
                              _own_code(sub.notebook, sub.release))
        finally:
            shutil.rmtree(private, ignore_errors=True)
            os.environ.pop("TFS_KERNEL_PRIVATE", None)
    except Exception as exc:  # noqa: BLE001 - whatever it was, the machine is asked first
        return blame(f"grading failed: {type(exc).__name__}: {exc}")


WARM_UP_STUDENT = "tfs-warm-up"


def warm_up_autograde(day: str, config) -> None:
    """Run nbgrader's autograde once, without a kernel, on the day's blank notebook for a
    student of its own, then remove what it wrote: SQLAlchemy compiles the gradebook's
    statements (this process keeps one engine, :func:`_one_engine_per_gradebook`) and
    nbconvert loads its machinery before the submission that counts. About 0.3 s that a
    self-check's standby pays while it waits instead of after "go"."""
    import copy

    from nbconvert.preprocessors import Preprocessor
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde

    from autograder.grading import execute

    root: Path = _WORKER["root"]
    release = root / "release" / day / notebook_name(day)
    if not release.is_file():
        return
    config = copy.deepcopy(config)
    config.Autograde.autograde_preprocessors = [
        Preprocessor if p is execute.GuardedExecute else p
        for p in config.Autograde.autograde_preprocessors]
    folders = [root / top / WARM_UP_STUDENT for top in ("submitted", "autograded")]
    try:
        (folders[0] / day).mkdir(parents=True)
        shutil.copy2(release, folders[0] / day / notebook_name(day))
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "transformers-from-scratch") as gb:
            gb.update_or_create_student(WARM_UP_STUDENT)
        _run_converter(Autograde, config, day, WARM_UP_STUDENT)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def kernel_setup(day: str, settings: dict):
    """The kernel of one submission, ready to start: (private folder, nbgrader config); see
    :func:`kernel_files_setup` and :func:`grading_config`."""
    return kernel_files_setup(day, settings), grading_config(settings)


def kernel_files_setup(day: str, settings: dict, extra_env: dict | None = None) -> Path:
    """Write a fresh host-only private folder (kernel.log, the sandbox's pid and exit status,
    the start-up script), the sandbox spec and the ``tfs-graded`` kernelspec that launches it;
    return the folder. Imports nothing of nbgrader, so a kernel can start while it loads.
    ``extra_env`` adds variables to the kernel's environment
    (:mod:`autograder.selfcheck.standby` names
    modules to import before any cell)."""
    from autograder import sandbox
    from autograder.sandbox import kernel_files

    root: Path = _WORKER["root"]
    sandboxed = bool(settings.get("sandbox"))
    # A fresh private folder per submission, host-only: kernel.log, the sandbox's pid and exit
    # status, the start-up script. The kernel writes only inside its own tmpfs.
    from autograder.sandbox.kernel_startup import STARTUP

    private = Path(tempfile.mkdtemp(prefix="kernel-", dir=root))
    shutil.rmtree(private)
    kernel_files.prepare_private(private, STARTUP)
    # The Python environment, read-only; a venv inside the instructor's checkout is shown at
    # a neutral path (/tmp/.venv), so that no path of the checkout reaches the kernel.
    python = sys.executable
    exe_prefix = str(Path(os.path.realpath(sys.executable)).parent.parent)
    ro = [[p, p] for p in dict.fromkeys([sys.base_prefix, exe_prefix])]
    course_root = Path(_WORKER["course_root"]).resolve()
    if sandboxed and sys.prefix != sys.base_prefix and \
            Path(sys.prefix).resolve().is_relative_to(course_root):
        ro.append([sys.prefix, sandbox.INNER_VENV])
        python = sandbox.INNER_VENV + sys.executable[len(sys.prefix):]
    elif sys.prefix not in (sys.base_prefix, exe_prefix):
        ro.append([sys.prefix, sys.prefix])
    kenv = kernel_files.kernel_environment(private, sandboxed, python)
    standins = ""
    kenv["TFS_MAX_OUTPUT"] = str(settings["limits"]["output"])
    kenv["NBGRADER_EXECUTION"] = "autograde"
    kenv.update(extra_env or {})
    hide = [str(_WORKER["course_root"]), str(_WORKER["base"]), str(Path.home()),
            *settings.get("hide", [])]
    if sandboxed:
        ro.append([str(Path(_WORKER["course_root"]) / "course"), f"{sandbox.INNER_LIB}/course"])
        # No stand-in of this day or a later one in the kernel: the course's standins folder
        # is shown with its __init__ alone, the earlier days' modules come per kernel.
        package, allowed = kernel_files.standins_view(root, _WORKER["course_root"], day)
        ro.append([str(package), f"{sandbox.INNER_LIB}/course/standins"])
        # the bytecode of an older single-file course/standins.py, where one was compiled
        ro += [["/dev/null", f"{sandbox.INNER_LIB}/course/__pycache__/{p.name}"]
               for p in (Path(_WORKER["course_root"]) / "course" / "__pycache__")
               .glob("standins.*.pyc")]
        standins = str(allowed)
        kenv["TFS_STANDINS_DIR"] = kernel_files.INNER_STANDINS
        binds, data_env = kernel_files.dataset_binds()
        ro += binds
        kenv.update(data_env)
        os.environ["TFS_KERNEL_PRIVATE"] = str(private)
    else:
        kenv["PYTHONPATH"] = str(_WORKER["course_root"])
        kenv.update(kernel_files.unsandboxed_data_environment())
        os.environ.pop("TFS_KERNEL_PRIVATE", None)
    spec = sandbox.Spec(sandbox=sandboxed, limits=settings["limits"], private=str(private),
                        standins=standins if sandboxed else "",
                        startup=str(private / "ipython/profile_default/startup"
                                    / sandbox.STARTUP_NAME),
                        hide=hide, ro_bind=ro, env=kenv,
                        cgroup_parent=settings.get("cgroup_parent"))
    spec_path = private / "spec.json"
    spec_path.write_text(json.dumps(spec.__dict__))
    kernel_files.write_kernelspec(root / "jupyter" / "kernels", "tfs-graded", spec_path, python)
    os.environ["JUPYTER_RUNTIME_DIR"] = str(private / "runtime")
    from autograder.sandbox import forkserver

    if forkserver.wanted(settings) and not extra_env:
        # One sandbox per worker whose server forks each kernel (PyTorch imported once);
        # each kernel still gets its own process, uid, cgroup, limits and clean folders.
        forkserver.prepare(spec, python, root / "forkserver.log")
    else:
        forkserver.forget()
    return private


def grading_config(settings: dict):
    """The nbgrader configuration that runs a notebook with
    :class:`autograder.grading.execute.GuardedExecute` under ``settings``' limits."""
    from nbgrader.converters import Autograde

    from autograder.grading import execute

    config = load_config(_WORKER["root"], _WORKER["root"] / "gradebook.db")
    lim = settings["limits"]
    config.Autograde.autograde_preprocessors = [
        execute.GuardedExecute if p.__name__ == "Execute" else p
        for p in Autograde.class_traits()["autograde_preprocessors"].default()]
    config.GuardedExecute.timeout = lim["cell_timeout"]
    config.GuardedExecute.notebook_timeout = lim["notebook_timeout"]
    config.GuardedExecute.max_output = lim["output"]
    config.GuardedExecute.kernel_name = "tfs-graded"
    config.GuardedExecute.startup_timeout = 120
    config.GuardedExecute.interrupt_on_timeout = True
    config.GuardedExecute.raise_on_iopub_timeout = False
    config.GuardedExecute.iopub_timeout = 15
    # The kernel is disposable: killed once its notebook is done (a graceful shutdown cost
    # about 0.9 s per notebook).
    config.GuardedExecute.shutdown_kernel = "immediate"
    config.KernelManager.transport = "ipc"
    return config


def _autograde(config, root, student, day, private, out_dir, source_nb, sub, settings,
               sandboxed, done, blame, confirm, own_code) -> dict:
    """Run nbgrader's autograde on the written submission and turn its outcome into a result.

    Everything read here after the kernel ran is host-only: the autograded notebook (nbgrader
    wrote it in the worker's folder, which the sandbox never shows), and the private folder's
    log and exit record, read without following links and with a size cap
    (:func:`autograder.grading.admission.readback_limit`). When nbgrader fails, or what it
    wrote cannot be read or scored, ``blame`` asks the machine whose fault it is; ``confirm()``
    says what failed on the machine's control ("" when it grades).
    """
    from nbgrader.api import Gradebook
    from nbgrader.converters import Autograde

    from autograder.grading import execute
    from autograder.grading.preflight import kernel_data_problems
    from autograder.sandbox import cgroups, kernel_files

    try:
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}", "transformers-from-scratch") as gb:
            gb.update_or_create_student(student)
        _run_converter(Autograde, config, day, student)
    except Exception as exc:  # noqa: BLE001 - a grading failure becomes the result's status
        log = _tail(private / "kernel.log")
        if any(w in log.lower() for w in MEMORY_WORDS):
            # The submission exhausted its kernel's memory and grading could not finish (seen
            # with the memhog robustness case under a loaded machine): the submission's
            # outcome, for review, not a failure of the machinery to retry.
            return done(Status.MEMORY_LIMIT, detail="hit the memory limit, then grading could not "
                        f"finish: {type(exc).__name__}: {str(exc)[:1200]}; kernel log: {log}")
        return blame(f"nbgrader's autograde failed: {type(exc).__name__}: {str(exc)[:600]}"
                     + (f"; kernel log: {log}" if log else ""))
    finally:
        if settings.get("cgroup_parent"):
            cgroups.cleanup_cgroups(settings["cgroup_parent"])
    out_nb = out_dir / notebook_name(day)
    limit = admission.readback_limit(settings, len(sub.text.encode("utf-8")))
    raw = kernel_files.read_capped(out_nb, limit + 1)
    if not raw:
        return blame("nbgrader produced no autograded notebook; kernel log: "
                     + _tail(private / "kernel.log"))
    if len(raw) > limit:  # more than the notebook and every output the limits let through
        return done(Status.REJECTED, detail=f"the graded notebook came back larger than "
                    f"{limit / 2**20:.0f} MiB (its outputs): nothing could be scored")
    text = raw.decode("utf-8", "replace")
    try:
        graded = nbformat.reads(text, as_version=4)
        tests = score_notebook(source_nb, graded)
    except Exception as exc:  # noqa: BLE001 - what nbgrader wrote from this submission
        return blame(f"its autograded notebook could not be scored: {type(exc).__name__}: "
                     f"{str(exc)[:300]}")
    events = execute.current().events()
    from autograder.judge import static_review

    judged = events.get("judged") or {}
    tests = _gate(tests, judged)
    # What the kernel holds for the judge (probes) is no answer: a cell that reaches into the
    # course's internals earns nothing for what it defines (autograder.judge.internals).
    tests, reached = _withhold_internals(tests, judged, own_code)
    tests = _explain_undefined(tests, own_code)
    # Judged outside the kernel, a tampered kernel cannot earn a value check: what the static
    # scans find is for the instructor's eyes, not a reason to withhold points.
    forbidden = sorted({f for v in judged.values() if v["passed"] for f in v["forbidden"]})
    review = [f"review: {f}" for f in sub.static + reached
              + static_review(own_code, forbidden)]
    score = sum(t.points for t in tests)
    try:
        events["exit"] = json.loads(kernel_files.read_capped(private / "exit.json", 4096) or b"{}")
    except ValueError:
        events["exit"] = {}
    status, flags = status_confirmed(
        events, graded, _tail(private / "kernel.log", 4000),
        lambda names: kernel_data_problems(names, sandboxed), confirm)
    if status == Status.ENVIRONMENT_ERROR:
        score = 0.0  # the machine's fault: nothing charged or paid until graded again
    flags += sub.flags + review
    detail = "; ".join(flags[:5])
    return done(status, score, tests, detail, flags, text)


def _tail(path: Path, n: int = 600) -> str:
    """The end of a host-only log, never through a link, never more than ``n`` bytes."""
    from autograder.sandbox.kernel_files import read_capped

    return read_capped(path, n, tail=True).decode("utf-8", "replace").strip()
