"""``grade --dask-scheduler ADDRESS``: one Dask task per submission.

The course's grading template (source notebooks, gradebook) travels to
the workers once as a compressed archive; each task carries its submission's bytes and runs
the same sandboxed grading as a local worker, in a fresh ``python -m
autograder.grading.distributed``
process (a Dask worker is a daemon process and cannot own a process pool; a separate process
also keeps a crash or a hang from taking the Dask worker down). Dask workers need the course
installed (``pip install -e .``) and, for the sandbox, bubblewrap.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

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
        d = Path(tempfile.mkdtemp(prefix=f"tfs-dask-{h}-"))
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            tar.extractall(d / "template", filter="data")
        _CACHE[h] = d
    return _CACHE[h]


def remote_grade(job: dict, blob: bytes) -> dict:
    """A Dask task: grade one submission on this worker machine."""
    from autograder.core.records import Result

    base = _unpacked(blob)
    job = dict(job)
    content = job.pop("content", None)
    if content is not None:
        sub = Path(tempfile.mkdtemp(prefix="sub-", dir=base)) / job["student"] / job["day"]
        sub.mkdir(parents=True)
        path = sub / Path(job["path"]).name
        path.write_bytes(content)
        job["path"] = str(path)
    hard = job["settings"]["limits"]["notebook_timeout"] + 240
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    proc = subprocess.Popen([sys.executable, "-m", "autograder.grading.distributed", str(base)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        out, _ = proc.communicate(json.dumps(job).encode(), timeout=hard)
        return json.loads(out.decode().strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        why, status = f"grading took longer than {hard} s on the Dask worker", "timeout"
    except (ValueError, IndexError):
        why = f"the grading process on the Dask worker died (exit code {proc.returncode})"
        status = "environment-error"
    return Result(job["student"], job["day"], status, 0.0, job.get("total", 0.0),
                  detail=why, key=job.get("key", "")).to_json()


def _child(base: str) -> None:
    """``python -m autograder.grading.distributed BASE``: grade the job read from stdin."""
    from autograder.core.records import Result
    from autograder.grading import worker

    job = json.loads(sys.stdin.read())
    # One notebook per process: a fork server (autograder.sandbox.forkserver) would only add its
    # start.
    os.environ["TFS_FORK_SERVER"] = "0"
    real_stdout = os.dup(1)
    os.dup2(2, 1)  # nbgrader chatter must not mix with the answer
    course_root = Path(worker.__file__).resolve().parents[2]
    worker._worker_setup(Path(base) / "template", course_root, Path(base),
                         bool(job["settings"].get("sandbox")))
    try:
        data = worker.grade_one(job)
    except Exception as exc:  # noqa: BLE001
        data = Result(job["student"], job["day"], "environment-error", 0.0,
                               job.get("total", 0.0), detail=f"{type(exc).__name__}: {exc}",
                               key=job.get("key", "")).to_json()
    os.write(real_stdout, (json.dumps(data) + "\n").encode())


def grade_on_cluster(address: str, template: Path, todo: list[dict],
                     connect_timeout: float = 30) -> Iterator[dict]:
    """Submit every job to the Dask scheduler at ``address``; yield results as they finish.

    A task that fails (worker lost, unpicklable error...) yields an environment-error result.
    """
    from distributed import Client, as_completed

    from autograder.core.course import PipelineError
    from autograder.core.records import Result

    try:
        client = Client(address, timeout=connect_timeout)
    except OSError as exc:
        raise PipelineError(f"cannot reach the Dask scheduler at {address}: {exc}") from exc
    try:
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
                yield Result(job["student"], job["day"], "environment-error", 0.0,
                             job.get("total", 0.0),
                             detail=f"the Dask task failed: {type(exc).__name__}: {exc}",
                             key=job.get("key", "")).to_json()
    finally:
        client.close()


if __name__ == "__main__":
    _child(sys.argv[1])
