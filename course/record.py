"""The course's measured record: what each notebook's answer key printed, per run profile.

A notebook never states a measured figure on its own authority. A training cell prints the
learner's figure next to the record's with :func:`report`::

    report("day09", "heldout_accuracy", heldout_acc)
    # held-out accuracy 98.96%   (course record, cpu profile: 98.95%)

and prose that quotes a figure says it comes from the record (``tests/test_record.py`` holds
every such sentence, and the table in docs/record.md, against ``course/record.json``).

``course/record.json`` is written by one command, ``python -m autograder record``, which runs
every answer key in ``solutions/`` in a profile and keeps, per day, the figures the cells
reported and how long the whole notebook took (seconds of wall time, kernel start included).
It says which machine measured it; a profile that was never measured is marked so, and
:func:`report` then says "not measured".

``COURSE_RECORD_OUT``: when set (by that command), :func:`report` also appends each figure as a
line of JSON to the file it names.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from course import profile

RECORD_FILE = Path(__file__).with_name("record.json")

# Every figure the record knows: its label and how its value is printed (one str.format field).
FORMATS = {
    "heldout_accuracy": ("held-out accuracy", "{:.2%}"),
    "lookup_weight": ("weight on the capital letter", "{:.0%}"),
    "train_seconds": ("training", "{:.0f} s"),
    "val_loss": ("validation loss", "{:.3f}"),
    "step_seconds": ("time per step", "{:.3f} s"),
    "recompute_seconds": ("generation without a cache", "{:.2f} s"),
    "cache_seconds": ("generation with the KV cache", "{:.2f} s"),
    "speedup": ("speed-up", "{:.1f}x"),
    "tinygpt_val_loss": ("TinyGPT validation loss", "{:.2f}"),
    "moderngpt_val_loss": ("ModernGPT validation loss", "{:.2f}"),
    "sweep_best_lr": ("best learning rate of the sweep", "{:.0e}"),
    "sweep_loss_best": ("final loss at the best rate", "{:.3f}"),
    "sweep_loss_slowest": ("final loss at the slowest rate, 1e-4", "{:.3f}"),
    "sweep_loss_fastest": ("final loss at the fastest rate, 1", "{:.3f}"),
    "bigram_val_loss": ("bigram baseline: validation loss", "{:.3f}"),
    "first_val_loss": ("validation loss at the first evaluation", "{:.3f}"),
    "finetune_before": ("pretrained, before fine-tuning: loss on the report quarter", "{:.3f}"),
    "finetune_loss": ("fine-tuned, at its chosen steps: loss on the report quarter", "{:.3f}"),
    "finetune_steps": ("fine-tuned: steps chosen on the selection quarter", "{:.0f}"),
    "scratch_loss": ("from scratch, at its chosen steps: loss on the report quarter", "{:.3f}"),
    "scratch_steps": ("from scratch: steps chosen on the selection quarter", "{:.0f}"),
    "previous_token_score": ("best head's weight on the previous character", "{:.0%}"),
    "bpe_chars_per_token": ("BPE: characters per token on the validation text", "{:.2f}"),
    "bpe_train_seconds": ("BPE: learning the merges", "{:.1f} s"),
    "largest_logit_plain": ("largest attention logit without QK-norm", "{:.1f}"),
    "largest_logit_qk_norm": ("largest attention logit with QK-norm", "{:.1f}"),
    "val_loss_plain": ("validation loss without QK-norm", "{:.2f}"),
    "val_loss_qk_norm": ("validation loss with QK-norm", "{:.2f}"),
    "kv_cache_mib_mha": ("KV cache, 8 key/value heads (multi-head)", "{:.2f} MiB"),
    "kv_cache_mib_gqa": ("KV cache, 2 key/value heads (grouped-query)", "{:.2f} MiB"),
    "kv_cache_mib_mqa": ("KV cache, 1 key/value head (multi-query)", "{:.2f} MiB"),
    "ablation_loss_modern": ("ModernGPT (Pre-LN, RoPE): validation loss", "{:.3f}"),
    "ablation_loss_post_ln": ("Post-LN: validation loss", "{:.3f}"),
    "ablation_loss_no_positions": ("no position information: validation loss", "{:.3f}"),
    "ablation_loss_learned_positions": ("learned positions: validation loss", "{:.3f}"),
    "rope_loss_within": ("RoPE, trained positions: loss", "{:.3f}"),
    "rope_loss_beyond": ("RoPE, positions beyond training: loss", "{:.3f}"),
    "no_positions_loss_within": ("no positions, trained positions: loss", "{:.3f}"),
    "no_positions_loss_beyond": ("no positions, beyond training: loss", "{:.3f}"),
    "resume_from_day13": ("resuming: started from the Day 13 checkpoint (1 yes, 0 no)", "{:.0f}"),
    "resume_gap": ("resumed vs uninterrupted: largest weight difference", "{:.3g}"),
    "resume_size_ratio": ("checkpoint with the optimizer / weights only", "{:.2f}x"),
    "resume_step_restored": ("first step after loading, restored AdamW: median change / lr",
                             "{:.2f}"),
    "resume_step_fresh": ("first step after loading, fresh AdamW: median change / lr", "{:.2f}"),
    "dropout_best_val_0": ("dropout 0: best held-out loss", "{:.3f}"),
    "dropout_best_step_0": ("dropout 0: step of the best held-out loss", "{:.0f}"),
    "dropout_final_val_0": ("dropout 0: held-out loss at the end", "{:.3f}"),
    "dropout_final_train_0": ("dropout 0: training loss at the end", "{:.3f}"),
    "dropout_best_val_2": ("dropout 0.2: best held-out loss", "{:.3f}"),
    "dropout_best_step_2": ("dropout 0.2: step of the best held-out loss", "{:.0f}"),
    "dropout_final_val_2": ("dropout 0.2: held-out loss at the end", "{:.3f}"),
    "dropout_final_train_2": ("dropout 0.2: training loss at the end", "{:.3f}"),
    "resume_fresh_jump": ("fresh AdamW: largest loss above the uninterrupted run", "{:.4f}"),
    "resume_fresh_mean": ("fresh AdamW: mean loss above the uninterrupted run", "{:+.4f}"),
}


def describe(name: str, value: float) -> str:
    """``"held-out accuracy 99.20%"``: a figure with its label, as the record prints it."""
    label, spec = FORMATS[name]
    return f"{label} {spec.format(value)}"


def load(path: Path | None = None) -> dict:
    """The whole record: ``{"machine": {...}, "profiles": {name: {"measured": date or None,
    "days": {day: {"notebook_seconds": float, "figures": {name: float}}}}}}``."""
    return json.loads((path or RECORD_FILE).read_text(encoding="utf-8"))


def recorded(day: str, name: str, profile_name: str | None = None,
             path: Path | None = None) -> float | None:
    """The record's value of figure ``name`` of ``day`` (e.g. ``"day09"``) in a profile (default:
    the active one); ``notebook_seconds`` is the whole notebook's time. None when that profile,
    day or figure was not measured."""
    profile_name = profile_name or profile.current()
    try:
        days = load(path)["profiles"][profile_name]["days"]
    except (OSError, ValueError, KeyError):
        return None
    # the record keys days by folder ("day09_training_loop"); a notebook names its prefix
    day_record = next((v for k, v in days.items() if k == day or k.startswith(day + "_")), None)
    if day_record is None:
        return None
    if name == "notebook_seconds":
        return day_record.get("notebook_seconds")
    return day_record.get("figures", {}).get(name)


def report(day: str, name: str, value: float) -> str:
    """Print the learner's figure, then the record's value for the active profile, both in the
    figure's format from :data:`FORMATS`.

    Args:
        day: the notebook's folder prefix, e.g. ``"day09"``.
        name: the figure's name in :data:`FORMATS`, e.g. ``"heldout_accuracy"``.
        value: the learner's figure (a float, or a 0-d tensor).

    Returns:
        The printed line.

    Raises:
        KeyError: for a name the record does not know.
    """
    spec = FORMATS[name][1]
    value = float(value)
    active = profile.current()
    stored = recorded(day, name, active)
    said = spec.format(stored) if stored is not None else "not measured"
    line = f"{describe(name, value)}   (course record, {active} profile: {said})"
    print(line)
    out = os.environ.get("COURSE_RECORD_OUT")
    if out and math.isfinite(value):
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps({"day": day, "name": name, "value": value,
                                "profile": active}) + "\n")
    return line
