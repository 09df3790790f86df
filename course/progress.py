"""Self-grading and progress for learners without an instructor.

From inside a notebook (one line, anywhere)::

    from course.progress import selfcheck; selfcheck()

grades the *saved* notebook with the hidden tests — offline, on a copy, without writing anything
into it — and prints, per exercise, the points, pass or fail and the diagnosis. It runs
``python -m autograder selfcheck <notebook>`` in a separate process, so the notebook's kernel
keeps its state. The "Self-check" button (:func:`selfcheck_button`) starts that process ahead of
time (``--standby``): it gets ready while the learner works and grades the moment the button is
pressed. And::

    from course.progress import show_progress; show_progress()

prints the course's days with the points of each day's latest self-check (the same table as
``python -m autograder progress``).

The points live in one small JSON file, ``.course_progress.json``, in the learner's folder: the
folder that holds the ``dayNN_slug/`` folders. When that folder is the course repository's
generated ``release/`` (or ``solutions/``), which must stay identical to what ``source/``
generates, the file goes to the repository root instead. ``COURSE_PROGRESS_FILE`` overrides the
location. The file is replaced atomically, so an interrupted self-check never corrupts it.

This module never imports solutions or hidden tests.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

__all__ = ["FILENAME", "find_progress_file", "format_progress", "load", "progress_path",
           "record", "selfcheck", "selfcheck_button", "show_progress"]

FILENAME = ".course_progress.json"
VERSION = 1
GENERATED = ("release", "solutions", "source")
DAY_RE = re.compile(r"^day(\d{2})_[a-z0-9_]+$")
COURSE_DAYS = 14


def _is_course_root(folder: Path) -> bool:
    return (folder / "source").is_dir() and (folder / "autograder").is_dir()


def progress_path(notebook: str | os.PathLike) -> Path:
    """Where the progress of the learner who owns ``notebook`` is kept.

    ``<folder>/dayNN_slug/dayNN_slug.ipynb`` -> ``<folder>/.course_progress.json``, except that a
    course repository's ``release/``, ``solutions/`` or ``source/`` folder sends it to the
    repository root. ``COURSE_PROGRESS_FILE`` overrides both.
    """
    forced = os.environ.get("COURSE_PROGRESS_FILE", "").strip()
    if forced:
        return Path(forced).expanduser().resolve()
    nb = Path(notebook).resolve()
    folder = nb.parent.parent if DAY_RE.match(nb.parent.name) else nb.parent
    if folder.name in GENERATED and _is_course_root(folder.parent):
        folder = folder.parent
    return folder / FILENAME


def find_progress_file(start: str | os.PathLike | None = None) -> Path:
    """The progress file seen from ``start`` (default: the current folder).

    The first ``.course_progress.json`` in ``start`` or a folder above it; else the newest one
    in a folder just below ``start`` (the course root, seen from above the learner's folder of
    days); else, for a folder inside a course repository, the repository root's (it may not
    exist yet); else ``start/.course_progress.json``.
    """
    forced = os.environ.get("COURSE_PROGRESS_FILE", "").strip()
    if forced:
        return Path(forced).expanduser().resolve()
    here = Path(start or Path.cwd()).resolve()
    if here.is_file():
        return progress_path(here)
    for folder in (here, *here.parents):
        if (folder / FILENAME).is_file():
            return folder / FILENAME
    below = [p for p in here.glob(f"*/{FILENAME}") if p.is_file()]
    if below:
        return max(below, key=lambda p: p.stat().st_mtime)
    for folder in (here, *here.parents):
        if _is_course_root(folder):
            return folder / FILENAME
    if DAY_RE.match(here.name):
        return here.parent / FILENAME
    return here / FILENAME


def load(path: str | os.PathLike) -> dict[str, Any]:
    """The progress data (``{"version": 1, "days": {day: entry}}``); empty when missing.

    An unreadable file is reported on stdout and treated as empty (the next self-check
    replaces it).
    """
    p = Path(path)
    empty: dict[str, Any] = {"version": VERSION, "days": {}}
    if not p.is_file():
        return empty
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("days"), dict):
            raise ValueError("no 'days' table")
    except (OSError, ValueError) as exc:
        print(f"progress: ignoring {p} ({exc}); the next self-check rewrites it")
        return empty
    return data


def record(path: str | os.PathLike, day: str, score: float, max_score: float,
           tests: dict[str, tuple[float, float]], notebook: str | os.PathLike,
           status: str = "graded") -> dict[str, Any]:
    """Store one day's self-check result in the progress file (atomically). Returns the entry."""
    p = Path(path)
    data = load(p)
    entry = {
        "score": float(score),
        "max_score": float(max_score),
        "status": status,
        "checked_at": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "notebook": str(notebook),
        "tests": {k: [float(a), float(b)] for k, (a, b) in tests.items()},
    }
    data["version"] = VERSION
    data["days"][day] = entry
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-progress-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return entry


def _bar(fraction: float, width: int = 10) -> str:
    full = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * full + "░" * (width - full)


def format_progress(data: dict[str, Any], days: list[str],
                    max_scores: dict[str, float] | None = None, source: str = "") -> str:
    """The progress table: one row per day (all ``days``, checked or not), then the total."""
    max_scores = max_scores or {}
    entries = data.get("days", {})
    width = max([len(d) for d in days] + [8])
    lines = [f"Your progress{f' ({source})' if source else ''}", "",
             f"{'day':>3}  {'notebook':<{width}}  {'points':>9}  {'':10}  {'':>4}  last self-check"]
    got = total = 0.0
    checked = 0
    for day in days:
        m = DAY_RE.match(day)
        num = str(int(m.group(1))) if m else "?"
        e = entries.get(day)
        mx = float(e["max_score"]) if e else float(max_scores.get(day, 0.0))
        total += mx
        if e is None:
            pts = f"-/{mx:g}" if mx else "-"
            lines.append(f"{num:>3}  {day:<{width}}  {pts:>9}  {_bar(0):10}  {'':>4}  "
                         "not checked yet")
            continue
        checked += 1
        got += float(e["score"])
        frac = float(e["score"]) / mx if mx else 0.0
        when = str(e.get("checked_at", ""))[:16].replace("T", " ")
        status = "" if e.get("status", "graded") == "graded" else f" ({e['status']})"
        pts = f"{float(e['score']):g}/{mx:g}"
        lines.append(f"{num:>3}  {day:<{width}}  {pts:>9}  {_bar(frac)}  "
                     f"{frac:>4.0%}  {when}{status}")
    extra = [d for d in entries if d not in days]
    for day in extra:
        lines.append(f"  ?  {day:<{width}}  (not part of this course version)")
    lines.append("")
    pct = f" ({got / total:.0%})" if total else ""
    lines.append(f"{checked} of {len(days)} days self-checked; {got:g} of {total:g} points{pct}.")
    if len(days) < COURSE_DAYS:
        lines.append(f"(this copy of the course has {len(days)} of its {COURSE_DAYS} days)")
    return "\n".join(lines)


def _course_days(root: Path | None) -> tuple[list[str], dict[str, float]]:
    """Day names and their maximum points, read from the course's source/ notebooks."""
    try:
        from autograder import pipeline  # the grading library; it imports no solutions

        root = pipeline.find_root(root)
        days = pipeline.list_days(root)
        return days, {d: pipeline.max_score(root, d) for d in days}
    except Exception:  # noqa: BLE001 - no course folder: show what the file holds
        return [], {}


def show_progress(folder: str | os.PathLike | None = None) -> str:
    """Print (and return) the progress table seen from ``folder`` (default: current folder).

    While nbgrader grades a notebook it prints one line instead (grades must not depend on
    the grader's files).
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        print("progress: not shown while nbgrader grades this notebook")
        return ""
    path = find_progress_file(folder)
    here = Path(folder or Path.cwd()).resolve()
    days, maxes = _course_days(here if here.is_dir() else here.parent)
    data = load(path)
    if not days:
        days = sorted(data.get("days", {}))
    text = format_progress(data, days, maxes, source=str(path))
    print(text)
    return text


def _current_notebook(notebook: str | os.PathLike | None) -> Path:
    """The notebook to self-check: the given path, a day number, or the open notebook."""
    if notebook is not None:
        text = str(notebook)
        if text.isdigit():
            key = f"day{int(text):02d}_"
            base = Path.cwd()
            for folder in (base, base.parent):
                hits = sorted(folder.glob(f"{key}*/{key}*.ipynb"))
                if hits:
                    return hits[0].resolve()
            raise FileNotFoundError(f"no notebook for day {text} in {base} or {base.parent}")
        path = Path(notebook).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist")
        return path
    session = os.environ.get("JPY_SESSION_NAME", "")          # set by Jupyter Server
    if session.endswith(".ipynb") and Path(session).is_file():
        return Path(session).resolve()
    cwd = Path.cwd()
    own = cwd / f"{cwd.name}.ipynb"
    if DAY_RE.match(cwd.name) and own.is_file():
        return own.resolve()
    found = sorted(p for p in cwd.glob("day*.ipynb") if DAY_RE.match(p.stem))
    if len(found) == 1:
        return found[0].resolve()
    raise FileNotFoundError(
        f"cannot tell which notebook is open (looked in {cwd}); pass it: "
        "selfcheck('day04_multi_head_attention.ipynb')")


_STANDBY: dict[str, subprocess.Popen] = {}     # notebook path -> its waiting self-check
_SENTINEL = "\x1eexit "    # the standby's last line, its exit status (autograder.standby.SENTINEL)


def _grader_env() -> dict:
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)         # the kernel's inline backend is not for the grader
    return env


def _start_standby(path: Path) -> None:
    """Start, in the background, a self-check of ``path`` that waits for the click.

    ``python -m autograder selfcheck --standby`` gets everything ready (nbgrader, the checks, a
    kernel with PyTorch imported) and grades when told to: the report then comes in a few
    seconds instead of ten or more. It holds a few hundred MB while it waits and ends with
    this kernel (its input closes). ``COURSE_SELFCHECK_STANDBY=0`` turns it off.
    """
    if os.environ.get("NBGRADER_EXECUTION") or \
            os.environ.get("COURSE_SELFCHECK_STANDBY", "1").strip() == "0":
        return
    old = _STANDBY.get(str(path))
    if old is not None and old.poll() is None:
        return
    try:
        _STANDBY[str(path)] = subprocess.Popen(
            [sys.executable, "-m", "autograder", "selfcheck", "--standby", str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=_grader_env(), cwd=str(path.parent),
            # its own session: killing this kernel's process group must not kill it before
            # it cleans up; it ends when its input closes, that is when this kernel ends
            start_new_session=True)
    except OSError:
        _STANDBY.pop(str(path), None)   # the click then grades the usual way


def _take_standby(path: Path) -> subprocess.Popen | None:
    """The waiting self-check of ``path``, told to grade now; None when there is none."""
    proc = _STANDBY.pop(str(path), None)
    if proc is None or proc.poll() is not None:
        return None
    try:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
    except (OSError, ValueError):
        proc.kill()
        return None
    return proc


def selfcheck(notebook: str | os.PathLike | int | None = None, timeout: float = 900) -> int | None:
    """Grade the saved notebook with the hidden tests and print what to fix.

    Grading happens in another process (``python -m autograder selfcheck``); when one is
    already waiting for this notebook (see :func:`_start_standby`) it grades at once, and
    afterwards the next one is started for the next check.

    Args:
        notebook: the notebook's path or day number; default: the notebook this kernel runs.
        timeout: seconds before giving up.

    Returns:
        The exit status of ``python -m autograder selfcheck`` (0: full marks, 1: some points
        lost, 2: could not grade), or None when skipped (while nbgrader itself grades).
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        print("selfcheck: skipped while nbgrader grades this notebook")
        return None
    try:
        path = _current_notebook(None if notebook is None else str(notebook))
    except FileNotFoundError as exc:
        print(f"selfcheck: {exc}")
        return 2
    saved = dt.datetime.fromtimestamp(path.stat().st_mtime).strftime("%H:%M:%S")
    proc = _take_standby(path)
    print(f"Grading the last saved version of {path.name} (saved at {saved}); save first "
          "(Ctrl+S) to include your latest edits. "
          + ("This takes a few seconds." if proc else "This takes up to ten seconds."),
          flush=True)
    if proc is None:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "autograder", "selfcheck", str(path)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                env=_grader_env(), cwd=str(path.parent))
        except OSError as exc:
            print(f"selfcheck: could not start the grader: {exc}")
            return 2
    assert proc.stdout is not None
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    rc = None
    try:
        for line in proc.stdout:
            if line.startswith(_SENTINEL):
                rc = int(line[len(_SENTINEL):].strip() or 2)
                break
            if line.startswith("\x1e"):
                continue                # the standby's other protocol lines ("ready")
            print(line, end="", flush=True)
        if rc is None:
            rc = proc.wait()
            if rc < 0:
                print(f"selfcheck: stopped after {timeout:.0f} s")
                return 2
        else:
            # the standby cleans up after its report: reap it in the background
            threading.Thread(target=proc.wait, daemon=True).start()
        _start_standby(path)
        return rc
    except KeyboardInterrupt:
        proc.kill()
        print("selfcheck: interrupted")
        return 2
    finally:
        timer.cancel()


def selfcheck_button(notebook: str | os.PathLike | int | None = None):
    """A "Self-check" button for the top or bottom of a notebook; the report appears below it.

    Showing the button starts a self-check of the notebook that waits for the click (see
    :func:`_start_standby`), so that the report comes in seconds.

    Returns the ipywidgets box (show it as the last line of a cell), or None while nbgrader
    grades (there is nobody to click it then).
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    import ipywidgets as w

    button = w.Button(description="Self-check", icon="check", button_style="info",
                      tooltip="grade the saved notebook with the hidden tests "
                              "(a few seconds; save first)")
    try:
        _start_standby(_current_notebook(None if notebook is None else str(notebook)))
    except FileNotFoundError:
        pass                            # the click says which notebook it could not find
    out = w.Output()

    def run(_) -> None:
        button.disabled = True
        button.description = "grading..."
        out.clear_output()
        try:
            with out:
                selfcheck(notebook)
        finally:
            button.disabled = False
            button.description = "Self-check"

    button.on_click(run)
    return w.VBox([button, out])
