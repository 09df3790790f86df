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
    # the student's own timestamp.txt alone says "on time": it is recorded, never trusted
    at, source = deadlines.submission_time(vetted / f"{day}.ipynb")
    assert source == "nbgrader" and late_of(Result("student2", day, "graded", 8.0, 8.0,
                                                   submitted_at=at, time_source=source),
                                            rules, 8.0).flagged


# --------------------------------------------------------------------------- issue 47: times
# The time recorded is that of the content graded; the record is written before an entry
# moves on; entries per student are limited; what root keeps is root's alone.


def _recorded(room: Path, student: str, day: str):
    from autograder.core import deadlines

    return deadlines.load_vouched(classroom_loop.received_times(room)).get((student, day))


def _write_while_read(monkeypatch, target: Path, held: int, payload: bytes, every: bool):
    """At the moment collect reads ``target``'s inode, write ``payload`` at its end through
    ``held`` (a descriptor opened before collect, as a student's background process would):
    once, or on every read. Returns the list of each write's ctime."""
    ino, real, done = target.stat().st_ino, os.read, []

    def read(fd, n):
        data = real(fd, n)
        if os.fstat(fd).st_ino == ino and (every or not done):
            os.pwrite(held, payload, os.fstat(held).st_size - len(payload))
            done.append(os.fstat(held).st_ctime)
        return data

    monkeypatch.setattr(os, "read", read)
    return done


def test_a_file_written_through_an_old_descriptor_during_collect_counts_as_written(
        room: Path, monkeypatch) -> None:
    """Attack: an 8 MiB placeholder submitted on time, held open for writing; the solution
    is written into it while collect reads it. The old collect took the time before the read
    (on time) and graded the solution. Now the copy graded and the time recorded agree."""
    import time

    day = "day04_multi_head_attention"
    name = f"student1+{day}+{TS}+race"
    path = submission(room, "student1", name, {f"{day}.ipynb": "p" * (8 << 20)})
    nb = path / f"{day}.ipynb"
    planted = nb.stat().st_ctime
    held = os.open(nb, os.O_WRONLY)
    try:
        time.sleep(0.05)   # the write lands on a later clock tick than the placeholder
        writes = _write_while_read(monkeypatch, nb, held, b"SOLUTION", every=False)
        assert classroom_loop.vet_inbound(room, day) == []
        monkeypatch.undo()
        written = writes[0]
    finally:
        os.close(held)
    graded = classroom_loop.vetted_root(room) / COURSE_ID / "inbound" / name / f"{day}.ipynb"
    assert graded.read_bytes().endswith(b"SOLUTION")
    import datetime as dt

    assert written > planted
    assert _recorded(room, "student1", day) >= dt.datetime.fromtimestamp(written, dt.UTC)


def test_a_file_that_keeps_changing_while_collected_is_refused(room: Path,
                                                               monkeypatch) -> None:
    day = "day05_positional_encoding"
    name = f"student1+{day}+{TS}+flux"
    path = submission(room, "student1", name, {f"{day}.ipynb": "p" * (2 << 20)})
    held = os.open(path / f"{day}.ipynb", os.O_WRONLY)
    try:
        _write_while_read(monkeypatch, path / f"{day}.ipynb", held, b"AGAIN", every=True)
        problems = classroom_loop.vet_inbound(room, day)
        monkeypatch.undo()
    finally:
        os.close(held)
    assert len(problems) == 1 and "kept changing while it was collected" in problems[0]
    assert not (classroom_loop.vetted_root(room) / COURSE_ID / "inbound" / name).exists()
    assert _recorded(room, "student1", day) is None


def test_the_time_is_recorded_before_the_submission_moves_on(room: Path,
                                                             monkeypatch) -> None:
    """Attack: collect dies (Ctrl-C) right after an entry reached vetted/; the old record was
    written only after the loop, so the submission was graded with no record."""
    day = "day06_encoder_layer"
    name = f"student2+{day}+{TS}+dies"
    submission(room, "student2", name, {f"{day}.ipynb": "{}"})
    real, moved = os.rename, []

    def rename(src, dst, **kw):
        if moved:
            raise KeyboardInterrupt
        real(src, dst, **kw)
        if dst == name:
            moved.append(1)  # into vetted/: the next step of collect never runs

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        classroom_loop.vet_inbound(room, day)
    monkeypatch.undo()
    assert (classroom_loop.vetted_root(room) / COURSE_ID / "inbound" / name).is_dir()
    assert _recorded(room, "student2", day) is not None
    assert stat.S_IMODE(classroom_loop.received_times(room).stat().st_mode) == 0o600


def test_entries_per_student_are_limited(room: Path, monkeypatch) -> None:
    """Attack: hundreds of junk entries made collect slow (42 s for 300). Counted by the
    entry's owner (a name can be anyone's): the latest 20 are checked, the rest quarantined."""
    from autograder.classroom import vet

    day, LIMIT = "day07_transformer_classifier", 20     # the documented default
    inbound = room / "exchange" / COURSE_ID / "inbound"

    def junk():
        for i in range(LIMIT + 5):
            who = "student2" if i % 2 else "student1"   # in others' names too
            os.mkdir(inbound / f"{who}+{day}+{TS}+{i:04d}")

    as_user("student1", junk)
    submission(room, "student2", f"student2+{day}+{TS}+mine", {f"{day}.ipynb": "{}"})
    checked = []
    real = vet._vet
    monkeypatch.setattr(vet, "_vet", lambda *a, **kw: checked.append(a[2]) or real(*a, **kw))
    problems = classroom_loop.vet_inbound(room, day)
    assert len(checked) == LIMIT + 1, checked
    assert f"student2+{day}+{TS}+mine" in checked     # another's flood costs them nothing
    over = [p for p in problems if "more submissions than the" in p]
    assert over == [f"student1: 5 more submissions than the {LIMIT} checked per "
                    "collect; the earliest were quarantined unchecked"], problems
    assert not [n for n in os.listdir(inbound) if f"+{day}+" in n]


def test_what_root_keeps_is_roots_alone(room: Path) -> None:
    """Attack: the original kept in received/ stayed writable through a descriptor held from
    before collect (40 MiB written after it). Root keeps its own copy; the student's inode
    is in nothing root keeps."""
    day = "day08_mnist_as_sequences"
    name = f"student1+{day}+{TS}+keep"
    path = submission(room, "student1", name, {f"{day}.ipynb": "{}"})
    held = os.open(path / f"{day}.ipynb", os.O_WRONLY)
    try:
        before = set(os.listdir(room / "received")) if (room / "received").is_dir() else set()
        assert classroom_loop.vet_inbound(room, day) == []
        os.pwrite(held, b"x" * (1 << 20), 0)       # after collect, through the old descriptor
        ino, links = os.fstat(held).st_ino, os.fstat(held).st_nlink
    finally:
        os.close(held)
    new = sorted({p.name for p in (room / "received").iterdir()} - before)
    assert len(new) == 2 and (room / "received" / new[1]).read_text().startswith(name), new
    kept = room / "received" / new[0]
    assert links == 0                       # the student's inode was removed
    for p in [kept, *kept.rglob("*")]:
        st = p.lstat()
        assert st.st_uid == 0 and st.st_ino != ino, p
        assert stat.S_IMODE(st.st_mode) == (0o700 if p.is_dir() else 0o600), p
    assert (kept / f"{day}.ipynb").read_text() == "{}"
