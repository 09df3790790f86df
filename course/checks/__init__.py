"""Visible checks: quick, friendly checks a learner runs right after writing an exercise.

They cover the simple cases (square shapes, no mask); the hidden tests add the cases that
catch subtler mistakes (non-square shapes, masks, large inputs, injected weights).

In the learner's own kernel, importing this package (every notebook's first cells do) makes
two kinds of failure read as what they are, not as a crash:

- a failed visible check (:class:`course.checking.CheckFailure`) prints its message, the
  likely mistake and its hint, in two or three lines, without the traceback through the
  course's code (``%tb`` still shows it);
- an exercise not written yet (its stub raises ``NotImplementedError``) prints one line naming
  it;

and no error stops "Run All": the rest of the notebook runs, down to the Self-check button
and the explorers (a wrong answer often breaks a later plot or demo cell too). Any other
error still shows in full, with its traceback and one line saying that the notebook went on;
only an interrupt (the stop button, Ctrl-C) stops it. Nothing changes while nbgrader grades
a notebook (``NBGRADER_EXECUTION``), where every failure must count.
"""

from __future__ import annotations

import os

__all__ = ["install_learner_display"]

RED, END = "\x1b[31m", "\x1b[0m"


def _stub_name(tb) -> str:
    """The innermost function of the learner's notebook in ``tb`` (the stub that raised)."""
    name = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        if "ipykernel" in code.co_filename or code.co_filename.startswith("<ipython-input"):
            name = code.co_name
        tb = tb.tb_next
    return "" if name == "<module>" else name


def _show(shell, etype, value, tb, tb_offset=None):
    """IPython's custom exception handler: the short form of the two failures above."""
    if issubclass(etype, NotImplementedError):
        what = _stub_name(tb)
        print(f"{RED}not written yet: {what + '() ' if what else ''}still raises "
              f"NotImplementedError. Fill in its cell above, run it, then run this cell "
              f"again.{END}")
    else:
        lines = str(value).strip().splitlines() or ["the check failed"]
        print(f"{RED}✗ check failed: {lines[0]}{END}")
        for line in lines[1:6]:
            print(f"  {line}")
        print("  (the full traceback: run %tb in a new cell)")
    return None


def _keep_going(result) -> None:
    """post_run_cell: an error (not an interrupt) does not stop Run All; one that is not a
    failed check or an unwritten stub says so under its traceback."""
    from course.checking import CheckFailure

    error = result.error_in_exec or result.error_before_exec
    if not isinstance(error, Exception):
        return                          # none, or KeyboardInterrupt / SystemExit: stop
    if not isinstance(error, (CheckFailure, NotImplementedError)):
        print(f"{RED}(Run All goes on to the end of the notebook: the cells below may fail "
              f"because of this one. Fix the first error first.){END}")
    result.error_in_exec = None
    result.error_before_exec = None


def install_learner_display() -> bool:
    """Install the short display and Run All behaviour in this IPython kernel (once); False
    outside IPython, while nbgrader grades, and with ``COURSE_STOP_ON_ERROR=1`` (a run that
    must stop at the first failure, as ``python -m autograder record``'s does)."""
    if os.environ.get("NBGRADER_EXECUTION") or \
            os.environ.get("COURSE_STOP_ON_ERROR", "").strip() == "1":
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or getattr(shell, "_course_learner_display", False):
        return False
    from course.checking import CheckFailure

    shell.set_custom_exc((CheckFailure, NotImplementedError), _show)
    shell.events.register("post_run_cell", _keep_going)
    shell._course_learner_display = True
    return True


install_learner_display()
