"""The classroom's processes: find them (:func:`leftovers`) and end them (:func:`sweep`).

A process of a classroom account is found by its uid alone (zombies and kernel threads
aside), never by its command line, which a process can blank; it is ended from a child that
has become that account, by ``kill(-1)``, which no pid race, blanked command line or
process that keeps forking escapes. The hub and the proxy (root's) are found by their
working folder, ``hub/``. :func:`sweep` also gives the checkout back the modes it had before
``classroom start`` closed it (:func:`autograder.classroom_setup.restore_checkout`).
"""

from __future__ import annotations

import os
import pwd
import signal
import sys
import time
from pathlib import Path

from autograder.classroom_setup import CHECKOUT_MODES, account_uids, restore_checkout

PF_KTHREAD = 0x00200000


def _proc_status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text(errors="replace")
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _kernel_thread(pid: int, status: dict[str, str]) -> bool:
    if pid == 2 or status.get("PPid", "").strip() == "2":
        return True
    try:  # /proc/<pid>/stat: "pid (comm) state ppid ... flags" (comm may hold ")")
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return bool(int(fields[6]) & PF_KTHREAD)
    except (OSError, IndexError, ValueError):
        return False


def _live(pid: int) -> tuple[int, str] | None:
    """(real uid, name) of a running process: None for a zombie, a kernel thread or one
    that is gone. Never its command line, which a process can blank."""
    status = _proc_status(pid)
    if not status or status.get("State", "").strip()[:1] in ("Z", "X", ""):
        return None
    if _kernel_thread(pid, status):
        return None
    try:
        return int(status["Uid"].split()[0]), status.get("Name", "").strip()
    except (KeyError, IndexError, ValueError):
        return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return ""


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]


def leftovers(folder: Path) -> list[tuple[int, str]]:
    """(pid, command) of every process of this classroom still running: any process of its
    accounts (by uid alone: zombies and kernel threads aside), and any started in its
    ``hub/`` folder (the hub, the proxy)."""
    uids = account_uids(folder)
    hub = str((folder / "hub").resolve())
    out = []
    for pid in _pids():
        if pid == os.getpid() or (live := _live(pid)) is None:
            continue
        if live[0] in uids or _cwd(pid) == hub:
            out.append((pid, cmdline(pid) or f"[{live[1]}]"))
    return out


def _as_account(uid: int, sig: int, timeout: float = 30.0) -> None:
    """Send ``sig`` to every process of the account ``uid`` from a child that has become
    that uid, ``kill(-1, sig)``: no pid is looked up, so neither a blanked command line nor
    a process that keeps forking escapes. For SIGKILL it repeats until no live process of
    the uid is left (Linux answers ESRCH to ``kill(-1)`` only when no other process
    exists at all, so that alone cannot end the loop), or ``timeout``."""
    gid = pwd.getpwuid(uid).pw_gid
    child = os.fork()
    if child == 0:  # pragma: no cover - the forked child
        code = 1
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            end = time.monotonic() + timeout
            while True:
                try:
                    os.kill(-1, sig)
                except ProcessLookupError:
                    code = 0
                    break
                if sig != signal.SIGKILL or not any(
                        (live := _live(p)) and live[0] == uid for p in _pids()
                        if p != os.getpid()):
                    code = 0
                    break
                if time.monotonic() > end:
                    break
                time.sleep(0.005)
        finally:
            os._exit(code)
    os.waitpid(child, 0)


def restore_modes(folder: Path) -> None:
    """Give the checkout back its modes from before `classroom start` (see sweep)."""
    try:
        restore_checkout(folder / CHECKOUT_MODES)
    except (OSError, ValueError) as exc:
        print(f"could not restore the checkout's modes from {folder / CHECKOUT_MODES}: "
              f"{exc}", file=sys.stderr)


def sweep(folder: Path, grace: float = 10.0) -> list[tuple[int, str]]:
    """Stop every leftover process of this classroom, and give the checkout back the modes
    it had before ``classroom start`` closed it. Each account's processes get SIGTERM, then
    (after ``grace`` seconds at most) SIGKILL until none is left, both sent as the account
    (:func:`_as_account`); the hub and the proxy (root's, found by their folder) get the
    same by pid. Returns the processes that were found."""
    found = leftovers(folder)
    uids = account_uids(folder)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        running = {pid: _live(pid) for pid, _ in leftovers(folder)}
        for uid in {live[0] for live in running.values() if live and live[0] in uids}:
            _as_account(uid, sig)
        for pid, live in running.items():
            if live and live[0] not in uids:  # the hub, the proxy
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        while leftovers(folder) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not leftovers(folder):
            break
    restore_modes(folder)
    return found
