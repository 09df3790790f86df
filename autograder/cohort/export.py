"""``python -m autograder export``: the grades in an LMS's own import layout.

Reads ``grades.csv`` of a grading folder (the final points of a day are in the column named
exactly the day; ``<day>_raw``, ``<day>_late_hours``, ``<day>_penalty`` and any other unknown
column are ignored) and the roster the LMS exported, and writes one CSV file:

- ``canvas``: the Gradebook import layout: ``Student``, ``ID``, ``SIS User ID``,
  ``SIS Login ID``, ``Section``, one column per day, and a second row ``Points Possible``.
  The roster is the instructor's Gradebook export (its own ``Points Possible`` row, and any row
  without an id, is skipped). A day whose assignment the export already holds (a header naming
  ``Day 3``/``day03``, e.g. ``Day 3: Self-attention (12345)``) keeps that exact header, so the
  import updates that assignment; any other day gets a header without an id, ``Day 3: ...``,
  which the import creates as a new assignment.
  Docs: https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807
  and https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-export-grades-in-the-Gradebook/ta-p/809
  (a university's summary of the same rules: https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades)
- ``moodle``: Moodle's "Import grades > CSV file": ``First name``, ``Last name`` (when the
  roster has them), one identifying column (``--identifier``, default ``Email address``, else
  ``ID number``, else ``Username``: map it in the import form to "Email address", "ID number"
  or "Username"), one column per day (a roster header naming the day is reused).
  Docs: https://docs.moodle.org/en/Grade_import (and .../311/en/Grade_import),
  https://docs.moodle.org/en/Grade_export
- ``csv``: ``student_id``, one column per day, ``total``; the roster is optional (it then picks
  and orders the students).

Matching a course student id to a roster row: ``--match COLUMN``, else the one roster column
holding every student that has grades (compared trimmed and case-insensitively; a column of
e-mail addresses also matches on the part before ``@``). Exact matches win over ``@`` ones;
when no column holds everyone, the one column holding most (over half) is used and the others
are reported; two equal candidates, or none, stop with an error naming them.

A student with grades missing from the roster is named on stderr and nothing is written
(exit 1) unless ``--allow-missing``. A roster student without grades gets empty cells, never
0. Bad input raises :class:`~autograder.core.course.PipelineError` before anything is written;
the file is written atomically and is never the roster or ``grades.csv``.

Spreadsheet formulas: a text cell starting with ``=``, ``+``, ``-``, ``@``, tab or CR is
prefixed with ``'`` (names, sections, the plain layout's ``student_id``): LMS imports match
rows on ids, not names. The ids an LMS matches on (``ID``, ``SIS ...``, Moodle's identifier)
are written unchanged, since changing them would break the import; one that looks like a
formula gets a warning on stderr (import the file, do not open it in a spreadsheet first).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from autograder.core.course import (  # noqa: F401 - day_title re-exported
    PipelineError,
    day_title,
    find_root,
    notebook_name,
    resolve_days,
)

FORMATS = ("canvas", "moodle", "csv")
CANVAS_FIXED = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
CANVAS_IDS = ("SIS Login ID", "SIS User ID", "ID", "Integration ID")
MOODLE_IDS = ("Email address", "ID number", "Username")
NAME_COLUMNS = {"student", "first name", "last name", "section", "institution", "department",
                "roles", "groups", "last access to course", "last downloaded from this course"}
_NOT_ASSIGNMENT = re.compile(r"current|final|unposted|read only|course total|override",
                             re.IGNORECASE)
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


# --------------------------------------------------------------------------- inputs


def read_grades(path: Path, days: list[str]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """``{student: {day: points}}`` from ``grades.csv`` (``""`` when not graded) and the days
    it has a column for. Only the column named exactly the day is read: the final points."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except FileNotFoundError:
        raise PipelineError(f"no {path}: run `python -m autograder grade ... --output "
                            f"{path.parent}` first, or pass that folder as --output") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PipelineError(f"cannot read {path}: {exc}") from exc
    if "student_id" not in header:
        raise PipelineError(f"{path} has no student_id column; is it a grades.csv?")
    present = [d for d in days if d in header]
    grades: dict[str, dict[str, str]] = {}
    for row in rows:
        sid = (row.get("student_id") or "").strip()
        if sid in grades:
            raise PipelineError(f"{path}: student {sid!r} has two rows")
        cells = {}
        for d in present:
            cell = (row.get(d) or "").strip()
            try:
                cells[d] = f"{float(cell):g}" if cell else ""
            except ValueError:
                raise PipelineError(f"{path}: {sid}, {d}: {cell!r} is not a number") from None
        grades[sid] = cells
    return grades, present


def read_roster(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The roster's header and rows (UTF-8; the delimiter, ``,`` ``;`` or tab, is the one its
    header line holds most of)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineError(f"cannot read the roster {path}: {exc}") from exc
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    counts = {d: first.count(d) for d in ",;\t"}
    delimiter = max(counts, key=lambda d: (counts[d], d == ","))
    try:
        table = [r for r in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
                 if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise PipelineError(f"cannot read the roster {path}: {exc}") from exc
    if not table:
        raise PipelineError(f"the roster {path} is empty")
    header = [h.strip() for h in table[0]]
    seen = {h for h in header if h and header.count(h) > 1}
    if seen:
        raise PipelineError(f"the roster {path} has duplicate columns: {', '.join(sorted(seen))}")
    rows = [{h: (r[i].strip() if i < len(r) else "") for i, h in enumerate(header) if h}
            for r in table[1:]]
    return header, rows


def max_points(grading: Path, root: Path, days: list[str]) -> dict[str, float]:
    """Each day's maximum: from the results' ``max_score``, else the source notebook's cells."""
    out: dict[str, float] = {}
    for d in days:
        for f in sorted((grading / "results").glob(f"*/{d}.json")):
            try:
                m = float(json.loads(f.read_text(encoding="utf-8")).get("max_score") or 0)
            except (OSError, ValueError, TypeError, AttributeError):
                continue
            out[d] = max(out.get(d, 0.0), m)
        if not out.get(d):
            from autograder.grading.score import max_score

            out[d] = max_score(root, d)
    return out


# --------------------------------------------------------------------------- matching


def _keys(value: str, by_local: bool) -> str:
    v = value.strip().casefold()
    return v.split("@", 1)[0] if by_local and "@" in v else v


def choose_match(header: list[str], rows: list[dict[str, str]], students: set[str],
                 match: str | None, skip: set[str]) -> tuple[str, bool]:
    """The roster column (and whether it is matched on the part before ``@``) that holds the
    course's ``students``; see the module docstring for the rules."""
    want = {s.casefold() for s in students}

    def hits(col: str, local: bool) -> int:
        return len(want & {_keys(r.get(col, ""), local) for r in rows})

    if match is not None:
        if match not in header:
            raise PipelineError(f"--match {match!r}: the roster has no such column; it has: "
                                f"{', '.join(h for h in header if h)}")
        local = hits(match, True) > hits(match, False)
        return match, local
    cols = [h for h in header if h and h not in skip and h.casefold() not in NAME_COLUMNS]
    for local in (False, True):
        full = [c for c in cols if hits(c, local) == len(want)]
        if len(full) == 1:
            return full[0], local
        if len(full) > 1:
            raise PipelineError("the course's student ids are in several roster columns: "
                                f"{', '.join(full)}; pick one with --match COLUMN")
    counts = sorted(((max(hits(c, False), hits(c, True)), c) for c in cols), reverse=True)
    counts = [(n, c) for n, c in counts if n]
    alone = len(counts) == 1 or len(counts) > 1 and counts[1][0] < counts[0][0]
    if counts and alone and 2 * counts[0][0] > len(want):
        c = counts[0][1]
        return c, hits(c, True) > hits(c, False)
    named = ", ".join(f"{c} ({n} of {len(want)})" for n, c in counts[:5]) or "none"
    raise PipelineError("no roster column holds the course's student ids (columns holding "
                        f"some: {named}); pick one with --match COLUMN")


def index_roster(rows: list[dict[str, str]], col: str, local: bool) -> dict[str, int]:
    """Roster row number by matching key; a key on two rows is an error."""
    out: dict[str, int] = {}
    for i, r in enumerate(rows):
        k = _keys(r.get(col, ""), local)
        if not k:
            continue
        if k in out:
            raise PipelineError(f"the roster has {r.get(col)!r} twice in column {col!r}; fix "
                                "the roster or pick another column with --match")
        out[k] = i
    return out


def day_columns(header: list[str], days: list[str]) -> dict[str, str]:
    """The roster's header naming each day (``Day 3...``, ``day03_...``), when it has one."""
    out = {}
    for d in days:
        n = int(re.match(r"day(\d+)", d).group(1))
        pat = re.compile(rf"(?<![a-z0-9])day[\s_]*0*{n}(?!\d)", re.IGNORECASE)
        found = [h for h in header if h and pat.search(h) and not _NOT_ASSIGNMENT.search(h)]
        with_id = [h for h in found if re.search(r"\(\d+\)\s*$", h)]
        found = with_id if len(with_id) == 1 else found
        if len(found) > 1:
            raise PipelineError(f"the roster has several columns for {d}: {', '.join(found)}")
        if found:
            out[d] = found[0]
    return out


# --------------------------------------------------------------------------- output


def safe(cell: str) -> str:
    """``cell`` made inert for a spreadsheet: a leading ``'`` before a formula character."""
    return "'" + cell if cell.startswith(_FORMULA) else cell


def _refuse(path: Path, forbidden: list[Path]) -> None:
    for f in forbidden:
        if path.resolve() == f.resolve() or (f.exists() and path.exists()
                                             and os.path.samefile(f, path)):
            raise PipelineError(f"refusing to overwrite {f} with the export; pass another --to")


def write_atomic(path: Path, table: list[list[str]], forbidden: list[Path]) -> None:
    """Write ``table`` as CSV to ``path`` through a temporary file; never onto ``forbidden``."""
    _refuse(path, forbidden)
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(table)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".csv")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def export(args: argparse.Namespace) -> int:
    """Run ``export`` from parsed arguments; returns the exit code (1: students missing)."""
    root = find_root(args.root)
    grading = args.output or Path("grading")
    to = args.to or grading / f"{args.format}-grades.csv"
    forbidden = [grading / "grades.csv", *([args.roster] if args.roster else [])]
    _refuse(to, forbidden)
    days = resolve_days(root, args.day)
    grades, present = read_grades(grading / "grades.csv", days)
    if args.day and len(present) < len(days):
        raise PipelineError(f"not graded yet (no column in {grading / 'grades.csv'}): "
                            f"{', '.join(d for d in days if d not in present)}")
    days = present
    if not days or not grades:
        raise PipelineError(f"{grading / 'grades.csv'} holds no grades to export")
    fmt = args.format
    if fmt != "csv" and args.roster is None:
        raise PipelineError(f"--format {fmt} needs --roster: the {fmt} export of the course's "
                            "students (the gradebook or participants CSV)")
    graded = {s for s, cells in grades.items() if any(cells.values())} or set(grades)
    table: list[list[str]] = []
    warn: list[str] = []
    if args.roster is None:
        table.append(["student_id", *days, "total"])
        for s, cells in grades.items():
            table.append([safe(s), *(cells[d] for d in days), _total(cells, days)])
    else:
        header, rows = read_roster(args.roster)
        ids = {"canvas": CANVAS_IDS, "moodle": MOODLE_IDS}.get(fmt, ())
        if ids and not any(h in header for h in ids):
            raise PipelineError(f"{args.roster} is not a {fmt} export: it has none of the "
                                f"columns {', '.join(ids)}")
        if fmt == "canvas" and "Student" not in header:
            raise PipelineError(f"{args.roster} is not a Canvas gradebook export: no 'Student'")
        rows = [r for r in rows if r.get("Student", "").strip() != "Points Possible"
                and any(r.get(h) for h in (ids or header))]
        reused = day_columns(header, days) if fmt != "csv" else {}
        col, local = choose_match(header, rows, graded, args.match, set(reused.values()))
        where = index_roster(rows, col, local)
        missing = sorted(s for s in graded if s.casefold() not in where)
        for s in missing:
            print(f"not in the roster ({col}): {s}", file=sys.stderr)
        if missing and not args.allow_missing:
            print(f"{len(missing)} student(s) with grades are not in {args.roster}; nothing "
                  "written (add them to the LMS, or pass --allow-missing)", file=sys.stderr)
            return 1
        by_row = {i: s for s in grades if (i := where.get(s.casefold())) is not None}
        empty = dict.fromkeys(days, "")
        titles = {d: reused.get(d) or day_title(root, d) for d in days}
        if fmt == "canvas":
            most = max_points(grading, root, days)
            table.append([*CANVAS_FIXED, *(titles[d] for d in days)])
            table.append(["Points Possible", "", "", "", "", *(f"{most[d]:g}" for d in days)])
            lms_ids = ["ID", "SIS User ID", "SIS Login ID"]
        elif fmt == "moodle":
            ident = args.identifier or next(h for h in MOODLE_IDS if h in header)
            if ident not in header:
                raise PipelineError(f"--identifier {ident!r}: the roster has no such column")
            names = [h for h in ("First name", "Last name") if h in header]
            table.append([*names, ident, *(titles[d] for d in days)])
            lms_ids = [ident]
        else:
            table.append(["student_id", *days, "total"])
            lms_ids = []
        for h in lms_ids:
            if h in header:
                index_roster(rows, h, False)  # the LMS matches on it: two rows would clash
        for i, r in enumerate(rows):
            cells = grades.get(by_row.get(i, ""), empty)
            for h in lms_ids:
                if r.get(h, "").startswith(_FORMULA):
                    warn.append(f"{h} {r[h]!r} looks like a spreadsheet formula; kept as is "
                                "(the LMS matches on it): import the file without opening it "
                                "in a spreadsheet")
            if fmt == "moodle" and not r.get(ident) and any(cells.values()):
                warn.append(f"{by_row[i]} has no {ident!r} in the roster: Moodle cannot match "
                            "that row; pick another --identifier")
            if fmt == "canvas":
                lead = [safe(r.get("Student", "")), *(r.get(h, "") for h in CANVAS_FIXED[1:4]),
                        safe(r.get("Section", ""))]
            elif fmt == "moodle":
                lead = [*(safe(r.get(h, "")) for h in names), r.get(ident, "")]
            else:
                if i not in by_row:
                    continue
                lead = [safe(by_row[i])]
            tail = [_total(cells, days)] if fmt == "csv" else []
            table.append([*lead, *(cells[d] for d in days), *tail])
    write_atomic(to, table, forbidden)
    for w in warn:
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {to}: {len(table) - 1 - (fmt == 'canvas')} students, {len(days)} days "
          f"({fmt} layout)")
    return 0


def _total(cells: dict[str, str], days: list[str]) -> str:
    got = [float(cells[d]) for d in days if cells.get(d)]
    return f"{sum(got):g}" if got else ""


def add_export_command(sub, add_common) -> None:
    """Register ``export`` on the CLI's subparsers (``add_common`` adds ``--root``)."""
    p = sub.add_parser("export", help="grades in an LMS's import layout (canvas, moodle, csv), "
                                      "mapped through the LMS's exported roster")
    add_common(p)
    p.add_argument("--format", required=True, choices=FORMATS)
    p.add_argument("--roster", type=Path,
                   help="the LMS's export of the class (Canvas gradebook CSV, Moodle grades or "
                        "participants CSV); required for canvas and moodle")
    p.add_argument("--output", type=Path, default=None,
                   help="the folder given to grade --output (default: ./grading)")
    p.add_argument("--to", type=Path, help="file to write (default: OUTPUT/<format>-grades.csv)")
    p.add_argument("--day", action="append", help="only this day (repeatable)")
    p.add_argument("--match", metavar="COLUMN",
                   help="roster column holding the course's student ids (default: found)")
    p.add_argument("--identifier", metavar="COLUMN",
                   help="moodle: the identifying column written (default: Email address)")
    p.add_argument("--allow-missing", action="store_true",
                   help="write even when students with grades are not in the roster "
                        "(each is still named on stderr)")
    p.set_defaults(func=export)
