"""``grade --dask-scheduler ADDRESS``: one Dask task per submission.

The course's grading template (source notebooks, gradebook) travels to the workers once as a
compressed archive; each task carries its submission's bytes and runs the same sandboxed
grading as a local worker, in a grading process that the Dask worker keeps between tasks
(:class:`_Grader`, ``python -m autograder.grading.distributed --serve``): like a local pool's
worker it sets up its course folder once and keeps its fork server, with PyTorch imported,
warm, so a cluster grades at the local pool's speed per core. A separate process because a
Dask worker is a daemon and cannot own a process pool, and so that a crash or a hang never
takes the Dask worker down: a grading process that dies is replaced and its job tried once
more (dead again, the day's answer key is graded in a fresh one: if it grades, the job gets
``kernel-died``, else ``environment-error``; :func:`autograder.grading.preflight.after_death`),
one past the hard deadline is killed, and all of them stop with their worker
(:class:`GraderPlugin`; each also watches its parent). A Dask worker that is lost mid-task has its
task run again elsewhere by the scheduler; each submission still yields one result. Dask
workers need the course installed (``pip install -e .``) and, for the sandbox, bubblewrap.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin

from autograder.core.records import Status

_CACHE: dict[str, Path] = {}


def pack_template(template: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ("source", "release", "gradebook.db"):
            if (template / name).exists():
                tar.add(template / name, arcname=name)
    return buf.getvalue()


def _unpacked(blob: bytes) -> Path:
    h = hashlib.sha256(blob).hexdigest()[:16]
    if h not in _CACHE or not _CACHE[h].is_dir():
        try:  # inside the worker's own folder, which Dask removes (a killed one's, later)
            from distributed import get_worker

            parent = get_worker().local_directory
        except ValueError:
            parent = None
        d = Path(tempfile.mkdtemp(prefix=f"tfs-dask-{h}-", dir=parent))
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            tar.extractall(d / "template", filter="data")
        _CACHE[h] = d
    return _CACHE[h]


class _Grader:
    """One long-lived grading process on this Dask worker: ``python -m
    autograder.grading.distributed --serve BASE``, the local pool's worker
    (:func:`autograder.grading.pool._worker_main`) behind a pipe: it sets up its course folder
    once, keeps its fork server (PyTorch imported once, :mod:`autograder.sandbox.forkserver`)
    warm, and grades one JSON job per line. It dies with its Dask worker (a thread watches
    its parent) and when its standard input closes."""

    def __init__(self, base: Path):
        env = dict(os.environ)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        log = open(base / f"grader-{os.getpid()}-{len(_ALL)}.log", "ab")  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autograder.grading.distributed", "--serve", str(base)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True, env=env)
        finally:
            log.close()
        self.buffer = b""
        _ALL.append(self)

    def grade(self, job: dict, hard: float) -> dict:
        """The job's result, or raise ``TimeoutError`` (past ``hard`` seconds) or
        ``EOFError`` (the process died)."""
        import selectors
        import time

        try:
            self.proc.stdin.write(json.dumps(job).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise EOFError from None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + hard
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                if sel.select(timeout=min(left, 5.0)):
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        raise EOFError
                    self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self, kill: bool = False) -> None:
        if self in _ALL:
            _ALL.remove(self)
        try:
            if kill:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


_ALL: list[_Grader] = []              # every grading process of this Dask worker
_IDLE: dict[tuple[str, bool], list[_Grader]] = {}
_LOCK = threading.Lock()


def close_graders() -> None:
    """Stop every grading process of this Dask worker (its plugin's teardown)."""
    with _LOCK:
        _IDLE.clear()
        graders = list(_ALL)
    for g in graders:
        g.close()


class GraderPlugin(WorkerPlugin):
    """A Dask worker plugin: the worker's grading processes stop with the worker, and its
    unpacked grading templates are removed."""

    name = "tfs-graders"

    def setup(self, worker=None):
        pass

    def teardown(self, worker=None):
        close_graders()
        for folder in list(_CACHE.values()):  # the unpacked templates and their kernels' work
            shutil.rmtree(folder, ignore_errors=True)
        _CACHE.clear()


def remote_grade(job: dict, blob: bytes) -> dict:
    """A Dask task: grade one submission on this worker machine, in a grading process kept
    warm between tasks (:class:`_Grader`). A process that dies is replaced and the job
    tried once more, then the machine's control decides whose fault it was; one past the
    deadline is killed (status ``timeout``)."""
    from autograder.core.records import Result
    from autograder.grading import preflight

    base = _unpacked(blob)
    job = dict(job)
    content = job.pop("content", None)
    holder = None
    if content is not None:
        holder = Path(tempfile.mkdtemp(prefix="sub-", dir=base))
        sub = holder / job["student"] / job["day"]
        sub.mkdir(parents=True)
        path = sub / Path(job["path"]).name
        path.write_bytes(content)
        job["path"] = str(path)
    hard = job["settings"]["limits"]["notebook_timeout"] + 240
    key = (str(base), bool(job["settings"].get("sandbox")))

    def attempt(one: dict) -> dict:
        """``one``'s result; raises TimeoutError or EOFError (the process is then gone)."""
        with _LOCK:
            idle = _IDLE.setdefault(key, [])
            grader = idle.pop() if idle else None
        if grader is None:
            grader = _Grader(base)
        try:
            data = grader.grade(one, hard)
        except EOFError:
            attempt.code = grader.proc.poll()
            grader.close(kill=True)
            raise
        except TimeoutError:
            grader.close(kill=True)
            raise
        with _LOCK:
            _IDLE.setdefault(key, []).append(grader)
        return data

    try:
        for _attempt in range(2):
            try:
                return attempt(job)
            except TimeoutError:
                return Result.failed(job, Status.TIMEOUT, f"grading took longer than {hard}"
                                     " s on the Dask worker; its grading process was stopped"
                                     ).to_json()
            except EOFError:
                continue
        why = (f"the grading process on the Dask worker died (exit code {attempt.code}) "
               "twice on this notebook")
        try:  # dead twice: the machine's control, in a fresh grading process
            control = attempt(preflight.control_job(job["day"], job["settings"]))
        except (TimeoutError, EOFError):
            control = None
        return preflight.after_death(job, why, control)
    finally:
        if holder is not None:
            shutil.rmtree(holder, ignore_errors=True)


def _serve(base: str) -> None:
    """``python -m autograder.grading.distributed --serve BASE``: grade the jobs read from
    stdin, one JSON per line, answering one JSON line each, until stdin closes."""
    from autograder.core.records import Result
    from autograder.grading import worker

    _die_with_parent()
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # nbgrader chatter must not mix with the answers
    course_root = Path(worker.__file__).resolve().parents[2]
    ready = None
    for line in sys.stdin:
        job = json.loads(line)
        sandbox = bool(job["settings"].get("sandbox"))
        try:
            if ready != sandbox:
                worker._worker_setup(Path(base) / "template", course_root, Path(base), sandbox)
                ready = sandbox
            data = worker.grade_one(job)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the batch
            data = Result.failed(job, Status.ENVIRONMENT_ERROR,
                                 f"{type(exc).__name__}: {exc}").to_json()
        os.write(real_stdout, (json.dumps(data) + "\n").encode())
    # stdin closed: skip the interpreter's finalisation (about a second with PyTorch loaded)
    sys.stderr.flush()
    os._exit(0)


def _die_with_parent() -> None:
    """End this process (and its process group) when the Dask worker that started it is
    gone: a thread watches the parent's pid (``PR_SET_PDEATHSIG`` would follow the thread
    that started the process, not the worker)."""
    parent = os.getppid()

    def watch():
        import time

        while os.getppid() == parent:
            time.sleep(1.0)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="tfs-parent-watch").start()


def grade_on_cluster(address: str, template: Path, todo: list[dict],
                     connect_timeout: float = 30) -> Iterator[dict]:
    """Submit every job to the Dask scheduler at ``address``; yield results as they finish.

    A task that fails twice (worker lost, unpicklable error...) yields the result that the
    day's answer key, graded on the cluster next, decides (:func:`_after_lost_task`).
    """
    from distributed import Client, as_completed

    from autograder.core.course import PipelineError

    try:
        client = Client(address, timeout=connect_timeout)
    except OSError as exc:
        raise PipelineError(f"cannot reach the Dask scheduler at {address}: {exc}") from exc
    try:
        client.register_plugin(GraderPlugin(), name=GraderPlugin.name)
        blob = client.scatter(pack_template(template), broadcast=True)
        futures = {}
        for job in todo:
            job = dict(job)
            job["content"] = Path(job["path"]).read_bytes() if job["path"] else None
            fut = client.submit(remote_grade, job, blob, pure=False, retries=1)
            futures[fut] = job
        for fut in as_completed(futures):
            job = futures[fut]
            try:
                yield fut.result()
            except Exception as exc:  # noqa: BLE001 - one lost task is one status
                yield _after_lost_task(client, blob, job, exc)
    finally:
        client.close()


def _after_lost_task(client, blob, job: dict, exc: Exception) -> dict:
    """The result of ``job`` whose task failed (``exc``, after the scheduler's retry): the
    day's answer key is graded on the cluster; if it grades, the notebook took its workers
    down (``kernel-died``), else the cluster failed (``environment-error``)."""
    from autograder.grading import preflight

    why = f"the Dask task failed: {type(exc).__name__}: {preflight.one_line(exc, 300)}"
    control_job = preflight.control_job(job["day"], job["settings"])
    try:
        control = client.submit(remote_grade, control_job, blob, pure=False).result(
            timeout=job["settings"]["limits"]["notebook_timeout"] + 300)
    except Exception:  # noqa: BLE001 - the cluster cannot grade the control either
        control = None
    return preflight.after_death(job, why, control)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2])
    else:
        sys.exit("usage: python -m autograder.grading.distributed --serve BASE")
