"""Cgroups for grading kernels, where the machine lets the grader make them (root).

A kernel's launcher puts it in a fresh cgroup under one parent, with a ceiling on processes
(``pids.max``) and memory (``memory.max`` or ``memory.limit_in_bytes``, which also counts the
kernel's tmpfs pages), and after the kernel exits reads whether the memory ceiling was hit
and removes the group. Best effort: without cgroups the rlimits still bind.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

MiB = 1024**2


def _cgroup_dirs(parent: str) -> list[Path]:
    """Writable cgroup folders for pids and memory (v1 or v2), created under ``parent``."""
    base = Path("/sys/fs/cgroup")
    out = []
    if (base / "cgroup.controllers").is_file():  # v2
        out.append(base / parent)
    else:
        for ctl in ("pids", "memory"):
            if (base / ctl).is_dir():
                out.append(base / ctl / parent)
    return out


def _join_cgroup(parent: str, limits: dict, pid: int) -> list[Path]:
    """Best effort: put ``pid`` in a fresh cgroup with pids/memory limits."""
    made = []
    name = f"kernel-{pid}-{uuid.uuid4().hex[:6]}"
    for d in _cgroup_dirs(parent):
        try:
            d.mkdir(parents=True, exist_ok=True)
            g = d / name
            g.mkdir()
            if limits.get("processes") and (g / "pids.max").exists():
                (g / "pids.max").write_text(str(limits["processes"]))
            mem = limits.get("memory")
            if mem:
                for fname in ("memory.max", "memory.limit_in_bytes"):
                    if (g / fname).exists():
                        (g / fname).write_text(str(mem + 512 * MiB))
            (g / "cgroup.procs").write_text(str(pid))
            made.append(g)
        except OSError:
            continue
    return made


def _cgroup_oom(groups: list[Path]) -> bool:
    """Did any of these cgroups hit its memory ceiling (v1 failcnt/oom_kill, v2 oom_kill)?"""
    for g in groups:
        for fname in ("memory.events", "memory.oom_control"):
            try:
                text = (g / fname).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key in ("oom_kill", "oom") and value.strip().isdigit() and int(value):
                    return True
    return False


def _remove_cgroups(groups: list[Path]) -> None:
    for g in groups:
        try:
            g.rmdir()
        except OSError:
            pass


def cleanup_cgroups(parent: str) -> None:
    """Remove the empty kernel cgroups left under ``parent`` (their kernels have exited)."""
    for d in _cgroup_dirs(parent):
        if d.is_dir():
            for g in d.glob("kernel-*"):
                try:
                    g.rmdir()
                except OSError:
                    pass


def default_cgroup_parent() -> str | None:
    """A cgroup parent for kernels when this process may create cgroups (root), else None."""
    if os.geteuid() != 0:
        return None
    for d in _cgroup_dirs("transformers-from-scratch"):
        if os.access(d.parent, os.W_OK):
            return "transformers-from-scratch"
    return None
