"""A self-check that is ready before the learner asks for it.

``python -m autograder selfcheck --standby NOTEBOOK`` does, ahead of time, all the work of a
self-check of NOTEBOOK that does not depend on what the notebook says: it imports nbgrader and
the day's checks, sets up the grading folder, and starts the kernel, which imports PyTorch and
matplotlib before any cell (into ``sys.modules`` only, never into the notebook's namespace).
When ready it prints the line ``\\x1eready`` (lines that start with ``\\x1e`` are the protocol's,
not the report's), then waits for one line on its standard input:

- ``go``: grade NOTEBOOK as saved at this moment, with the same pipeline, hidden tests and judge
  as ``selfcheck`` (:func:`autograder.selfcheck.selfcheck`), print the same report, then a last
  line ``\\x1eexit N`` (N: ``selfcheck``'s exit status) and close standard output before
  cleaning up, so the caller has the report without waiting for the clean-up;
- end of input (the notebook's kernel, which holds the other end, went away), or nothing for
  ``idle`` seconds: stop without grading.

One standby grades once (its kernel runs one notebook, then is killed, like every grading
kernel); :func:`course.progress.selfcheck` starts the next one after each check. If getting
ready failed, ``go`` still grades, the usual way. The standby runs unsandboxed, like every
self-check: it is the learner's own code on the learner's own machine.
"""

from __future__ import annotations

import os
import select
import shutil
import sys
import tempfile
import time
from pathlib import Path

from autograder.grading import pipeline
from autograder.grading import template as grading_template
from autograder.selfcheck.protocol import READY, SENTINEL

# Imported by the waiting kernel before any cell: what the notebooks' first cells import and
# what the first run of a model on the meta device pulls in (torch._dynamo, about 0.8 s).
PREIMPORT = ("torch", "torch.nn", "torch.nn.functional", "torch._dynamo", "matplotlib.pyplot",
             "ipywidgets", "tqdm.auto", "course.checking", "course.widgets", "course.training",
             "course.textgen", "course.plots")
IDLE_SECONDS = 3600


class Standby:
    """Everything a self-check of ``notebook`` needs before the notebook is read.

    Raises:
        PipelineError: for a notebook that belongs to no day of the course.
    """

    def __init__(self, notebook: Path, root: Path | None = None):
        from autograder.selfcheck.check import day_of

        self.notebook = Path(notebook).expanduser().resolve()
        self.root = pipeline.find_root(root or self.notebook.parent)
        self.day = day_of(self.notebook, self.root)
        _sweep_stale()
        self.tmp = Path(tempfile.mkdtemp(prefix=f"tfs-standby-{os.getpid()}-"))
        try:
            self._prepare()
        except BaseException:
            self.close()
            raise

    def _prepare(self) -> None:
        from jupyter_core.utils import run_sync
        from traitlets.config import Config

        from autograder.grading import execute, worker
        from autograder.sandbox.kernel_manager import GradingKernelManager
        from autograder.selfcheck.check import _grade_options

        opts = _grade_options()
        # The settings grade() will give the job (hide, which lists the job's folders, only
        # matters to a sandbox, and a self-check has none).
        self.settings = pipeline._settings(pipeline.sandbox_mode(opts.get("sandbox", False)),
                                           None, True)
        template = grading_template.template_cache(self.root, [self.day])
        (self.tmp / "worker").mkdir()
        worker._worker_setup(template, self.root, self.tmp / "worker",
                             self.settings["sandbox"])
        # The kernel first: it imports PyTorch while this process imports nbgrader and the checks.
        private = worker.kernel_files_setup(self.day, self.settings,
                                            {"TFS_PREIMPORT": ",".join(PREIMPORT)})
        km_config = Config()
        km_config.KernelManager.transport = "ipc"
        km = GradingKernelManager(kernel_name="tfs-graded", config=km_config)
        execute.PRESTARTED.append(km)          # close() stops it, whatever happens next
        run_sync(km.start_kernel)(extra_arguments=["--HistoryManager.hist_file=:memory:"])
        self.prepared = (private, worker.grading_config(self.settings))
        source = worker._WORKER["root"] / "source" / self.day / pipeline.notebook_name(self.day)
        import nbformat

        nb = nbformat.read(str(source), as_version=4)
        execute._warm_up_judge([c.source for c in nb.cells if execute._is_test_cell(c)])
        worker.warm_up_autograde(self.day, self.prepared[1])
        try:
            _wait_until_ready(km)
        except Exception as exc:  # noqa: BLE001 - re-raised with the kernel's log
            log = worker._tail(private / "kernel.log")
            raise RuntimeError(f"{exc}; kernel log: {log}") from None

    def runner(self, template: Path, todo: list[dict]):
        """Grade ``todo`` (one job) in this process, in the kernel started ahead of time."""
        from autograder.grading import worker

        for job in todo:
            if job["settings"]["limits"] != self.settings["limits"] or \
                    job["settings"]["sandbox"] != self.settings["sandbox"]:
                raise RuntimeError("the standby was prepared for other grading settings")
            yield worker.grade_one(job, prepared=self.prepared)

    def close(self) -> None:
        from autograder.grading import execute

        for km in execute.PRESTARTED:
            try:
                km.provisioner.process.kill()
            except Exception:  # noqa: BLE001 - already gone
                pass
        execute.PRESTARTED.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _sweep_stale() -> None:
    """Remove the folders and logs of standbys that were killed before they could clean up
    (``tfs-standby-<pid>-*`` of a process that no longer exists, ours only)."""
    for path in Path(tempfile.gettempdir()).glob("tfs-standby-*-*"):
        try:
            pid = int(path.name.split("-")[2])
            if path.is_symlink() or path.lstat().st_uid != os.getuid():
                continue
            os.kill(pid, 0)              # alive (or another user's): keep
        except ProcessLookupError:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        except (ValueError, IndexError, OSError):
            continue


def _wait_until_ready(km) -> None:
    """Wait until the started kernel answers (its imports are done), as nbclient would."""
    from jupyter_core.utils import run_sync

    kc = km.client()
    kc.start_channels()
    try:
        run_sync(kc.wait_for_ready)(timeout=120)
    finally:
        kc.stop_channels()


def serve(notebook: Path, root: Path | None = None, idle: float = IDLE_SECONDS,
          save: bool = True) -> int:
    """Get ready, wait for ``go`` on stdin, grade once; see the module docstring."""
    from autograder.selfcheck.check import exit_status, selfcheck

    fd, name = tempfile.mkstemp(prefix=f"tfs-standby-{os.getpid()}-", suffix=".log")
    log = Path(name)
    os.dup2(fd, 2)               # nbgrader's and the kernel manager's logging
    standby = None
    t_start = time.monotonic()
    try:
        standby = Standby(notebook, root)
        print(f"ready in {time.monotonic() - t_start:.2f} s", file=sys.stderr)
        print(READY, flush=True)
    except Exception as exc:  # noqa: BLE001 - "go" then grades the usual way
        print(f"standby: not ready ({type(exc).__name__}: {exc})", file=sys.stderr)
    code = 2
    try:
        ready, _, _ = select.select([sys.stdin], [], [], idle)
        line = sys.stdin.readline() if ready else ""
        if line.strip() == "go":
            t0 = time.monotonic()
            try:
                report = selfcheck(notebook, root=root, save=save,
                                   runner=standby.runner if standby else None)
                code = exit_status(report)
            except pipeline.PipelineError as exc:
                print(f"selfcheck: {exc}")
            print(f"{SENTINEL}{code}", flush=True)
            print(f"graded in {time.monotonic() - t0:.2f} s after go", file=sys.stderr)
            os.close(1)          # the caller has its report; the clean-up is ours
    finally:
        if standby is not None:
            standby.close()
        os.close(fd)
        if not os.environ.get("TFS_STANDBY_KEEP_LOG"):
            log.unlink(missing_ok=True)
    return code

