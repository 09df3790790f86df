"""Due dates, extensions and the late policy: one TOML file of the instructor's.

``grade`` records when each submission was made (:func:`submission_time`); the late policy is
applied when grades are written (:func:`assess`), so a changed policy or a new extension needs
no re-grading: ``python -m autograder accept``, ``grade`` (cached results) and ``feedback``
read the file again. The file (default ``<grading folder>/deadlines.toml``, or
``--deadlines FILE``)::

    timezone = "Europe/Paris"      # IANA name; times written without an offset are read in it

    [due]                          # one due date per day ("day03" or the day's full name)
    day01 = "2027-01-11 23:59"
    day02 = "2027-01-18T23:59:00+01:00"

    [late]
    policy = "per-day"             # "none", "per-hour", "per-day" or "cutoff"
    penalty = 0.10                 # per-hour/per-day: share of the raw points lost per
                                   #   started hour/day late
    floor = 0.5                    # per-hour/per-day: never below this share of the raw points
    cutoff = "72h"                 # optional ("cutoff": required, "0h" allowed): later than the
                                   #   due date plus this earns nothing
    trust_file_times = false       # true: what the student's side wrote counts (the
                                   #   folder's timestamp.txt, else the file's mtime)

    [extensions]                   # per student and day: a new due date, or "+48h" / "+2d"
    alice = { day03 = "2027-01-15 23:59" }
    bob = { day05 = "+48h" }

A submission's time comes from a time the course itself vouches for: the classroom's collect
(:mod:`autograder.classroom.vet` records when each submission reached the exchange,
``--submission-times``; source ``classroom``) or an LMS zip's ``_attempt_<time>_``, which the
LMS wrote (:func:`autograder.grading.collect.unzip_submissions` hands it over in memory; source
``lms``). Else what the student's side wrote is recorded: the folder's ``timestamp.txt``
(source ``nbgrader``: ``nbgrader submit`` runs as the student, who can write any time there),
else the notebook file's modification time (``file``). Those two count only with
``trust_file_times``. With ``--submission-times``, a submission the record lacks gets source
``unrecorded`` and never counts. A submission without a trustworthy time is flagged and pays
its raw points, never guessed late or on time.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from autograder.core.course import PipelineError, resolve_days

FILE_NAME = "deadlines.toml"
POLICIES = ("none", "per-hour", "per-day", "cutoff")
TRUSTED_SOURCES = ("classroom", "lms")          # written by the course or the LMS
STUDENT_SOURCES = ("nbgrader", "file")          # written on the student's side
SOURCE_WORDS = {"classroom": "when the classroom received it",
                "nbgrader": "the submission's timestamp.txt", "lms": "the LMS's attempt time",
                "file": "the file's modification time"}
DURATION = re.compile(r"\+?\s*(?P<n>\d+(\.\d+)?)\s*(?P<unit>h|d)")
MAX_TIMESTAMP_BYTES = 4096


@dataclass
class Deadlines:
    """The parsed file: ``due[day]`` and ``extensions[student][day]`` are aware datetimes."""

    timezone: dt.tzinfo
    due: dict[str, dt.datetime]
    extensions: dict[str, dict[str, dt.datetime]] = field(default_factory=dict)
    policy: str = "none"
    penalty: float = 0.0
    floor: float = 0.0
    cutoff_hours: float | None = None
    trust_file_times: bool = False

    def due_for(self, student: str, day: str) -> dt.datetime | None:
        return self.extensions.get(student, {}).get(day, self.due.get(day))


@dataclass
class Late:
    """How one result stands against its due date. Points are the day's points."""

    raw: float
    penalty: float = 0.0
    hours_late: float | None = 0.0     # None: no trustworthy time
    due: dt.datetime | None = None
    submitted: dt.datetime | None = None
    note: str = ""

    @property
    def after(self) -> float:
        return self.raw - self.penalty

    @property
    def flagged(self) -> bool:
        return self.hours_late is None


def _err(path: Path, what: str) -> PipelineError:
    return PipelineError(f"{path}: {what} (the format is in docs/instructors.md, "
                         "'Deadlines and late submissions')")


def _parse_time(value, tz: dt.tzinfo, where: str, path: Path) -> dt.datetime:
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise _err(path, f"{where} = {value!r} is not a date and time such as "
                             "'2027-01-11 23:59' or '2027-01-11T23:59:00+01:00'") from None
    else:
        raise _err(path, f"{where} = {value!r} is not a date and time")
    return t.replace(tzinfo=tz) if t.tzinfo is None else t


def _hours(value: str, where: str, path: Path) -> float:
    m = DURATION.fullmatch(str(value).strip()) if isinstance(value, str) else None
    if m is None:
        raise _err(path, f"{where} = {value!r} is not a duration such as '48h' or '2d'")
    return float(m["n"]) * (24.0 if m["unit"] == "d" else 1.0)


def _known(table: dict, keys: set[str], where: str, path: Path) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise _err(path, f"unknown key(s) {', '.join(unknown)} in {where} "
                         f"(known: {', '.join(sorted(keys))})")


def load(path: Path, root: Path) -> Deadlines:
    """Read and check the deadlines file.

    Raises:
        PipelineError: unreadable TOML, an unknown key, day or timezone, a date or duration
            that does not parse, a penalty or floor outside [0, 1], an extension before the
            day's due date or for a day without one.
    """
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PipelineError(f"{path}: no such deadlines file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _err(path, f"not valid TOML ({exc})") from None
    _known(data, {"timezone", "due", "late", "extensions"}, "the file", path)
    try:
        tz = ZoneInfo(str(data.get("timezone", "UTC")))
    except (ZoneInfoNotFoundError, ValueError):
        raise _err(path, f"timezone = {data.get('timezone')!r} is not an IANA time zone "
                         "such as 'UTC' or 'Europe/Paris'") from None

    def day_of(key: str, where: str) -> str:
        try:
            return resolve_days(root, [key])[0]
        except PipelineError:
            raise _err(path, f"{where}: {key!r} is not a day of the course") from None

    due_table = data.get("due", {})
    if not isinstance(due_table, dict):
        raise _err(path, "[due] must be a table of day = date")
    due = {day_of(k, "[due]"): _parse_time(v, tz, f"due.{k}", path)
           for k, v in due_table.items()}
    late = data.get("late", {})
    if not isinstance(late, dict):
        raise _err(path, "[late] must be a table")
    _known(late, {"policy", "penalty", "floor", "cutoff", "trust_file_times"}, "[late]", path)
    policy = late.get("policy", "none")
    if policy not in POLICIES:
        raise _err(path, f"late.policy = {policy!r} (one of {', '.join(POLICIES)})")
    numbers = {}
    for key in ("penalty", "floor"):
        value = late.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise _err(path, f"late.{key} = {value!r} must be a number from 0 to 1 "
                             "(a share of the day's raw points)")
        numbers[key] = float(value)
    if policy in ("per-hour", "per-day") and numbers["penalty"] == 0:
        raise _err(path, f"late.policy = {policy!r} needs late.penalty above 0")
    cutoff = _hours(late["cutoff"], "late.cutoff", path) if "cutoff" in late else None
    if policy == "cutoff" and cutoff is None:
        raise _err(path, "late.policy = 'cutoff' needs late.cutoff (e.g. '0h': no credit "
                         "after the due date)")
    extensions: dict[str, dict[str, dt.datetime]] = {}
    ext_table = data.get("extensions", {})
    if not isinstance(ext_table, dict):
        raise _err(path, "[extensions] must be a table of student = { day = date }")
    for student, days in ext_table.items():
        if not isinstance(days, dict):
            raise _err(path, f"extensions.{student} must be a table such as "
                             "{ day03 = '+48h' }")
        for key, value in days.items():
            day = day_of(key, f"extensions.{student}")
            if day not in due:
                raise _err(path, f"extensions.{student}.{key}: {day} has no due date in [due]")
            if isinstance(value, str) and value.strip().startswith("+"):
                new = due[day] + dt.timedelta(hours=_hours(value, f"extensions.{student}."
                                                                  f"{key}", path))
            else:
                new = _parse_time(value, tz, f"extensions.{student}.{key}", path)
            if new < due[day]:
                raise _err(path, f"extensions.{student}.{key} = {value!r} is before the due "
                                 f"date {due[day].isoformat()}")
            extensions.setdefault(str(student), {})[day] = new
    trust = late.get("trust_file_times", False)
    if not isinstance(trust, bool):
        raise _err(path, f"late.trust_file_times = {trust!r} must be true or false")
    return Deadlines(tz, due, extensions, policy, numbers["penalty"], numbers["floor"], cutoff,
                     trust)


def find(output: Path, root: Path, path: Path | None = None) -> Deadlines | None:
    """The deadlines given with ``--deadlines``, else ``<output>/deadlines.toml`` if it
    exists, else None (no deadlines: grades.csv has no late columns)."""
    if path is not None:
        return load(path, root)
    default = Path(output) / FILE_NAME
    return load(default, root) if default.is_file() else None


# --------------------------------------------------------------------------- times


def _read_small(path: Path) -> str | None:
    """A small plain file's text, never following a link; None when it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_TIMESTAMP_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TIMESTAMP_BYTES:
        return None
    return data.decode("utf-8", errors="replace").strip()


def parse_timestamp(text: str) -> dt.datetime | None:
    """nbgrader's timestamp text (``2027-01-11 22:59:00.123456 UTC``, an ISO time, or an LMS
    attempt ``2027-01-11-22-59-00``) as an aware datetime; naive times are UTC, as nbgrader
    reads them. None when it does not parse."""
    text = text.strip()
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)-(\d\d)-(\d\d)-(\d\d)", text)
    if m:
        return dt.datetime(*map(int, m.groups()), tzinfo=dt.UTC)
    if text.endswith(" UTC"):
        text = text[:-4]
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t


def submission_time(notebook: Path | None, vouched: dt.datetime | None = None,
                    vouched_by: str = "classroom", recorded_only: bool = False
                    ) -> tuple[str, str]:
    """``(time, source)`` of one submission: the time as ISO 8601 (UTC) and where it came
    from (see the module docstring: ``classroom``, ``lms``, ``nbgrader``, ``file``,
    ``unrecorded``; ``unreadable`` when the folder's ``timestamp.txt`` does not parse; ``""``
    with no notebook). ``vouched``: a time the course or the LMS recorded, whose source is
    ``vouched_by``. ``recorded_only``: without ``vouched``, the time the student's side
    claims (``timestamp.txt``, else the file's) is returned with source ``unrecorded``."""
    if vouched is not None:
        return vouched.astimezone(dt.UTC).isoformat(), vouched_by
    if notebook is None:
        return "", ""
    text = _read_small(notebook.parent / "timestamp.txt")
    if text is not None:
        t = parse_timestamp(text)
        if t is None:
            return "", "unrecorded" if recorded_only else "unreadable"
        return t.astimezone(dt.UTC).isoformat(), "unrecorded" if recorded_only else "nbgrader"
    try:
        mtime = os.stat(notebook, follow_symlinks=False).st_mtime
    except OSError:
        return "", "unrecorded" if recorded_only else ""
    return (dt.datetime.fromtimestamp(mtime, dt.UTC).isoformat(),
            "unrecorded" if recorded_only else "file")


def load_vouched(path: Path) -> dict[tuple[str, str], dt.datetime]:
    """``--submission-times FILE``: JSON ``{student: {day: ISO time}}`` (the classroom's
    ``received-times.json``).

    Raises:
        PipelineError: not that shape, or a time without a timezone.
    """
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PipelineError(f"{path}: not readable submission times ({exc})") from None
    out = {}
    if not isinstance(data, dict):
        raise PipelineError(f"{path}: expected {{student: {{day: time}}}}")
    for student, days in data.items():
        if not isinstance(days, dict):
            raise PipelineError(f"{path}: {student!r} must map days to times")
        for day, text in days.items():
            t = parse_timestamp(str(text))
            if t is None or "T" not in str(text):
                raise PipelineError(f"{path}: {student}/{day}: {text!r} is not an ISO time "
                                    "with a timezone")
            out[(str(student), str(day))] = t
    return out


# --------------------------------------------------------------------------- the policy


def assess(deadlines: Deadlines, student: str, day: str, raw: float, submitted_at: str,
           source: str) -> Late:
    """Apply the late policy to one result worth ``raw`` points (after acceptance).

    Late by ``h`` hours past the (extended) due date: ``per-hour`` loses ``penalty`` of the
    raw points per started hour, ``per-day`` per started 24 hours, never below ``floor`` of
    them; past ``cutoff`` hours, every policy pays nothing. A result without a trustworthy
    time (no time, an unreadable one, one the collect did not record, a student-side time
    without ``trust_file_times``) pays its raw points and is flagged (``hours_late`` None)."""
    due = deadlines.due_for(student, day)
    if due is None:
        return Late(raw, note="no due date")
    trusted = source in TRUSTED_SOURCES or (source in STUDENT_SOURCES and
                                            deadlines.trust_file_times)
    submitted = parse_timestamp(submitted_at) if submitted_at else None
    if submitted is None or not trusted:
        why = {"unreadable": "its timestamp.txt does not parse",
               "nbgrader": "only the timestamp.txt the student's side wrote is known",
               "file": "only the file's modification time is known",
               "unrecorded": "the classroom's collect recorded none for it"
               }.get(source, "no time recorded")
        return Late(raw, hours_late=None, due=due, submitted=submitted,
                    note=f"no trustworthy submission time ({why}): check it by hand")
    hours = (submitted - due).total_seconds() / 3600
    extended = due != deadlines.due.get(day)
    base = f"submitted {_show(submitted, deadlines)} ({SOURCE_WORDS[source]}); due " \
           f"{_show(due, deadlines)}{' (extended)' if extended else ''}"
    if hours <= 0:
        return Late(raw, 0.0, 0.0, due, submitted, base + ": on time")
    late = f"{base}: {_duration(hours)} late"
    if deadlines.cutoff_hours is not None and hours > deadlines.cutoff_hours:
        return Late(raw, raw, hours, due, submitted,
                    f"{late}, past the cut-off of {_duration(deadlines.cutoff_hours)}: "
                    "no credit")
    if deadlines.policy in ("per-hour", "per-day"):
        units = math.ceil(hours / (1 if deadlines.policy == "per-hour" else 24))
        share = min(units * deadlines.penalty, 1 - deadlines.floor)
        unit = "hour" if deadlines.policy == "per-hour" else "day"
        return Late(raw, raw * share, hours, due, submitted,
                    f"{late}: {units} started {unit}(s) x {deadlines.penalty:.0%} = "
                    f"{share:.0%} of the points off"
                    + (f" (at most {1 - deadlines.floor:.0%})" if deadlines.floor else ""))
    return Late(raw, 0.0, hours, due, submitted, f"{late}: no penalty")


def _show(t: dt.datetime, deadlines: Deadlines) -> str:
    return t.astimezone(deadlines.timezone).strftime("%Y-%m-%d %H:%M %Z")


def _duration(hours: float) -> str:
    if hours < 1:
        return f"{hours * 60:.0f} min"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"
