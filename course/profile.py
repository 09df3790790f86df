"""Run profiles: how much data and how many steps a training cell uses.

- ``grading``: nbgrader is executing the notebook (it sets ``NBGRADER_EXECUTION``): every
  notebook must run in at most 30 seconds, so training is a short smoke run.
- ``gpu``: CUDA is available: the full-size run.
- ``cpu``: a laptop: sized so "Restart & Run All" takes at most 10 minutes on 2 cores.

``COURSE_PROFILE`` overrides the choice (for example ``COURSE_PROFILE=grading`` to check a
notebook quickly). Training cells read one value per profile with :func:`pick`::

    steps = pick(grading=50, cpu=2_000, gpu=5_000)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TypeVar

import torch

PROFILES = ("grading", "cpu", "gpu")
T = TypeVar("T")


def current() -> str:
    """The active profile name: ``grading``, ``gpu`` or ``cpu``.

    Raises:
        ValueError: when ``COURSE_PROFILE`` names an unknown profile.
    """
    forced = os.environ.get("COURSE_PROFILE", "").strip().lower()
    if forced:
        if forced not in PROFILES:
            raise ValueError(f"COURSE_PROFILE={forced!r} is not one of {PROFILES}")
        return forced
    if os.environ.get("NBGRADER_EXECUTION"):
        return "grading"
    if torch.cuda.is_available():
        return "gpu"
    return "cpu"


def pick(*, grading: T, cpu: T, gpu: T | None = None) -> T:
    """The value for the active profile (``gpu`` defaults to the ``cpu`` value)."""
    name = current()
    if name == "grading":
        return grading
    if name == "gpu" and gpu is not None:
        return gpu
    return cpu


def describe() -> str:
    """One line for the top of a training cell: which profile runs, and why."""
    name = current()
    why = {
        "grading": "nbgrader is executing this notebook: a short smoke run",
        "gpu": f"CUDA device {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
        else "forced by COURSE_PROFILE",
        "cpu": "no GPU found: sized for a laptop CPU",
    }[name]
    return f"run profile: {name} ({why})"


def not_drawn_while_grading(func: Callable) -> Callable:
    """For a function that only draws (a plot, an explorer, a live monitor): while nbgrader
    executes the notebook (``NBGRADER_EXECUTION``) it returns None without drawing or running
    anything. Nobody sees those figures (the grading kernel draws with matplotlib's Agg
    backend), and on some days drawing took a second of every self-check and graded notebook.
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if os.environ.get("NBGRADER_EXECUTION"):
            return None
        return func(*args, **kwargs)

    return wrapper
