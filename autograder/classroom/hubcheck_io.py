"""The class's self-check, its connection side: reading a request, writing report lines,
counting checks (see :mod:`autograder.classroom.hubcheck` for the service).

Everything here treats the other end as a student's hostile process: bounded reads within a
deadline, a file name that only ever picks a day, report lines that can never be the
protocol's own.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import select
import socket
import struct
import threading
import time
from pathlib import Path

MAX_BYTES = 20 * 1024 * 1024        # a notebook bigger than this is refused unread
MAX_HEADER = 4096
READ_SECONDS = 60.0                 # the whole request, header and notebook
MAX_LINE = 400                      # characters of one line of the report


class Refused(Exception):
    """A request the service answers with one line and exit status 2."""


class Gone(Exception):
    """The student's side of the connection went away: nothing more to answer."""


def _gone(sock: socket.socket) -> bool:
    """Has the client closed the connection (not only its sending half: it may still read)?"""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return any(ev & (select.POLLHUP | select.POLLERR) for _, ev in poller.poll(0))


def _peer_uid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _read_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused("the notebook did not arrive in time")
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(1 << 20, n - got))
        except TimeoutError:
            raise Refused("the notebook did not arrive in time") from None
        except OSError as exc:
            raise Gone(str(exc)) from None
        if not chunk:
            raise Refused("the connection closed before the whole notebook arrived")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_request(sock: socket.socket, max_bytes: int = MAX_BYTES,
                 seconds: float = READ_SECONDS) -> tuple[str, bytes]:
    """(file name, notebook bytes) of one request, read within ``seconds``.

    Raises:
        Refused: a malformed, oversized or late request.
    """
    deadline = time.monotonic() + seconds
    header = b""
    while not header.endswith(b"\n"):
        if len(header) >= MAX_HEADER:
            raise Refused("the request's first line is too long")
        header += _read_exactly(sock, 1, deadline)
    try:
        meta = json.loads(header)
        name, size = meta["notebook"], meta["size"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise Refused("the request is not {\"notebook\": NAME, \"size\": N}") from None
    if not isinstance(name, str) or not isinstance(size, int) or isinstance(size, bool) \
            or size < 0:
        raise Refused("the request is not {\"notebook\": NAME, \"size\": N}")
    # printable: no control, separator (but the space), surrogate or private-use character
    if not name.isprintable() or "/" in name or "\\" in name or len(name) > 200:
        raise Refused("the notebook's file name must be one plain name (e.g. "
                      "day02_queries_keys_values.ipynb)")
    if size > max_bytes:
        raise Refused(f"the notebook is over {max_bytes // 2**20} MiB, the most the class's "
                      "check takes (clear large outputs, save, retry)")
    return os.path.basename(name)[:200], _read_exactly(sock, size, deadline)


def _line(text: str) -> str:
    """One line of the report as the student's kernel gets it: printable, bounded, never one
    of the protocol's own lines."""
    text = "".join(ch if ch.isprintable() or ch == "\t" else " " for ch in text)[:MAX_LINE]
    return text.lstrip("\x1e")


class Usage:
    """Checks per (account, assignment, calendar day), in a root-only JSON file."""

    def __init__(self, path: Path, per_day: int):
        self.path, self.per_day, self.lock = path, per_day, threading.Lock()
        try:
            self.counts = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.counts = {}

    @staticmethod
    def key(name: str, day: str) -> str:
        return f"{dt.date.today().isoformat()} {name} {day}"

    def take(self, name: str, day: str) -> int:
        """Count one check; returns how many are left today (raises Refused at the limit)."""
        with self.lock:
            key = self.key(name, day)
            used = int(self.counts.get(key, 0))
            if self.per_day and used >= self.per_day:
                raise Refused(f"you have used your {self.per_day} checks of {day} for today; "
                              "your instructor sets this limit")
            self.counts = {k: v for k, v in self.counts.items()
                           if k.split(" ", 1)[0] == dt.date.today().isoformat()}
            self.counts[key] = used + 1
            self._save()
            return self.per_day - used - 1 if self.per_day else -1

    def refund(self, name: str, day: str) -> None:
        """Give back a check that was never graded (its client left, or the grader failed)."""
        with self.lock:
            key = self.key(name, day)
            if self.counts.get(key, 0) > 0:
                self.counts[key] -= 1
                self._save()

    def _save(self) -> None:
        """Write the counts (root-only, never through a link), then move them into place."""
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(self.counts, fh)
        os.replace(tmp, self.path)


def _close_gently(sock: socket.socket, seconds: float = 1.0) -> None:
    """End our side, then drop what the client still sends for up to ``seconds`` (closing
    with unread data would reset the connection before the client read the answer)."""
    sock.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(1 << 16):
                return
        except (TimeoutError, OSError):
            return
