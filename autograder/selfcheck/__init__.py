"""The learner's own grading: ``python -m autograder selfcheck NOTEBOOK`` and ``progress``.

Package: :mod:`~autograder.selfcheck.check` grades one notebook exactly as ``grade`` does and
prints the report; :mod:`~autograder.selfcheck.standby` starts it ahead of time for the
notebook's Self-check button; :mod:`~autograder.selfcheck.helper` keeps standbys warm for the
command line. It may import :mod:`autograder.grading` (and what that may),
:mod:`autograder.core` and :mod:`course`; nothing above it imports it but the CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

# The package's public functions live in check.py, imported on first use: the command line
# reaches the warm helper (helper.py) without nbgrader, nbformat or the pipeline.
_PUBLIC = ("NOT_RECORDED", "STUDENT", "Report", "_grade_options", "day_of", "exit_status",
           "explain", "format_report", "selfcheck", "show_progress", "test_map")


def __getattr__(name: str):
    if name in _PUBLIC:
        from autograder.selfcheck import check

        return getattr(check, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _cmd_selfcheck(args) -> int:
    if args.standby:
        from autograder.selfcheck.standby import serve

        code = serve(args.notebook, root=args.root, save=not args.no_save)
        with contextlib.suppress(OSError):     # serve() may have closed stdout already
            sys.stdout.flush()
        os._exit(code)           # skip the interpreter's finalisation (PyTorch is loaded)
    if not args.no_helper and not args.sandbox:
        from autograder.selfcheck import helper

        code = helper.check(args.notebook, root=args.root, save=not args.no_save)
        if code is not None:
            return code
    from autograder.selfcheck.check import exit_status, selfcheck

    return exit_status(selfcheck(args.notebook, root=args.root, save=not args.no_save,
                                 sandbox=args.sandbox, shown=args.shown))


def _cmd_progress(args) -> int:
    from autograder.selfcheck.check import show_progress

    show_progress(args.folder)
    return 0


def add_learner_commands(sub, add_common) -> None:
    """Register ``selfcheck`` and ``progress`` on the ``python -m autograder`` parser."""
    p = sub.add_parser("selfcheck", help="grade one of your notebooks with the hidden tests "
                       "(offline; prints what to fix; records your progress)")
    add_common(p)
    p.add_argument("notebook", type=Path, help="e.g. notebooks/day04_multi_head_attention/"
                   "day04_multi_head_attention.ipynb")
    p.add_argument("--no-save", action="store_true", help="do not record the points")
    p.add_argument("--no-helper", action="store_true",
                   help="grade in this process, not in the warm helper that the first "
                        "self-check of a login starts (also: TFS_SELFCHECK_HELPER=0)")
    p.add_argument("--standby", action="store_true",
                   help="get ready now, grade when 'go' arrives on stdin (the notebook's "
                        "Self-check button starts one ahead of time)")
    p.add_argument("--sandbox", action="store_true",
                   help="grade in the sandbox, as `grade` does (the class's check on the hub)")
    p.add_argument("--shown", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_selfcheck)

    p = sub.add_parser("progress", help="your points per day, from your latest self-checks")
    p.add_argument("folder", type=Path, nargs="?", default=None,
                   help="your course folder (default: the current folder)")
    p.set_defaults(func=_cmd_progress)
