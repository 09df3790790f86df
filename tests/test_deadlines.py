"""Due dates, extensions and late penalties (autograder.core.deadlines): the file is checked
with clear errors, every policy pays what it says, a submission's time comes from a source
that can vouch for it, and one without such a time is flagged, never guessed.

The classroom's case (a forged ``timestamp.txt``; root's record of the arrival counts) is in
tests/test_classroom_collect.py (needs root)."""

from __future__ import annotations

import csv
import datetime as dt
import os
import zipfile
from pathlib import Path

import pytest

from autograder.core import deadlines
from autograder.core.course import PipelineError
from autograder.core.records import Result, late_of, write_csv

ROOT = Path(__file__).resolve().parents[1]
DAY = "day03_self_attention"
DUE = dt.datetime(2027, 1, 11, 23, 59, tzinfo=dt.UTC)


def rules(tmp_path: Path, late: str = "", extra: str = "") -> deadlines.Deadlines:
    f = tmp_path / "deadlines.toml"
    f.write_text(f'timezone = "UTC"\n[due]\nday03 = "2027-01-11 23:59"\n[late]\n{late}\n{extra}')
    return deadlines.load(f, ROOT)


def result(at: dt.datetime | None, source: str = "lms", student: str = "ada",
           score: float = 10.0) -> Result:
    return Result(student, DAY, "graded", score, 10.0,
                  submitted_at=at.isoformat() if at else "", time_source=source)


def late(r: deadlines.Deadlines, res: Result):
    return late_of(res, r, res.score)


# --------------------------------------------------------------------------- the policies

def test_on_time_pays_everything(tmp_path):
    r = rules(tmp_path, 'policy = "per-hour"\npenalty = 0.1')
    x = late(r, result(DUE - dt.timedelta(minutes=1)))
    assert (x.hours_late, x.penalty, x.after) == (0.0, 0.0, 10.0) and "on time" in x.note


def test_per_hour_counts_started_hours_down_to_the_floor(tmp_path):
    r = rules(tmp_path, 'policy = "per-hour"\npenalty = 0.1\nfloor = 0.6')
    assert late(r, result(DUE + dt.timedelta(minutes=1))).penalty == pytest.approx(1.0)
    assert late(r, result(DUE + dt.timedelta(hours=2, minutes=1))).penalty == pytest.approx(3.0)
    x = late(r, result(DUE + dt.timedelta(hours=30)))
    assert x.penalty == pytest.approx(4.0) and x.after == pytest.approx(6.0)  # the floor
    assert "late" in x.note and "at most 40%" in x.note


def test_per_day_counts_started_days(tmp_path):
    r = rules(tmp_path, 'policy = "per-day"\npenalty = 0.2')
    assert late(r, result(DUE + dt.timedelta(hours=1))).penalty == pytest.approx(2.0)
    assert late(r, result(DUE + dt.timedelta(hours=25))).penalty == pytest.approx(4.0)
    assert late(r, result(DUE + dt.timedelta(days=9))).after == pytest.approx(0.0)


def test_cutoff_pays_nothing_after_it(tmp_path):
    r = rules(tmp_path, 'policy = "cutoff"\ncutoff = "24h"')
    assert late(r, result(DUE + dt.timedelta(hours=23))).penalty == 0.0
    x = late(r, result(DUE + dt.timedelta(hours=25)))
    assert x.after == 0.0 and "no credit" in x.note
    # with a per-hour policy, the cut-off still ends all credit
    r = rules(tmp_path, 'policy = "per-hour"\npenalty = 0.01\ncutoff = "2d"')
    assert late(r, result(DUE + dt.timedelta(hours=47))).after == pytest.approx(5.3)
    assert late(r, result(DUE + dt.timedelta(hours=49))).after == 0.0


def test_policy_none_records_lateness_only(tmp_path):
    x = late(rules(tmp_path), result(DUE + dt.timedelta(hours=5)))
    assert x.hours_late == pytest.approx(5.0) and x.penalty == 0.0


def test_an_extension_moves_the_due_date_for_that_student_only(tmp_path):
    r = rules(tmp_path, 'policy = "per-hour"\npenalty = 0.01',
              '[extensions]\nada = { day03 = "+48h" }\nbob = { day03 = "2027-01-12 12:00" }')
    when = DUE + dt.timedelta(hours=30)
    assert late(r, result(when, student="ada")).penalty == 0.0
    assert "(extended)" in late(r, result(when, student="ada")).note
    assert late(r, result(when, student="bob")).penalty == pytest.approx(1.8)  # 18 h started
    assert late(r, result(when, student="cy")).penalty == pytest.approx(3.0)


def test_a_missing_notebook_is_never_late(tmp_path):
    r = rules(tmp_path, 'policy = "per-hour"\npenalty = 0.1')
    miss = Result("ada", DAY, "missing", 0.0, 10.0)
    assert late(r, miss).penalty == 0.0 and not late(r, miss).flagged


# --------------------------------------------------------------------------- times

def test_without_a_trustworthy_time_the_submission_is_flagged_not_guessed(tmp_path):
    r = rules(tmp_path, 'policy = "cutoff"\ncutoff = "0h"')
    for res in (result(None, ""), result(None, "unreadable"),
                result(DUE + dt.timedelta(days=3), "file")):
        x = late(r, res)
        assert x.flagged and x.penalty == 0.0 and "no trustworthy submission time" in x.note
    trusting = rules(tmp_path, 'policy = "cutoff"\ncutoff = "0h"\ntrust_file_times = true')
    assert late(trusting, result(DUE + dt.timedelta(days=3), "file")).after == 0.0


def test_the_time_comes_from_timestamp_txt_then_the_file(tmp_path):
    nb = tmp_path / "ada" / DAY / f"{DAY}.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text("{}")
    os.utime(nb, (1.8e9, 1.8e9))
    assert deadlines.submission_time(nb) == (
        dt.datetime.fromtimestamp(1.8e9, dt.UTC).isoformat(), "file")
    (nb.parent / "timestamp.txt").write_text("2027-01-11 22:00:00.5 UTC\n")  # nbgrader's
    assert deadlines.submission_time(nb) == ("2027-01-11T22:00:00.500000+00:00", "nbgrader")
    (nb.parent / "timestamp.txt").write_text("last tuesday")
    assert deadlines.submission_time(nb) == ("", "unreadable")
    (nb.parent / "timestamp.txt").unlink()
    os.symlink("/etc/hostname", nb.parent / "timestamp.txt")  # a link is never followed
    assert deadlines.submission_time(nb)[1] == "file"
    vouched = dt.datetime(2027, 1, 12, tzinfo=dt.UTC)
    assert deadlines.submission_time(nb, vouched) == (vouched.isoformat(), "classroom")
    assert deadlines.submission_time(None) == ("", "")


def test_an_lms_zip_gives_each_submission_its_attempt_time(tmp_path):
    from autograder.grading.collect import unzip_submissions

    zpath = tmp_path / "lms.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr(f"day03_ada_attempt_2027-01-12-01-30-00_{DAY}.ipynb", "{}")
        zf.writestr(f"day03_ada_attempt_2027-01-11-20-00-00_{DAY}.ipynb", "{}")
    times = {}
    unzip_submissions(zpath, tmp_path / "out", [DAY], times=times)
    assert times == {("ada", DAY): dt.datetime(2027, 1, 12, 1, 30, tzinfo=dt.UTC)}


def test_grade_records_each_submissions_time(tmp_path, monkeypatch):
    """pipeline.grade stores the host's reading of the time in each result (the kernel never
    sees or reports it), for fresh and for cached results alike."""
    from autograder.grading import pipeline, template

    monkeypatch.setenv("TFS_GRADING_CACHE", str(tmp_path / "grading-cache"))
    monkeypatch.setattr(template, "template_cache", lambda root, days: tmp_path / "template")
    subs = tmp_path / "subs"
    for student in ("ada", "bob"):
        d = subs / student / DAY
        d.mkdir(parents=True)
        (d / f"{DAY}.ipynb").write_text("{}")
    (subs / "ada" / DAY / "timestamp.txt").write_text("2027-01-12 00:30:00 UTC")

    def runner(template, jobs):
        for j in jobs:
            yield Result(j["student"], j["day"], "graded", 10.0, 10.0, key=j["key"]).to_json()

    out = tmp_path / "results"
    vouched = {("bob", DAY): dt.datetime(2027, 1, 11, 12, tzinfo=dt.UTC)}
    got = pipeline.grade(ROOT, subs, days=[DAY], results_dir=out, sandbox=False,
                         runner=runner, vouched=vouched)
    by = {r.student: (r.submitted_at, r.time_source) for r in got}
    # with the classroom's record, one it lacks is "unrecorded" (its own claim kept, not trusted)
    assert by == {"ada": ("2027-01-12T00:30:00+00:00", "unrecorded"),
                  "bob": ("2027-01-11T12:00:00+00:00", "classroom")}
    (subs / "ada" / DAY / "timestamp.txt").write_text("2027-01-11 00:30:00 UTC")
    again = pipeline.grade(ROOT, subs, days=[DAY], results_dir=out, sandbox=False,
                           runner=runner)
    assert {r.student: r.time_source for r in again} == {"ada": "nbgrader", "bob": "file"}
    saved = Result.from_json(__import__("json").loads((out / "ada" / f"{DAY}.json")
                                                      .read_text()))
    assert saved.submitted_at == "2027-01-11T00:30:00+00:00"


# --------------------------------------------------------------------------- grades.csv

def test_grades_csv_shows_raw_penalty_and_after(tmp_path):
    r = rules(tmp_path, 'policy = "per-hour"\npenalty = 0.1')
    results = [result(DUE + dt.timedelta(hours=2, minutes=30), student="ada"),
               result(DUE - dt.timedelta(hours=1), student="bob", score=7.0),
               result(None, "", student="cy")]
    path = tmp_path / "grades.csv"
    write_csv(results, [DAY], path, deadlines=r)
    rows = {row["student_id"]: row for row in csv.DictReader(path.open())}
    assert list(rows["ada"]) == ["student_id", f"{DAY}_raw", f"{DAY}_late_hours",
                                 f"{DAY}_penalty", DAY, "total", "max_total"]
    assert (rows["ada"][f"{DAY}_raw"], rows["ada"][f"{DAY}_late_hours"],
            rows["ada"][f"{DAY}_penalty"], rows["ada"][DAY], rows["ada"]["total"]) == \
        ("10", "2.50", "3", "7", "7")
    assert rows["bob"][f"{DAY}_late_hours"] == "0" and rows["bob"][DAY] == "7"
    assert rows["cy"][f"{DAY}_late_hours"] == "no-time" and rows["cy"][DAY] == "10"
    write_csv(results, [DAY], path)  # no deadlines: the layout of before
    assert next(csv.reader(path.open())) == ["student_id", DAY, "total", "max_total"]


def test_feedback_tells_the_learner(tmp_path):
    from autograder.grading.feedback import write_feedback

    r = rules(tmp_path, 'policy = "per-day"\npenalty = 0.25')
    res = result(DUE + dt.timedelta(hours=3))
    (tmp_path / "results" / "ada").mkdir(parents=True)
    (tmp_path / "results" / "ada" / f"{DAY}.json").write_text(
        __import__("json").dumps(res.to_json()))
    page = write_feedback(tmp_path / "results", tmp_path / "fb", deadlines=r)[0].read_text()
    assert "3.0 h late" in page and "Late penalty" in page and "7.5 / 10" in page


# --------------------------------------------------------------------------- the file

@pytest.mark.parametrize("text, words", [
    ('[due]\nday03 = "next week"', "is not a date and time"),
    ('[due]\nday99 = "2027-01-01 00:00"', "'day99' is not a day of the course"),
    ('timezone = "Mars/Olympus"', "is not an IANA time zone"),
    ('[late]\npolicy = "sometimes"', "late.policy = 'sometimes'"),
    ('[late]\npolicy = "per-hour"\npenalty = 1.5', "must be a number from 0 to 1"),
    ('[late]\npolicy = "per-hour"', "needs late.penalty above 0"),
    ('[late]\npolicy = "cutoff"', "needs late.cutoff"),
    ('[late]\ncutoff = "soon"', "is not a duration"),
    ('[late]\npenalties = 0.1', "unknown key(s) penalties in [late]"),
    ('deadline = 1', "unknown key(s) deadline in the file"),
    ('[due]\nday03 = "2027-01-11 23:59"\n[extensions]\nada = { day03 = "2027-01-10 00:00" }',
     "is before the due date"),
    ('[due]\nday03 = "2027-01-11 23:59"\n[extensions]\nada = { day04 = "+1d" }',
     "has no due date in [due]"),
    ('[due\n', "not valid TOML"),
])
def test_a_bad_file_gets_a_clear_error(tmp_path, text, words):
    f = tmp_path / "deadlines.toml"
    f.write_text(text)
    with pytest.raises(PipelineError) as err:
        deadlines.load(f, ROOT)
    assert words in str(err.value) and str(f) in str(err.value)


def test_times_without_an_offset_are_read_in_the_files_timezone(tmp_path):
    f = tmp_path / "deadlines.toml"
    f.write_text('timezone = "Europe/Paris"\n[due]\nday03 = "2027-01-11 23:59"\n'
                 'day04 = "2027-01-11T23:59:00+00:00"')
    r = deadlines.load(f, ROOT)
    assert r.due[DAY] == dt.datetime(2027, 1, 11, 22, 59, tzinfo=dt.UTC)
    assert r.due["day04_multi_head_attention"] == DUE


def test_find_uses_the_grading_folders_file(tmp_path):
    assert deadlines.find(tmp_path, ROOT) is None
    (tmp_path / "deadlines.toml").write_text('[due]\nday03 = "2027-01-11 23:59"')
    assert deadlines.find(tmp_path, ROOT).due[DAY] == DUE
    with pytest.raises(PipelineError, match="no such deadlines file"):
        deadlines.find(tmp_path, ROOT, tmp_path / "nope.toml")


# --------------------------------------------------------------------------- issue 47: times
# A submission's time is one the student could not write.


@pytest.fixture
def grade_quietly(tmp_path, monkeypatch):
    """pipeline.grade with a runner that pays every submission 8/8 (no kernel)."""
    from autograder.grading import pipeline, template

    monkeypatch.setenv("TFS_GRADING_CACHE", str(tmp_path / "grading-cache"))
    monkeypatch.setattr(template, "template_cache", lambda root, days: tmp_path / "template")

    def runner(template, jobs):
        for j in jobs:
            yield Result(j["student"], j["day"], "graded", 8.0, 8.0, key=j["key"]).to_json()

    def grade(subs: Path, **kw) -> dict[str, tuple[str, str]]:
        got = pipeline.grade(ROOT, subs, days=[DAY], sandbox=False, runner=runner, **kw)
        return {r.student: (r.submitted_at, r.time_source) for r in got}

    return grade


def test_each_file_of_an_lms_zip_keeps_its_own_attempt_time(tmp_path, grade_quietly):
    """Attack: alice's only attempt is 9 days late, bob's on time; the old unzip wrote the
    last parsed attempt's time (bob's) for everyone, and alice was paid 8/8, 0 h late."""
    zpath = tmp_path / "lms.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr(f"day03_alice_attempt_2027-01-20-23-00-00_{DAY}.ipynb", "{}")
        zf.writestr(f"day03_bob_attempt_2027-01-11-20-00-00_{DAY}.ipynb", "{}")
    by = grade_quietly(zpath)
    assert by == {"alice": ("2027-01-20T23:00:00+00:00", "lms"),
                  "bob": ("2027-01-11T20:00:00+00:00", "lms")}
    r = rules(tmp_path, 'policy = "cutoff"\ncutoff = "72h"')
    alice = late(r, Result("alice", DAY, "graded", 8.0, 8.0, submitted_at=by["alice"][0],
                           time_source="lms"))
    assert alice.after == 0.0 and alice.hours_late > 9 * 24 - 1, alice
    assert late(r, Result("bob", DAY, "graded", 8.0, 8.0, submitted_at=by["bob"][0],
                          time_source="lms")).hours_late == 0


def test_a_timestamp_txt_the_student_wrote_counts_only_when_trusted(tmp_path, grade_quietly):
    """Attack: nbgrader's folder layout, a timestamp.txt claiming 2 days before the notebook
    was written (and before the due date); it was trusted (source nbgrader, no flag)."""
    nb = tmp_path / "subs" / "ada" / DAY / f"{DAY}.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text("{}")
    written = (DUE + dt.timedelta(days=1)).timestamp()
    os.utime(nb, (written, written))
    (nb.parent / "timestamp.txt").write_text("2027-01-10 23:00:00 UTC")
    at, source = grade_quietly(tmp_path / "subs")["ada"]
    assert (at, source) == ("2027-01-10T23:00:00+00:00", "nbgrader")
    res = result(dt.datetime.fromisoformat(at), source)
    flagged = late(rules(tmp_path, 'policy = "cutoff"\ncutoff = "0h"'), res)
    assert flagged.flagged and "no trustworthy submission time" in flagged.note
    assert "timestamp.txt" in flagged.note
    trusting = rules(tmp_path, 'policy = "cutoff"\ncutoff = "0h"\ntrust_file_times = true')
    assert late(trusting, res).hours_late == 0  # the instructor said so


def test_a_timestamp_txt_inside_an_lms_zip_is_never_the_lms_time(tmp_path, grade_quietly):
    """The zip's own layout form can carry a student-written timestamp.txt (and a forged
    name part); only an LMS file name's attempt time is the LMS's."""
    zpath = tmp_path / "lms.zip"
    late_entry = (2027, 1, 20, 12, 0, 0)
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr(zipfile.ZipInfo(f"submitted/alice/{DAY}/{DAY}.ipynb", late_entry), "{}")
        zf.writestr(f"submitted/alice/{DAY}/timestamp.txt", "2027-01-01 00:00:00 UTC")
        zf.writestr(f"submitted/alice/{DAY}/lms-times.json", '{"alice": {}}')
        zf.writestr(f"day03_bob_attempt_2027-01-21-00-00-00_{DAY}.ipynb", "{}")
        zf.writestr(f"submitted/bob/{DAY}/timestamp.txt", "2027-01-01 00:00:00 UTC")
    by = grade_quietly(zpath)
    assert by["alice"] == ("2027-01-20T12:00:00+00:00", "file")
    assert by["bob"] == ("2027-01-21T00:00:00+00:00", "lms")
    r = rules(tmp_path, 'policy = "cutoff"\ncutoff = "0h"')
    assert late(r, result(dt.datetime.fromisoformat(by["alice"][0]), "file")).flagged
    assert late(r, result(dt.datetime.fromisoformat(by["bob"][0]), "lms")).after == 0.0


def test_a_submission_the_classroom_did_not_record_is_never_trusted(tmp_path, grade_quietly):
    """With the classroom's record (--submission-times), a submission it lacks (a collect
    that died) is 'unrecorded': flagged even with trust_file_times."""
    nb = tmp_path / "subs" / "ada" / DAY / f"{DAY}.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text("{}")
    (nb.parent / "timestamp.txt").write_text("2027-01-11 19:44:00 UTC")
    at, source = grade_quietly(tmp_path / "subs", vouched={})["ada"]
    assert source == "unrecorded" and at == "2027-01-11T19:44:00+00:00"
    trusting = rules(tmp_path, 'policy = "cutoff"\ncutoff = "0h"\ntrust_file_times = true')
    x = late(trusting, result(dt.datetime.fromisoformat(at), source))
    assert x.flagged and "collect recorded none" in x.note
