"""The classroom's collect treats every inbound submission as hostile (needs root).

Each case is planted in the exchange's ``inbound`` as a student account would (files made
by that account), then ``vet_inbound`` runs: what a student cannot be trusted with is
quarantined, a real submission is vetted (root's, read-only), and no file a link points to
is touched.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from autograder.classroom import loop as classroom_loop
from autograder.classroom.setup import COURSE_ID, prepare, run_as
from autograder.core.course import PipelineError

ROOT = Path(__file__).resolve().parents[1]
DAY = "day02_queries_keys_values"
TS = "2026-12-02 01:00:00.000000 UTC"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the classroom needs root (useradd)")


def as_user(name: str, work) -> None:
    """Run ``work()`` as the classroom account ``name`` (raises if it fails)."""
    run_as(pwd.getpwnam(name), lambda: work() and None)


@pytest.fixture(scope="module")
def room(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("room")
    os.chmod(folder.parent, 0o711)
    os.chmod(folder.parent.parent, 0o711)
    prepare(folder, ROOT, 2)
    return folder


def submission(room: Path, owner: str, name: str, files: dict[str, str]) -> Path:
    inbound = room / "exchange" / COURSE_ID / "inbound"

    def make():
        d = inbound / name
        d.mkdir()
        for rel, text in files.items():
            (d / rel).write_text(text)
        os.chmod(d, 0o777)

    as_user(owner, make)
    return inbound / name


def test_collect_moves_checks_and_freezes(room: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root only")
    os.chmod(secret, 0o600)
    os.chmod(tmp_path, 0o755)
    good = f"student1+{DAY}+{TS}+aaaa"
    submission(room, "student1", good, {f"{DAY}.ipynb": "{}", "timestamp.txt": TS})
    # in another student's name
    forged = f"student2+{DAY}+{TS}+bbbb"
    submission(room, "student1", forged, {f"{DAY}.ipynb": "{}"})
    # a name the check would once skip but nbgrader's rsplit('+', 3) collects
    sneaky = f"student1+x+{DAY}+{TS}+cccc"
    submission(room, "student1", sneaky, {f"{DAY}.ipynb": "{}"})
    # a link to a file only root may read, and a FIFO
    linked = f"student1+{DAY}+{TS}+dddd"
    submission(room, "student1", linked, {"timestamp.txt": TS})
    as_user("student1", lambda: os.symlink(secret, room / "exchange" / COURSE_ID / "inbound"
                                           / linked / f"{DAY}.ipynb"))
    fifo = f"student1+{DAY}+{TS}+eeee"
    submission(room, "student1", fifo, {})
    as_user("student1", lambda: os.mkfifo(room / "exchange" / COURSE_ID / "inbound" / fifo
                                          / f"{DAY}.ipynb"))
    # an unreadable timestamp, and the whole submission a link to root's file
    badtime = f"student1+{DAY}+not-a-time+ffff"
    submission(room, "student1", badtime, {f"{DAY}.ipynb": "{}"})
    whole = f"student1+{DAY}+{TS}+gggg"
    as_user("student1", lambda: os.symlink(secret, room / "exchange" / COURSE_ID / "inbound"
                                           / whole))
    # a tree deeper than any submission (a recursive check would stop the class's collect)
    deep = f"student1+{DAY}+{TS}+hhhh"
    submission(room, "student1", deep, {})
    as_user("student1", lambda: os.makedirs(room / "exchange" / COURSE_ID / "inbound" / deep
                                            / "/".join(["d"] * 40)))
    # a name as long as the file system allows, and a sparse file of 50 MB
    long = f"a+{DAY}+" + "x" * (255 - len(f"a+{DAY}+"))
    submission(room, "student1", long, {})
    sparse = f"student1+{DAY}+{TS}+iiii"
    submission(room, "student1", sparse, {})

    def make_sparse():
        with open(room / "exchange" / COURSE_ID / "inbound" / sparse / "big.bin", "wb") as f:
            f.truncate(50 << 20)

    as_user("student1", make_sparse)
    original = (room / "exchange" / COURSE_ID / "inbound" / good / f"{DAY}.ipynb").stat()

    problems = classroom_loop.vet_inbound(room, DAY)

    joined = "\n".join(problems)
    assert len(problems) == 9, joined
    for name, words in ((forged, "in the name of 'student2'"), (sneaky, "names no student"),
                        (linked, "a link or special file"), (fifo, "a link or special file"),
                        (badtime, "timestamp cannot be read"), (whole, "not a folder"),
                        (deep, "nested more than 16 deep"), (long, "not a submission name"),
                        (sparse, "a sparse file")):
        assert any(p.startswith(name) and words in p for p in problems), (name, joined)
    vetted = classroom_loop.vetted_root(room) / COURSE_ID / "inbound"
    assert sorted(os.listdir(vetted)) == [good]
    for p in [vetted / good, *(vetted / good).iterdir()]:
        st = p.lstat()
        assert st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH), p
    # what is collected is root's copy, not the student's file (which a descriptor the
    # student still holds could change); the original is kept root-only in received/
    copied = (vetted / good / f"{DAY}.ipynb").stat()
    assert (copied.st_ino, copied.st_dev) != (original.st_ino, original.st_dev)
    kept = sorted(p.name for p in (room / "received").iterdir())
    assert len(kept) == 2 and (room / "received" / kept[1]).read_text().startswith(good), kept
    assert len(list((room / "quarantine").iterdir())) == 2 * 9
    # nothing is left where a student can reach it, and the link's target is untouched
    assert os.listdir(room / "exchange" / COURSE_ID / "inbound") == []
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.stat().st_uid == 0
    assert secret.read_text() == "root only"
    # no student can read what was vetted or quarantined
    for folder in (vetted, room / "quarantine", room / "received"):
        with pytest.raises(PipelineError, match="run as student2 failed"):
            as_user("student2", lambda folder=folder: os.listdir(folder))


def test_feedback_is_placed_as_the_instructor(room: Path, tmp_path: Path) -> None:
    """A link planted in the instructor's feedback folder redirects no write of root's."""
    target = tmp_path / "root-file"
    target.write_text("untouched")
    os.chmod(target, 0o644)
    course = classroom_loop.course_dir(room)
    submitted = course / "submitted" / "student1" / DAY
    page = tmp_path / "grading" / "feedback" / "student1" / f"{DAY}.html"
    page.parent.mkdir(parents=True)
    page.write_text("<p>8 / 8</p>")

    def plant():
        submitted.mkdir(parents=True, exist_ok=True)
        (submitted / f"{DAY}.ipynb").write_text("{}")
        (submitted / "timestamp.txt").write_text(TS)
        (submitted / "submission_secret.txt").write_text("ab" * 64)
        dest = course / "feedback" / "student1" / DAY
        dest.mkdir(parents=True, exist_ok=True)
        os.symlink(target, dest / f"{DAY}.html")

    as_user("instructor", plant)
    assert classroom_loop.place_feedback(room, tmp_path / "grading", DAY) == []
    assert target.read_text() == "untouched"
    (course / "feedback" / "student1" / DAY / f"{DAY}.html").unlink()
    placed = classroom_loop.place_feedback(room, tmp_path / "grading", DAY)
    assert [p.name for p in placed] == [f"{DAY}.html"]
    assert placed[0].read_text() == "<p>8 / 8</p>" and placed[0].stat().st_uid != 0


def test_a_forged_timestamp_does_not_make_a_late_submission_on_time(room: Path) -> None:
    """The student writes the folder's name and ``timestamp.txt``: both claim a time before
    the due date. What counts is root's record of when the submission reached the exchange
    (status change times, which no student can set back), and the late policy reads it."""
    import datetime as dt

    from autograder.core import deadlines
    from autograder.core.records import Result, late_of

    day = "day03_self_attention"
    early = "2026-01-01 00:00:00.000000 UTC"
    name = f"student2+{day}+{early}+zzzz"
    path = submission(room, "student2", name, {f"{day}.ipynb": "{}", "timestamp.txt": early})
    as_user("student2", lambda: os.utime(path / f"{day}.ipynb", (0, 0)))  # mtime: forgeable
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)

    assert classroom_loop.vet_inbound(room, day) == []

    times = deadlines.load_vouched(classroom_loop.received_times(room))
    seen = times[("student2", day)]
    assert before <= seen <= dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    assert stat.S_IMODE(classroom_loop.received_times(room).stat().st_mode) == 0o600
    # the vetted copy still holds the student's words (nbgrader's feedback needs them) ...
    vetted = classroom_loop.vetted_root(room) / COURSE_ID / "inbound" / name
    assert (vetted / "timestamp.txt").read_text() == early
    # ... but grading reads the classroom's time: due an hour ago, per-hour policy
    due = (seen - dt.timedelta(hours=1)).isoformat()
    file = room / "deadlines.toml"
    file.write_text(f'[due]\nday03 = "{due}"\n[late]\npolicy = "per-hour"\npenalty = 0.25\n')
    rules = deadlines.load(file, ROOT)
    at, source = deadlines.submission_time(vetted / f"{day}.ipynb", seen)
    assert source == "classroom"
    result = Result("student2", day, "graded", 8.0, 8.0, submitted_at=at, time_source=source)
    late = late_of(result, rules, 8.0)
    assert abs(late.hours_late - 1) < 1e-6 and late.penalty == 2.0, late  # 1 started hour
    # the student's own timestamp.txt alone would have said "on time"
    at, source = deadlines.submission_time(vetted / f"{day}.ipynb")
    assert source == "nbgrader" and late_of(Result("student2", day, "graded", 8.0, 8.0,
                                                   submitted_at=at, time_source=source),
                                            rules, 8.0).hours_late == 0
