"""``python -m autograder export``: Canvas, Moodle and plain CSV layouts, from grades.csv."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from autograder.cohort.export import add_export_command
from autograder.core.course import PipelineError, list_days

ROOT = Path(__file__).resolve().parent.parent
DAYS = list_days(ROOT)
D1, D3 = DAYS[0], DAYS[2]  # day01_..., day03_...


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    add_export_command(sub, lambda p: p.add_argument("--root", type=Path, default=None))
    args = parser.parse_args(["export", "--root", str(ROOT), *argv])
    return args.func(args)


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return path


def read_back(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.fixture
def grading(tmp_path: Path) -> Path:
    """grades.csv for alice, bob, =evil (D1 and D3; bob's D3 not graded) and results JSON."""
    g = tmp_path / "grading"
    g.mkdir()
    write_csv(g / "grades.csv", [
        ["student_id", D1, D3, "total", "max_total"],
        ["alice", "8", "12.5", "20.5", "30"],
        ["bob", "4", "", "4", "10"],
        ["=evil", "0", "1", "1", "30"],
    ])
    for s in ("alice", "bob"):
        for d, m in ((D1, 10.0), (D3, 20.0)):
            (g / "results" / s).mkdir(parents=True, exist_ok=True)
            (g / "results" / s / f"{d}.json").write_text(json.dumps(
                {"student": s, "day": d, "status": "graded", "score": 1.0, "max_score": m,
                 "schema": 1}))
    return g


def canvas_roster(tmp_path: Path, extra: list[list[str]] = (), d3_header: str | None = None
                  ) -> Path:
    head = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    if d3_header:
        head.append(d3_header)
    pad = [""] if d3_header else []
    rows = [head, ["    Points Possible", "", "", "", "", *(["20"] if d3_header else [])],
            ["Liddell, Alice", "101", "S1", "alice", "A", *pad],
            ["Builder, Bob", "102", "S2", "bob", "A", *pad],
            ["=HYPERLINK(\"x\")", "103", "S3", "=evil", "+B", *pad],
            ["Student, Test", "104", "", "", "A", *pad], *extra]
    return write_csv(tmp_path / "canvas-export.csv", rows)


def test_canvas_layout_and_points_possible(grading, tmp_path, capsys):
    roster = canvas_roster(tmp_path, d3_header="Day 3 Self-attention (4711)")
    out = tmp_path / "canvas.csv"
    assert run(["--format", "canvas", "--roster", str(roster), "--output", str(grading),
                "--to", str(out)]) == 0
    rows = read_back(out)
    assert rows[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert rows[0][5].startswith("Day 1: ") and "(" not in rows[0][5]  # new assignment
    assert rows[0][6] == "Day 3 Self-attention (4711)"  # the existing assignment, reused
    assert rows[1] == ["Points Possible", "", "", "", "", "10", "20"]
    body = {r[1]: r for r in rows[2:]}
    assert body["101"] == ["Liddell, Alice", "101", "S1", "alice", "A", "8", "12.5"]
    assert body["102"][5:] == ["4", ""]  # not graded: empty, not 0
    assert body["104"][5:] == ["", ""]  # roster student without grades
    assert body["103"][0] == "'=HYPERLINK(\"x\")" and body["103"][4] == "'+B"  # neutralised
    assert body["103"][3] == "=evil"  # the id Canvas matches on is kept, with a warning
    assert "'=evil'" in capsys.readouterr().err
    assert len(rows) == 2 + 4


def test_late_penalty_columns_export_final_points(tmp_path):
    g = tmp_path / "grading"
    g.mkdir()
    write_csv(g / "grades.csv", [
        ["student_id", f"{D1}_raw", f"{D1}_late_hours", f"{D1}_penalty", D1, "extra",
         "total", "max_total"],
        ["alice", "10", "5.00", "2", "8", "zzz", "8", "10"],
    ])
    out = tmp_path / "plain.csv"
    assert run(["--format", "csv", "--output", str(g), "--to", str(out)]) == 0
    assert read_back(out) == [["student_id", D1, "total"], ["alice", "8", "8"]]


def test_moodle_layout(grading, tmp_path):
    roster = write_csv(tmp_path / "moodle.csv", [
        ["First name", "Last name", "ID number", "Institution", "Department", "Email address"],
        ["Alice", "Liddell", "9001", "U", "CS", "alice@uni.example"],
        ["Bob", "Builder", "9002", "U", "CS", "bob@uni.example"],
        ["Eve", "-Evil", "9003", "U", "CS", "=evil@uni.example"],
        ["Carol", "Late", "9004", "U", "CS", "carol@uni.example"],
    ])
    out = tmp_path / "m.csv"
    assert run(["--format", "moodle", "--roster", str(roster), "--output", str(grading),
                "--to", str(out), "--day", "1", "--day", "3"]) == 0
    rows = read_back(out)
    assert rows[0][:3] == ["First name", "Last name", "Email address"]
    assert rows[0][3].startswith("Day 1: ") and rows[0][4].startswith("Day 3: ")
    assert rows[1] == ["Alice", "Liddell", "alice@uni.example", "8", "12.5"]
    assert rows[2][2:] == ["bob@uni.example", "4", ""]
    assert rows[3][1] == "'-Evil" and rows[3][3:] == ["0", "1"]  # matched by e-mail's local part
    assert rows[4][2:] == ["carol@uni.example", "", ""]
    # the identifier Moodle maps on can be another column
    assert run(["--format", "moodle", "--roster", str(roster), "--output", str(grading),
                "--to", str(out), "--identifier", "ID number", "--day", "3"]) == 0
    assert read_back(out)[1][2:] == ["9001", "12.5"]


def test_plain_csv_with_and_without_roster(grading, tmp_path):
    out = tmp_path / "p.csv"
    assert run(["--format", "csv", "--output", str(grading), "--to", str(out)]) == 0
    rows = read_back(out)
    assert rows[0] == ["student_id", D1, D3, "total"]
    assert rows[1:] == [["alice", "8", "12.5", "20.5"], ["bob", "4", "", "4"],
                        ["'=evil", "0", "1", "1"]]
    roster = write_csv(tmp_path / "r.csv", [["login"], ["bob"], ["alice"], ["=evil"]])
    assert run(["--format", "csv", "--roster", str(roster), "--output", str(grading),
                "--to", str(out)]) == 0
    assert [r[0] for r in read_back(out)] == ["student_id", "bob", "alice", "'=evil"]


def test_missing_student_is_reported_and_nothing_written(grading, tmp_path, capsys):
    roster = canvas_roster(tmp_path)
    write_csv(grading / "grades.csv", [
        ["student_id", D1, "total", "max_total"],
        ["alice", "8", "8", "10"], ["bob", "4", "4", "10"], ["=evil", "1", "1", "10"],
        ["zed", "9", "9", "10"],
    ])
    out = tmp_path / "c.csv"
    assert run(["--format", "canvas", "--roster", str(roster), "--output", str(grading),
                "--to", str(out)]) == 1
    err = capsys.readouterr().err
    assert "zed" in err and "alice" not in err
    assert not out.exists()
    assert run(["--format", "canvas", "--roster", str(roster), "--output", str(grading),
                "--to", str(out), "--allow-missing"]) == 0
    assert "zed" in capsys.readouterr().err
    assert len(read_back(out)) == 2 + 4


def test_ambiguous_and_bad_inputs(grading, tmp_path):
    args = ["--output", str(grading), "--to", str(tmp_path / "o.csv")]
    both = write_csv(tmp_path / "both.csv", [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"],
        ["A", "1", "alice", "alice", ""], ["B", "2", "bob", "bob", ""],
        ["E", "3", "=evil", "=evil", ""]])
    with pytest.raises(PipelineError, match="SIS User ID.*SIS Login ID|SIS Login ID.*SIS User"):
        run(["--format", "canvas", "--roster", str(both), *args])
    assert run(["--format", "canvas", "--roster", str(both), "--match", "SIS User ID",
                *args]) == 0
    written = (tmp_path / "o.csv").read_bytes()
    with pytest.raises(PipelineError, match="--match 'Nope'"):
        run(["--format", "canvas", "--roster", str(both), "--match", "Nope", *args])
    none = write_csv(tmp_path / "none.csv", [["Student", "ID"], ["A", "1"], ["B", "2"]])
    with pytest.raises(PipelineError, match="no roster column"):
        run(["--format", "canvas", "--roster", str(none), *args])
    dup = write_csv(tmp_path / "dup.csv", [
        ["Student", "ID", "SIS Login ID"], ["A", "1", "alice"], ["A2", "2", "alice"],
        ["B", "3", "bob"], ["E", "4", "=evil"]])
    with pytest.raises(PipelineError, match="twice"):
        run(["--format", "canvas", "--roster", str(dup), *args])
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PipelineError, match="cannot read the roster"):
        run(["--format", "canvas", "--roster", str(bad), *args])
    with pytest.raises(PipelineError, match="needs --roster"):
        run(["--format", "moodle", *args])
    with pytest.raises(PipelineError, match="no .*grades.csv"):
        run(["--format", "csv", "--output", str(tmp_path / "nowhere")])
    assert (tmp_path / "o.csv").read_bytes() == written  # the failed runs changed nothing
    before = both.read_bytes()
    with pytest.raises(PipelineError, match="refusing to overwrite"):
        run(["--format", "canvas", "--roster", str(both), "--match", "ID", "--output",
             str(grading), "--to", str(both)])
    assert both.read_bytes() == before
    assert not list(tmp_path.glob(".tmp-*")) and not list(grading.glob(".tmp-*"))


def test_semicolon_moodle_export_with_grade_columns(grading, tmp_path):
    """A Moodle grades export (semicolons, a grade column for day 3) keeps that header."""
    roster = tmp_path / "grades-export.csv"
    roster.write_text("\ufeffFirst name;Last name;ID number;Email address;"
                      "Assignment: Day 3 Self-attention (Real);Course total (Real)\n"
                      "Alice;L;1;alice@x.example;-;-\nBob;B;2;bob@x.example;-;-\n"
                      "Eve;E;3;=evil@x.example;-;-\n", encoding="utf-8")
    out = tmp_path / "m.csv"
    assert run(["--format", "moodle", "--roster", str(roster), "--output", str(grading),
                "--to", str(out), "--day", "3"]) == 0
    rows = read_back(out)
    assert rows[0] == ["First name", "Last name", "Email address",
                       "Assignment: Day 3 Self-attention (Real)"]
    assert rows[1][3] == "12.5" and rows[2][3] == ""


def test_points_possible_from_the_source_notebook_without_results(tmp_path):
    from autograder.grading.score import max_score

    g = tmp_path / "grading"
    g.mkdir()
    write_csv(g / "grades.csv", [["student_id", D1, "total", "max_total"], ["alice", "3", "3", ""]])
    roster = write_csv(tmp_path / "r.csv", [["Student", "ID", "SIS Login ID", "Section"],
                                            ["A", "1", "alice", ""]])
    out = tmp_path / "c.csv"
    assert run(["--format", "canvas", "--roster", str(roster), "--output", str(g),
                "--to", str(out)]) == 0
    rows = read_back(out)
    assert rows[1] == ["Points Possible", "", "", "", "", f"{max_score(ROOT, D1):g}"]
    assert rows[2] == ["A", "1", "", "alice", "", "3"]


def test_default_destination_and_moodle_row_without_identifier(grading, tmp_path, capsys):
    roster = write_csv(tmp_path / "moodle.csv", [
        ["First name", "Last name", "ID number", "Email address"],
        ["Alice", "L", "alice", ""], ["Bob", "B", "bob", "bob@x.example"],
        ["Eve", "E", "=evil", "e@x.example"]])
    assert run(["--format", "moodle", "--roster", str(roster), "--output", str(grading)]) == 0
    rows = read_back(grading / "moodle-grades.csv")
    assert rows[1][2:] == ["", "8", "12.5"]
    assert "alice has no 'Email address'" in capsys.readouterr().err
