"""Progress of the long commands (build, grade, verify, demo) as they go.

On a terminal: one tqdm bar with the count, the elapsed time and the last item. Elsewhere (CI
logs, a pipe): one readable line per item, ``[3/28 12.4 s] alice/day03_self_attention: graded
7/7``, flushed at once, so that a log shows what is being done while it is done.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts items as they finish; use as the ``progress`` callback of ``pipeline.grade``.

    Args:
        what: the verb of the bar (``graded``, ``built``).
        total: the number of items, when known (``set_total`` may give it later).
        stream: where to write (default: standard error).
        tty: force the bar (True) or lines (False); default: whether ``stream`` is a terminal.
    """

    def __init__(self, what: str = "graded", total: int | None = None,
                 stream: TextIO | None = None, tty: bool | None = None):
        self.what = what
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.total = total
        self.count = 0
        self.start = time.monotonic()
        self.bar = None

    def set_total(self, total: int) -> None:
        self.total = total
        if self.bar is not None:
            self.bar.total = total
            self.bar.refresh()

    def _ensure_bar(self):
        if self.bar is None and self.tty:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=self.what, unit="nb", file=self.stream,
                            dynamic_ncols=True)
        return self.bar

    def item(self, label: str) -> None:
        """One item finished; ``label`` says which and how it went."""
        self.count += 1
        bar = self._ensure_bar()
        if bar is not None:
            bar.set_postfix_str(label[:60], refresh=False)
            bar.update(1)
            return
        of = f"/{self.total}" if self.total else ""
        self.stream.write(f"[{self.count}{of} {time.monotonic() - self.start:.1f} s] "
                          f"{label}\n")
        self.stream.flush()

    def __call__(self, result) -> None:
        """The ``progress`` callback of ``pipeline.grade``: one Result."""
        self.item(f"{result.student}/{result.day}: {result.status} "
                  f"{result.score:g}/{result.max_score:g}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
