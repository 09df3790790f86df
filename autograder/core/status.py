"""The statuses of a graded (student, day): one enum, imported wherever a status is made or
compared (re-exported by :mod:`autograder.core.records`)."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """What happened to one (student, day): a string in every file (``"graded"``...), so a
    status compares equal to its text and is written as it."""

    GRADED = "graded"
    MISSING = "missing"
    UNREADABLE = "unreadable"
    REJECTED = "rejected"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory-limit"
    KERNEL_DIED = "kernel-died"
    TAMPERED = "tampered"
    ENVIRONMENT_ERROR = "environment-error"


STATUSES = tuple(s.value for s in Status)
