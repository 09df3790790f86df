"""The classroom's processes: find them (:func:`leftovers`) and end them (:func:`sweep`).

A process of a classroom account is found by its uids alone (real, effective, saved or
filesystem uid of an account or in a subordinate range left to one; zombies and kernel
threads aside), never by its command line, which a process can blank. Root ends them pid by
pid: SIGSTOP until every one is stopped (none can fork or signal), then SIGKILL; never from
a child of the account's uid alone, which its processes could kill or stop (each account's
processes are first killed at once by a child they cannot signal: :func:`_kill_all_as`).
The hub and the proxy (root's) are found by their working folder, ``hub/``. :func:`sweep`
also gives the checkout back the modes it had before ``classroom start`` closed it
(:func:`autograder.classroom.setup.restore_checkout`), once nothing of the classroom is left.
"""

from __future__ import annotations

import os
import pwd
import signal
import sys
import time
from pathlib import Path

from autograder.classroom.setup import (
    CHECKOUT_MODES,
    account_uids,
    restore_checkout,
    subid_ranges,
)

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


def _state(status: dict[str, str]) -> str:
    return status.get("State", "").strip()[:1]


def _uids(status: dict[str, str]) -> list[int]:
    """Real, effective, saved and filesystem uid."""
    try:
        return [int(u) for u in status["Uid"].split()]
    except (KeyError, ValueError):
        return []


def _live(pid: int) -> tuple[int, str] | None:
    """(real uid, name) of a running process: None for a zombie, a kernel thread or one
    that is gone. Never its command line, which a process can blank."""
    status = _proc_status(pid)
    if not status or _state(status) in ("Z", "X", ""):
        return None
    if _kernel_thread(pid, status):
        return None
    uids = _uids(status)
    return (uids[0], status.get("Name", "").strip()) if uids else None


class _Accounts:
    """The classroom's uids: its accounts' own, and any subordinate uid range left to them
    (:func:`autograder.classroom.setup.subid_ranges`)."""

    def __init__(self, folder: Path):
        self.uids = account_uids(folder)
        self.ranges = []
        for uid in self.uids:
            try:
                self.ranges += subid_ranges(pwd.getpwuid(uid))
            except KeyError:
                pass

    def owns(self, status: dict[str, str]) -> bool:
        """Whether any of the process's real, effective, saved or filesystem uids is one."""
        return any(u in self.uids or any(f <= u < f + n for f, n in self.ranges)
                   for u in _uids(status))


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
    accounts (by its uids alone: zombies and kernel threads aside), and any started in its
    ``hub/`` folder (the hub, the proxy)."""
    accounts = _Accounts(folder)
    hub = str((folder / "hub").resolve())
    out = []
    for pid in _pids():
        if pid == os.getpid() or (live := _live(pid)) is None:
            continue
        if accounts.owns(_proc_status(pid)) or _cwd(pid) == hub:
            out.append((pid, cmdline(pid) or f"[{live[1]}]"))
    return out


def _signal(pid: int, sig: int, accounts: _Accounts) -> None:
    """Send ``sig`` to ``pid`` if it is (still) a live process of ``accounts``: through a
    pidfd, checked after it is opened, so a pid reused meanwhile is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        fd = None
    try:
        status = _proc_status(pid)
        if not status or _state(status) in ("Z", "X") or not accounts.owns(status):
            return
        if fd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        pass
    finally:
        if fd is not None:
            os.close(fd)


def _scan(accounts: _Accounts) -> dict[int, str]:
    """pid -> state letter of every live process of the accounts (kernel threads aside)."""
    out = {}
    for pid in _pids():
        status = _proc_status(pid)
        if (status and _state(status) not in ("Z", "X", "") and accounts.owns(status)
                and not _kernel_thread(pid, status)):
            out[pid] = _state(status)
    return out


# The real and saved uid of the killer (see _kill_all_as): a uid no account or process has.
KILLER_UID = 4_294_960_000


def _kill_all_as(uid: int, timeout: float) -> None:
    """Kill every process of ``uid`` at once, from a child whose real and saved uid are
    :data:`KILLER_UID` and whose effective uid is ``uid``: ``kill(-1, SIGKILL)`` reaches all
    of them in one pass of the kernel (a process forking as fast as it can is not missed, as
    it can be by a scan of /proc), while none of them may signal or trace the child (the
    kernel compares their uid with its real and saved uid). Repeated until no process of
    ``uid`` is left; the child is killed by root after ``timeout``."""
    if any(KILLER_UID in _uids(_proc_status(p))[:3] for p in _pids()):
        return  # someone has that uid: kill(-1) would reach them too
    pid = os.fork()
    if pid == 0:  # the child: os calls only
        try:
            os.setgroups([])
            os.setresuid(KILLER_UID, uid, KILLER_UID)
            me = os.getpid()
            for _ in range(1000):
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                if not any(p != me and uid in _uids(st := _proc_status(p))
                           and _state(st) not in ("Z", "X", "") for p in _pids()):
                    break
                time.sleep(0.005)
        finally:
            os._exit(0)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def end_accounts(accounts: _Accounts, timeout: float = 30.0) -> list[int]:
    """End every process of the classroom's accounts: first each account's at once
    (:func:`_kill_all_as`), then, for what is left (a subordinate uid), from root, pid by pid
    (never ``kill(-1)`` from root, never as the account, whose processes could signal the
    sweeper). First SIGSTOP to each, repeating full scans of /proc until two scans in a
    row find every one stopped (a stopped process can neither fork nor signal), then
    SIGKILL to all; again until none is left or ``timeout``. Returns the pids still there
    at the end."""
    end = time.monotonic() + timeout
    for uid in accounts.uids:
        _kill_all_as(uid, timeout / 3)
    while (found := _scan(accounts)) and time.monotonic() < end:
        calm = 0
        while calm < 2 and time.monotonic() < end:
            for pid, state in found.items():
                if state not in ("T", "t"):
                    _signal(pid, signal.SIGSTOP, accounts)
            calm = calm + 1 if all(s in ("T", "t") for s in found.values()) else 0
            time.sleep(0.002 if calm else 0.01)
            found = _scan(accounts)
        for pid in found:
            _signal(pid, signal.SIGKILL, accounts)
        time.sleep(0.02)
    return list(_scan(accounts))


def restore_modes(folder: Path) -> None:
    """Give the checkout back its modes from before `classroom start` (see sweep)."""
    try:
        restore_checkout(folder / CHECKOUT_MODES)
    except (OSError, ValueError) as exc:
        print(f"could not restore the checkout's modes from {folder / CHECKOUT_MODES}: "
              f"{exc}", file=sys.stderr)


def sweep(folder: Path, grace: float = 10.0, timeout: float = 30.0) -> list[tuple[int, str]]:
    """End every leftover process of this classroom and, only when nothing of it is left,
    give the checkout back the modes it had before ``classroom start`` closed it; otherwise
    the survivors are reported and the checkout stays closed. The hub and the proxy (root's,
    found by their folder) get SIGTERM, then SIGKILL after ``grace`` seconds at most; the
    accounts' processes are stopped and killed from root (:func:`end_accounts`), within
    ``timeout``. Returns the processes that were found (:func:`leftovers` tells what is
    left)."""
    found = leftovers(folder)
    accounts = _Accounts(folder)
    hub = str((folder / "hub").resolve())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        roots = [pid for pid in _pids() if pid != os.getpid() and _live(pid)
                 and not accounts.owns(_proc_status(pid)) and _cwd(pid) == hub]
        for pid in roots:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while any(_live(p) for p in roots) and time.monotonic() < deadline:
            time.sleep(0.2)
    end_accounts(accounts, timeout)
    left = leftovers(folder)
    if left:
        print(f"the classroom in {folder} is not stopped: still running "
              + "; ".join(f"{p} {c}" for p, c in left)
              + f" (the checkout stays closed; its modes are in {folder / CHECKOUT_MODES})",
              file=sys.stderr)
    else:
        restore_modes(folder)
    return found
