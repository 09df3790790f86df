"""Stand-ins for the classes learners build on earlier days, built on PyTorch's own functions.

:func:`course.previous.load_previous` returns one of these when a learner's earlier notebook is
missing, unfinished or wrong, and always while nbgrader grades a notebook, so that every day is
graded on that day's code alone. Each stand-in has the exact constructor signature, attribute
names and forward signature of the course's contract, so code written against the contract (and
the hidden tests, which read ``attn.W_Q`` or ``layer.norm1``) works with either. They are not
the from-scratch solutions: the arithmetic is delegated to ``F.multi_head_attention_forward``,
``F.scaled_dot_product_attention``, ``F.layer_norm``, ``F.gelu`` and ``torch.polar``. Day 8's
``SequenceClassifier`` is assembled from those, and Day 9's training functions are the plain
loops any correct answer computes (there is no built-in to delegate them to).

Each day's stand-ins live in a module of their own (``course.standins.day04``...), imported
only when asked for: ``from course.standins import MultiHeadSelfAttention`` imports Day 4's.
A kernel that grades Day N is given the modules of the days before N and no other
(:func:`modules_before`; the grader shows this package's folder with this file alone and adds
the allowed modules from ``TFS_STANDINS_DIR``), so no graded kernel holds a working answer of
its own day or a later one.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

# Which stand-in replaces which learner object: {assignment: {name: module}}.
WHERE: dict[str, dict[str, str]] = {
    "day02_queries_keys_values": {"scaled_dot_product_attention": "day02"},
    "day04_multi_head_attention": {"MultiHeadSelfAttention": "day04"},
    "day05_positional_encoding": {
        "SinusoidalPositionalEncoding": "day05",
        "LearnedPositionalEncoding": "day05",
    },
    "day06_encoder_layer": {
        "FeedForward": "day06",
        "LayerNorm": "day06",
        "TransformerEncoderLayer": "day06",
        "MultiHeadSelfAttention": "day04",
    },
    "day08_mnist_as_sequences": {"SequenceClassifier": "day08"},
    "day09_training_loop": {
        "train_one_epoch": "day09",
        "evaluate": "day09",
        "warmup_cosine_schedule": "day09",
    },
    "day12_causal_attention_tinygpt": {"TinyGPT": "day12"},
}
MODULES = sorted({m for names in WHERE.values() for m in names.values()})
# A name imported from the package itself: the module of the first day that defines it.
_NAMES = {}
for _names in WHERE.values():
    for _name, _module in _names.items():
        _NAMES.setdefault(_name, _module)

__all__ = ["MODULES", "STANDINS", "WHERE", "modules_before", *sorted(_NAMES)]



def _search_kernel_folder() -> None:
    """In a graded kernel the allowed modules are in a folder of the kernel's own, named by
    ``TFS_STANDINS_DIR``; read when a module is loaded (a fork server imports this package
    before any kernel's environment exists)."""
    extra = os.environ.get("TFS_STANDINS_DIR", "")
    if extra and extra not in __path__ and os.path.isdir(extra):  # noqa: F821 - __path__
        __path__.append(extra)  # noqa: F821


def modules_before(day: str) -> list[str]:
    """The stand-in modules a kernel grading ``day`` may hold: those of earlier days.

    ``day`` is an assignment name (``"day07_transformer_classifier"``) or its ``dayNN``
    prefix; modules are compared by day number (``day06`` < ``day07``).
    """
    return [m for m in MODULES if m < day[:5]]


def _load(module: str, name: str) -> Any:
    _search_kernel_folder()
    try:
        mod = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{module}":
            raise
        raise ImportError(
            f"the course's stand-in {name} ({module}) is not available here: a notebook that "
            f"is graded has only the stand-ins of earlier days", name=f"{__name__}.{module}"
        ) from None
    return getattr(mod, name)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return _load(_NAMES[name], name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Table(Mapping):
    """``STANDINS[assignment][name]``: the stand-in object, its module imported on access."""

    def __init__(self, names: Mapping[str, str] | None = None) -> None:
        self._names = names

    def __getitem__(self, key: str) -> Any:
        if self._names is None:
            return _Table(WHERE[key])
        return _load(self._names[key], key)

    def __iter__(self) -> Iterator[str]:
        return iter(WHERE if self._names is None else self._names)

    def __len__(self) -> int:
        return len(WHERE if self._names is None else self._names)


STANDINS: Mapping[str, Mapping[str, Any]] = _Table()


_search_kernel_folder()
