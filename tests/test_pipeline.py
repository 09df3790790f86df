"""Does grading survive broken submissions, and score right answers whatever they print?"""

from __future__ import annotations

import csv
import json
import os

import nbformat
import pytest

from autograder.authoring.author import text_to_notebook
from autograder.grading import pipeline, template
from autograder.grading.pipeline import PipelineError

DAY = "day02_queries_keys_values"


def test_resolve_days_accepts_numbers_and_names(root):
    """Do `2`, `day02` and the full name all resolve, and an unknown day fail clearly?"""
    assert pipeline.resolve_days(root, ["2"]) == [DAY]
    assert pipeline.resolve_days(root, ["day02"]) == [DAY]
    assert pipeline.resolve_days(root, [DAY]) == [DAY]
    with pytest.raises(PipelineError, match="unknown day 'day99'.*the course has"):
        pipeline.resolve_days(root, ["day99"])


def test_discover_rejects_a_missing_folder(tmp_path):
    """Is a submissions path that is not a folder reported, not a traceback?"""
    with pytest.raises(PipelineError, match="not a folder"):
        pipeline.discover(tmp_path / "nope", [DAY])


def test_worker_start_failure_quotes_the_logs(tmp_path):
    """Does the "workers keep dying" error carry the logs' ends (their folder is removed)?"""
    (tmp_path / "worker-1.log").write_text("old start\n" + "x" * 3000 + "\nImportError: old")
    (tmp_path / "worker-2.log").write_text("ModuleNotFoundError: No module named 'nbgrader'")
    os.utime(tmp_path / "worker-1.log", (1, 1))
    text = pipeline._log_tails(tmp_path)
    assert text.index("worker-2.log") < text.index("worker-1.log")  # newest first
    assert "No module named 'nbgrader'" in text and "ImportError: old" in text
    assert "old start" not in text  # only the end of a long log
    assert pipeline._log_tails(tmp_path / "none") == "(no worker wrote a log)"


def test_authoring_rejects_duplicate_ids():
    """Does the plain-text format refuse two cells with one id?"""
    with pytest.raises(ValueError, match="duplicate cell id"):
        text_to_notebook("# %% id=a\nx = 1\n# %% id=a\ny = 2\n")


def _reference(root):
    return nbformat.read(str(root / "solutions" / DAY / f"{DAY}.ipynb"), as_version=4)


def _put(tmp, student, nb=None, name=f"{DAY}.ipynb", raw=None):
    folder = tmp / student / DAY
    folder.mkdir(parents=True)
    if raw is not None:
        (folder / name).write_text(raw)
    elif nb is not None:
        nbformat.write(nb, str(folder / name))


@pytest.mark.slow
def test_grading_a_mixed_batch(root, tmp_path):
    """Are renamed, unreadable, missing, warning and test-deleting submissions all graded?"""
    subs = tmp_path / "submitted"
    ref = _reference(root)
    _put(subs, "renamed", ref, name=f"{DAY} (1).ipynb")
    _put(subs, "truncated", raw=json.dumps(nbformat.v4.new_notebook())[:40])
    (subs / "absent").mkdir(parents=True)
    warns = nbformat.from_dict(ref)
    for cell in warns.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "day02_softmax":
            cell.source = cell.source.replace(
                "### BEGIN SOLUTION",
                "### BEGIN SOLUTION\n    import warnings\n"
                "    warnings.warn('x.T on a 3-D tensor is deprecated', UserWarning)")
    _put(subs, "warns", warns)
    deleted = nbformat.from_dict(ref)
    deleted.cells = [c for c in deleted.cells if c.get("metadata", {}).get("nbgrader", {})
                     .get("grade_id") != "day02_attention_mask"]
    _put(subs, "deleted-test", deleted)

    out = tmp_path / "out"
    results = pipeline.grade(root, subs, days=[DAY], jobs=2, results_dir=out / "results")
    by = {r.student: r for r in results}
    full = pipeline.max_score(root, DAY)
    assert by["renamed"].status == "graded" and by["renamed"].score == full
    assert by["warns"].status == "graded" and by["warns"].score == full, by["warns"].tests
    assert by["truncated"].status == "unreadable"
    assert "not a valid notebook" in by["truncated"].detail
    assert by["absent"].status == "missing" and by["absent"].score == 0
    mask = next(t for t in by["deleted-test"].tests if t.grade_id == "day02_attention_mask")
    assert by["deleted-test"].status == "graded"
    assert mask.points == 0 and "missing" in mask.message
    assert by["deleted-test"].score == full - mask.max_points
    # every result was written to disk, one file per (student, day)
    files = sorted(p.parent.name for p in (out / "results").rglob("*.json"))
    assert files == sorted(by)
    pipeline.write_csv(results, [DAY], out / "grades.csv")
    rows = list(csv.DictReader(open(out / "grades.csv")))
    assert {r["student_id"] for r in rows} == set(by)
    assert all(float(r["max_total"]) == full for r in rows)


def test_grading_template_is_made_once_per_course_version(root, tmp_path, monkeypatch):
    """Is the generated template reused (a self-check must not pay nbgrader's generate step
    again), and made anew when the course changes?"""
    monkeypatch.setenv("TFS_GRADING_CACHE", str(tmp_path / "cache"))
    made = []
    real = template.prepare_template

    def counting(*args, **kwargs):
        made.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(template, "prepare_template", counting)
    day = "day02_queries_keys_values"
    first = template.template_cache(root, [day])
    assert template.template_cache(root, [day]) == first and len(made) == 1
    monkeypatch.setattr(template, "course_fingerprint", lambda r, d: "another version")
    assert template.template_cache(root, [day]) != first and len(made) == 2


def test_a_converter_failure_keeps_the_traceback_nbgrader_logged():
    """nbgrader logs the traceback, then raises "Please see the above traceback": the error
    kept for the result's detail is the traceback, not the summary after it."""
    import logging

    from autograder.core.nbgrader import _ErrorLog

    errors, log = _ErrorLog(), logging.getLogger("tfs-test-converter")
    log.addHandler(errors)
    try:
        1 / 0  # noqa: B018 - the failure nbgrader would log
    except ZeroDivisionError:
        log.error("There was an error processing assignment", exc_info=True)
    log.error("Please see the above traceback for details.")
    log.removeHandler(errors)
    assert "ZeroDivisionError" in errors.last


def test_a_workers_gradebook_copy_skips_the_disk_and_no_other_database_does(root, tmp_path,
                                                                           monkeypatch):
    """A worker's throwaway gradebook copy commits without fsync or journal file; a gradebook
    at any other path (the instructor's) keeps SQLite's defaults, and setting up again (the
    standbys of a helper) moves the setting to the new copy without stacking listeners. The
    copy keeps one engine for the process."""
    import shutil

    from nbgrader.api import Gradebook
    from sqlalchemy import text

    from autograder.grading import worker

    def pragmas(path):
        with Gradebook(f"sqlite:///{path}", "transformers-from-scratch") as gb:
            return (gb.db.execute(text("PRAGMA synchronous")).scalar(),
                    gb.db.execute(text("PRAGMA journal_mode")).scalar())

    for var in ("PYTHONPATH", "JUPYTER_PATH"):   # _worker_setup prepends to both
        monkeypatch.setenv(var, os.environ.get(var, ""))
    saved = dict(worker._WORKER)
    try:
        tpl = template.template_cache(root, ["day01_why_rnns_struggle"])
        first = worker._worker_setup(tpl, root, tmp_path, False)
        second = worker._worker_setup(tpl, root, tmp_path, False)
        assert pragmas(second / "gradebook.db") == (0, "memory")
        assert pragmas(first / "gradebook.db") == (2, "delete")
        other = tmp_path / "instructor.db"
        shutil.copy(second / "gradebook.db", other)
        assert pragmas(other) == (2, "delete")

        # one SQLAlchemy engine per process for the copy (its compiled statements are kept
        # from one notebook to the next); a new engine for any other database, as nbgrader does
        def engine(path):
            with Gradebook(f"sqlite:///{path}", "transformers-from-scratch") as gb:
                return gb.engine

        assert engine(second / "gradebook.db") is engine(second / "gradebook.db")
        assert pragmas(second / "gradebook.db") == (0, "memory")   # after close, reopened
        assert engine(other) is not engine(other)
    finally:
        worker._WORKER.clear()
        worker._WORKER.update(saved)


def test_the_standbys_dry_autograde_leaves_nothing_behind(root, tmp_path, monkeypatch):
    """``worker.warm_up_autograde`` (a standby's dry run, no kernel) runs nbgrader's autograde
    on the blank notebook and removes its folders; the grading that follows is unchanged (the
    self-check tests grade after it)."""
    from autograder.grading import pipeline, worker

    for var in ("PYTHONPATH", "JUPYTER_PATH"):   # _worker_setup prepends to both
        monkeypatch.setenv(var, os.environ.get(var, ""))
    saved = dict(worker._WORKER)
    day = "day01_why_rnns_struggle"
    try:
        tpl = template.template_cache(root, [day])
        work = worker._worker_setup(tpl, root, tmp_path, False)
        settings = pipeline._settings(False, None, True)
        worker.warm_up_autograde(day, worker.grading_config(settings))
        for top in ("submitted", "autograded"):
            assert not (work / top / worker.WARM_UP_STUDENT).exists()
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{work / 'gradebook.db'}", "transformers-from-scratch") as gb:
            assert gb.find_submission(day, worker.WARM_UP_STUDENT)   # autograde did run
    finally:
        worker._WORKER.clear()
        worker._WORKER.update(saved)
