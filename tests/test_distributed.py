"""Does `grade --dask-scheduler` give the same results as local grading?"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autograder.grading import pipeline
from autograder.sandbox import GiB, Limits

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402


@pytest.mark.slow
def test_local_cluster_on_loopback_grades_like_local_workers(root, tmp_path):
    """Graded on a 2-process Dask cluster on 127.0.0.1, are statuses and scores as expected?"""
    distributed = pytest.importorskip("distributed")
    subs = tmp_path / "submitted"
    S.put(subs, "ref", S.reference(root))
    S.put(subs, "broken", raw="{not json")
    (subs / "absent").mkdir()
    limits = Limits(memory=3 * GiB, cell_timeout=60, notebook_timeout=120)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        results = pipeline.grade(root, subs, days=[S.DAY], results_dir=tmp_path / "out",
                                 sandbox="auto", limits=limits,
                                 dask_scheduler=cluster.scheduler_address)
    by = {r.student: r for r in results}
    assert by["ref"].status == "graded"
    assert by["ref"].score == pipeline.max_score(root, S.DAY)
    assert by["broken"].status == "unreadable"
    assert by["absent"].status == "missing"
    assert (tmp_path / "out" / "ref" / f"{S.DAY}.ipynb").is_file()


def test_unreachable_scheduler_is_a_clear_error(root, tmp_path):
    """Does a wrong scheduler address fail with a message, not a traceback?"""
    pytest.importorskip("distributed")
    from autograder.grading.distributed import grade_on_cluster

    with pytest.raises(pipeline.PipelineError, match="cannot reach the Dask scheduler"):
        list(grade_on_cluster("tcp://127.0.0.1:9", tmp_path, [], connect_timeout=2))
