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

This module runs the self-checks (:func:`selfcheck`, :func:`selfcheck_button`, and the waiting
grader they start); the progress file and its table are :mod:`course.progressfile`, whose public
names are importable from here too. This module never imports solutions or hidden tests.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
from pathlib import Path

from course.progressfile import (
    COURSE_DAYS,
    DAY_RE,
    FILENAME,
    GENERATED,
    VERSION,
    find_progress_file,
    format_progress,
    load,
    progress_path,
    progress_text,
    record,
    show_progress,
)

__all__ = ["COURSE_DAYS", "DAY_RE", "FILENAME", "GENERATED", "VERSION", "find_progress_file",
           "format_progress", "load", "progress_path", "progress_text", "record", "selfcheck",
           "selfcheck_button", "show_progress"]


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


# On a class's hub: the socket of the check the hub runs for its students
# (autograder.classroom.hubcheck), set in every server the hub starts.
HUB_CHECK = "TFS_HUB_CHECK"
_STANDBY: dict[str, subprocess.Popen] = {}     # notebook path -> its waiting self-check
# the standby's last line, its exit status (autograder.selfcheck.protocol.SENTINEL)
_SENTINEL = "\x1eexit "


def _grader_env() -> dict:
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)         # the kernel's inline backend is not for the grader
    return env


def _start_standby(path: Path) -> None:
    """Start, in the background, a self-check of ``path`` that waits for the click.

    ``python -m autograder selfcheck --standby`` gets everything ready (nbgrader, the checks, a
    kernel with PyTorch imported) and grades when told to: the report then comes in a few
    seconds instead of ten or more. It holds about 0.6 GB while it waits (two processes with
    PyTorch: the grader with the checks, the kernel; docs/learners.md) and ends with
    this kernel (its input closes). ``COURSE_SELFCHECK_STANDBY=0`` turns it off.
    """
    if os.environ.get("NBGRADER_EXECUTION") or os.environ.get(HUB_CHECK) or \
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


def _hub_check(path: Path, sock_path: str, timeout: float) -> int:
    """The class's check (on a hub, see ``autograder.classroom.hubcheck``): send the saved
    notebook to the service the hub runs on the instructor's side, print its report."""
    import json
    import socket
    import time

    data = path.read_bytes()
    print(f"Sending the last saved version of {path.name} to the class's check (saved at "
          f"{dt.datetime.fromtimestamp(path.stat().st_mtime):%H:%M:%S}; save first, Ctrl+S, "
          "to include your latest edits). This takes ten seconds or more.", flush=True)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            start, pause = time.monotonic(), 0.1
            while True:              # a full queue (a burst of the class's checks): retry
                try:
                    sock.connect(sock_path)
                    break
                except (BlockingIOError, InterruptedError):
                    if time.monotonic() - start > 60:
                        raise
                    time.sleep(pause)
                    pause = min(2.0, pause * 2)
            sock.sendall(json.dumps({"notebook": path.name, "size": len(data)}).encode()
                         + b"\n" + data)
            with sock.makefile("r", encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    if line.startswith(_SENTINEL):
                        return int(line[len(_SENTINEL):].strip() or 2)
                    print(line, end="", flush=True)
    except (OSError, ValueError) as exc:
        print(f"selfcheck: the class's check did not answer ({exc}); ask your instructor")
        return 2
    print("selfcheck: the class's check stopped before its report; try again")
    return 2


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
    if os.environ.get(HUB_CHECK):
        return _hub_check(path, os.environ[HUB_CHECK], timeout)
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
