"""The benchmark's record: ``python -m autograder.benchmark ... --record FILE`` appends what it
printed, under the date, the command and the machine, to the course's record of measured
figures (``docs/benchmark-record.md``), which the README and the instructors' guide quote.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def machine() -> str:
    """One line naming the machine and the software the figures were measured with."""
    import platform

    import nbgrader
    import torch

    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(x.split(":", 1)[1].strip() for x in f if x.startswith("model name"))
    except (OSError, StopIteration):
        pass
    with open("/proc/meminfo", encoding="ascii") as f:
        total = int(f.readline().split()[1]) / 2 ** 20
    return (f"{cpu}, {os.cpu_count()} cores, {total:.0f} GiB; Linux {platform.release()}; "
            f"Python {platform.python_version()}, PyTorch {torch.__version__}, "
            f"nbgrader {nbgrader.__version__}")


def recorded(main, record: Path, argv: list[str]) -> int:
    """Run the benchmark's ``main`` without ``--record``, printing as usual; then append what
    it printed to ``record`` under the date, the command and the machine."""
    import contextlib
    import datetime as dt
    import io

    class Tee(io.TextIOBase):
        def __init__(self, inner):
            self.inner, self.lines = inner, []

        def write(self, text: str) -> int:
            self.inner.write(text)
            self.lines.append(text)
            return len(text)

        def flush(self) -> None:
            self.inner.flush()

    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--record":
            skip = True
        elif not a.startswith("--record="):
            rest.append(a)
    tee = Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        code = main(rest)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = (f"\n## {when}: `python -m autograder.benchmark {' '.join(rest)}`\n\n"
            f"{machine()}\n\n```\n{''.join(tee.lines).rstrip()}\n```\n")
    record.parent.mkdir(parents=True, exist_ok=True)
    if not record.exists():
        text = RECORD_HEADER + text
    with open(record, "a", encoding="utf-8") as f:
        f.write(text)
    return code


RECORD_HEADER = """# Benchmark record

This page is for instructors sizing the machines that grade a class, and for anyone checking a
grading-speed figure that the README or docs/instructors.md quotes: each section is what
`python -m autograder.benchmark ... --record docs/benchmark-record.md` printed, under the date,
the command and the machine (newest last). Timings depend on the machine and its load: each
run was made on an otherwise idle machine, and only figures from the same machine compare.
"""
