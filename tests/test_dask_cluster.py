"""A real Dask cluster, started as an instructor would (``dask scheduler``, ``dask worker
--nworkers 2 --nthreads 1``, separate processes on loopback), grades like the local pool,
keeps its grading processes warm between tasks, and loses no submission when a worker is
killed mid-batch."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from autograder.grading import pipeline
from autograder.sandbox import GiB, Limits

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

SERVE = "autograder.grading.distributed --serve"


def _graders() -> dict[int, int]:
    """{grading process pid: its parent's pid} for every warm grading process here."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if SERVE in cmd:
                stat = Path(f"/proc/{entry}/stat").read_text()
                out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    return out


def _summary(results) -> dict:
    return {r.student: (r.status, r.score, sorted((t.grade_id, t.points) for t in r.tests))
            for r in results}


@pytest.fixture
def cluster(tmp_path):
    from autograder.benchmark import start_cluster, stop_cluster

    address, procs = start_cluster(2, tmp_path)
    try:
        yield address
    finally:
        stop_cluster(procs)


@pytest.mark.slow
def test_a_killed_worker_loses_nothing_and_results_match_the_local_pool(root, tmp_path,
                                                                         cluster):
    subs = tmp_path / "submitted"
    for i in range(4):
        S.put(subs, f"ref{i}", S.reference(root))
        S.put(subs, f"blank{i}", S.release(root))
    S.put(subs, "broken", raw="{not json")
    limits = Limits(memory=3 * GiB, cell_timeout=60, notebook_timeout=120)
    local = pipeline.grade(root, subs, days=[S.DAY], jobs=2, results_dir=tmp_path / "local",
                           sandbox="auto", limits=limits)

    seen: list[str] = []
    killed: list[int] = []

    def progress(result):
        seen.append(result.student)
        if len(seen) == 2 and not killed:  # both workers warm and busy: kill one mid-task
            parents = sorted(set(_graders().values()))
            assert len(parents) == 2, parents  # one warm grading process per Dask worker
            os.kill(parents[0], signal.SIGKILL)
            killed.append(parents[0])

    remote = pipeline.grade(root, subs, days=[S.DAY], results_dir=tmp_path / "dask",
                            sandbox="auto", limits=limits, dask_scheduler=cluster,
                            progress=progress, resume=False)
    assert killed, "no worker was killed"
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 9  # each graded once
    assert _summary(remote) == _summary(local)
    by = {r.student: r for r in remote}
    assert by["ref0"].score == pipeline.max_score(root, S.DAY)
    assert by["blank0"].score == 0 and by["broken"].status == "unreadable"
    # the killed worker's grading process went with it (its parent is gone)
    deadline = time.monotonic() + 15
    while killed[0] in _graders().values() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert killed[0] not in _graders().values()
