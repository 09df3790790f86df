"""The course's measured record (course/record.json) and everything that quotes it.

A figure a notebook or docs/record.md states must be the one the record holds: the training
cells print the learner's figure next to the record's (``course.record.report``), the table of
docs/record.md is rendered from the record, and a markdown sentence that quotes the record is
held against it here.
Regenerate with ``python -m autograder record`` (idle machine; the cpu profile takes ~20 min).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autograder.authoring.measure import (
    CPU_NOTEBOOK_LIMIT_S,
    README_END,
    README_START,
    RECORD_PAGE,
    render_table,
    update_readme,
)
from course import record as course_record
from course.record import FORMATS, load, report

ROOT = Path(__file__).resolve().parent.parent
RECORD = load()
NOTEBOOKS = sorted((ROOT / "source").glob("day*/day*.ipynb"))
REPORT_CALL = re.compile(r"""report\(\s*"(day\d\d)",\s*"(\w+)\"""")

# Claims in prose that compare figures of the record (day, prose that states it, check).
CLAIMS = [
    ("day09", "98% held-out accuracy", lambda f: f["heldout_accuracy"] >= 0.98),
    ("day11", "97%+", lambda f: f["heldout_accuracy"] >= 0.97),
    ("day14", "ModernGPT learned faster",
     lambda f: f["moderngpt_val_loss"] < f["tinygpt_val_loss"]),
    ("day10", "the best of the nine rates was 1e-02", lambda f: f["sweep_best_lr"] == 0.01),
    ("day10", "the loss of a uniform guess: too slow to learn anything in 30 steps",
     lambda f: abs(f["sweep_loss_slowest"] - 2.303) < 0.05),
    ("day10", "far above where it started", lambda f: f["sweep_loss_fastest"] > 3 * 2.303),
    ("day13", "it was below the bigram baseline by the first evaluation",
     lambda f: f["first_val_loss"] < f["bigram_val_loss"]),
    ("day13", "far above what the trained model reaches",
     lambda f: f["val_loss"] < f["bigram_val_loss"] - 0.5),
    ("day14", "the saving grows with the length of the text", lambda f: f["speedup"] > 1),
    ("day13", "the pretrained model starts far ahead of where the scratch run ends",
     lambda f: f["finetune_before"] < f["scratch_loss"] - 0.5),
    ("day13", "Fine-tuning on more text of the same kind moves it only a little further",
     lambda f: 0 < f["finetune_before"] - f["finetune_loss"] < 0.1),
    ("day13", "after the 50 steps the selection quarter chose",
     lambda f: f["finetune_steps"] == 50),
    ("day13", "while the scratch run reached 2.587 after 80", lambda f: f["scratch_steps"] == 80),
    ("day14", "Learned positions trail RoPE at equal steps",
     lambda f: f["ablation_loss_modern"] < f["ablation_loss_learned_positions"]),
    ("day14", "Without any position information the loss is far higher",
     lambda f: f["ablation_loss_no_positions"] > f["ablation_loss_learned_positions"] + 0.05),
    ("day14", "Post-LN matched Pre-LN here",
     lambda f: abs(f["ablation_loss_post_ln"] - f["ablation_loss_modern"]) < 0.02),
    ("day14", "RoPE's loss rose",
     lambda f: f["rope_loss_beyond"] > f["rope_loss_within"]),
    ("day14", "Without QK-norm it grows step after step",
     lambda f: f["largest_logit_plain"] > 10 * f["largest_logit_qk_norm"]),
    ("day14", "run must end with the same weights, to the last bit",
     lambda f: f["resume_gap"] == 0),
    ("day14", "Day 13 said about three times", lambda f: 2.5 < f["resume_size_ratio"] < 3.5),
    ("day14", "without dropout the held-out loss is lowest, 2.335, at step 200",
     lambda f: f["dropout_best_step_0"] == 200
     and f["dropout_final_val_0"] > f["dropout_best_val_0"] + 0.1
     and f["dropout_final_train_0"] < f["dropout_final_val_0"] - 1),
    ("day14", "the best held-out loss is about the same, 2.365 at step 250",
     lambda f: f["dropout_best_step_2"] == 250
     and abs(f["dropout_best_val_2"] - f["dropout_best_val_0"]) < 0.05),
    ("day14", "the held-out loss climbs less",
     lambda f: f["dropout_final_val_0"] - f["dropout_best_val_0"]
     > f["dropout_final_val_2"] - f["dropout_best_val_2"]
     and f["dropout_final_train_2"] > f["dropout_final_train_0"]),
]


def _cells(path: Path, kind: str) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def _day_entry(profile: str, day: str) -> dict:
    days = RECORD["profiles"][profile]["days"]
    return next(v for k, v in days.items() if k.startswith(day + "_"))


def test_every_day_is_recorded_in_the_cpu_and_grading_profiles_within_its_limit():
    days = sorted(p.parent.name for p in NOTEBOOKS)
    for profile in ("cpu", "grading"):
        entry = RECORD["profiles"][profile]
        assert entry["measured"], f"the {profile} profile was never measured"
        assert sorted(entry["days"]) == days, f"{profile}: days missing from the record"
    slow = {day: e["notebook_seconds"] for day, e in RECORD["profiles"]["cpu"]["days"].items()
            if e["notebook_seconds"] > CPU_NOTEBOOK_LIMIT_S}
    assert not slow, f"over {CPU_NOTEBOOK_LIMIT_S} s in the cpu profile: {slow}"
    gpu = RECORD["profiles"]["gpu"]
    assert gpu["measured"] is None or sorted(gpu["days"]) == days, \
        "a measured gpu profile holds every day"


def test_every_reported_figure_is_recorded_and_every_recorded_figure_is_reported():
    reported = set()
    for path in NOTEBOOKS:
        for source in _cells(path, "code"):
            for day, name in REPORT_CALL.findall(source):
                assert path.name.startswith(day + "_"), f"{path.name} reports as {day}"
                assert name in FORMATS, f"{path.name}: report of unknown figure {name!r}"
                reported.add((day, name))
    assert reported, "no notebook reports a figure"
    for profile in ("cpu", "grading"):
        recorded = {(k.split("_")[0], name)
                    for k, v in RECORD["profiles"][profile]["days"].items()
                    for name in v["figures"]}
        assert recorded == reported, (
            f"{profile}: reported but not recorded {sorted(reported - recorded)}; recorded but "
            f"no longer reported {sorted(recorded - reported)} (run python -m autograder record)")


def test_the_record_page_table_is_the_record():
    """Is the table of docs/record.md, between the record markers, rendered from the record?"""
    text = (ROOT / RECORD_PAGE).read_text(encoding="utf-8")
    block = text.split(README_START, 1)[1].split(README_END, 1)[0].strip()
    assert block == render_table(RECORD), \
        f"{RECORD_PAGE}'s record table differs from course/record.json: run python -m " \
        "autograder record"


def test_the_record_table_lives_in_one_place():
    """Does docs/record.md hold the one record block, and the README none (the writer would
    leave a second copy stale)?"""
    assert (ROOT / RECORD_PAGE).read_text(encoding="utf-8").count(README_START) == 1
    assert README_START not in (ROOT / "README.md").read_text(encoding="utf-8")


# what a sentence that quotes the record may state: a percentage, seconds, minutes, a speed-up,
# or a decimal (a loss); integers without a unit (layers, steps, d_model) are settings
_QUOTED = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*(%|minutes?\b|s\b|×)|(?<![\w.])(\d+\.\d+)(?![\w.])")


def _matches(stated: str, unit: str, figures: dict[str, float]) -> bool:
    value = float(stated.replace(",", ""))
    decimals = len(stated.split(".")[1]) if "." in stated else 0
    if unit == "%":
        candidates = [v * 100 for k, v in figures.items() if k.endswith(("accuracy", "score"))]
    elif unit.startswith("minute"):
        # "about N minutes": within a minute of a recorded time (machines vary by a third)
        return any(abs(v / 60 - value) < 1 for k, v in figures.items() if k.endswith("seconds"))
    elif unit == "s":
        candidates = [v for k, v in figures.items() if k.endswith("seconds")]
    elif unit == "×":
        candidates = [figures.get("speedup", float("nan"))]
    else:
        candidates = list(figures.values())
    return any(abs(round(v, decimals) - value) < 1e-9 for v in candidates)


def _figures(profile: str, day: str) -> dict[str, float]:
    entry = _day_entry(profile, day)
    return {**entry["figures"], "notebook_seconds": entry["notebook_seconds"]}


def _record_sentences() -> list[tuple[str, str]]:
    found = []
    for path in NOTEBOOKS:
        day = path.name[:5]
        for text in _cells(path, "markdown"):
            for sentence in re.split(r"(?<=[.!?])\s+|\n\n", text):
                if "record" in sentence:
                    found.append((day, " ".join(sentence.split())))
    return found


def test_prose_that_quotes_the_record_states_what_it_holds():
    sentences = _record_sentences()
    assert len(sentences) >= 8, "the notebooks quote the record in fewer places than expected"
    wrong = []
    for day, sentence in sentences:
        profiles = ["cpu", "grading"] if "grading" in sentence else ["cpu"]
        figures = {}
        for profile in profiles:
            for name, value in _figures(profile, day).items():
                figures[f"{profile}/{name}"] = value
        for m in _QUOTED.finditer(sentence):
            stated, unit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), "")
            if not _matches(stated, unit, figures):
                wrong.append(f"{day}: {stated}{unit} in \"{sentence[:120]}\"")
    assert not wrong, "prose states figures the record does not hold:\n" + "\n".join(wrong)


@pytest.mark.parametrize("day, prose, holds", CLAIMS, ids=[c[1] for c in CLAIMS])
def test_claims_the_prose_makes_about_the_record_hold(day, prose, holds):
    text = "\n".join(_cells(next(p for p in NOTEBOOKS if p.name.startswith(day)), "markdown"))
    assert prose in " ".join(text.split()), f"{day} no longer says {prose!r}: update CLAIMS"
    assert holds(_day_entry("cpu", day)["figures"]), f"{day}: the record contradicts {prose!r}"


def test_report_prints_the_learners_figure_next_to_the_record(tmp_path, monkeypatch, capsys):
    fake = {"machine": {}, "profiles": {
        "cpu": {"measured": "2026-01-01", "days": {"day09_training_loop": {
            "notebook_seconds": 160.0, "figures": {"heldout_accuracy": 0.992}}}},
        "grading": {"measured": None, "days": {}}, "gpu": {"measured": None, "days": {}}}}
    path = tmp_path / "record.json"
    path.write_text(json.dumps(fake))
    monkeypatch.setattr(course_record, "RECORD_FILE", path)
    out = tmp_path / "figures.jsonl"
    monkeypatch.setenv("COURSE_RECORD_OUT", str(out))
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    line = report("day09", "heldout_accuracy", 0.9896)
    assert line == "held-out accuracy 98.96%   (course record, cpu profile: 99.20%)"
    assert capsys.readouterr().out == line + "\n"
    assert json.loads(out.read_text()) == {"day": "day09", "name": "heldout_accuracy",
                                           "value": 0.9896, "profile": "cpu"}
    monkeypatch.setenv("COURSE_PROFILE", "grading")
    assert report("day09", "heldout_accuracy", 0.9).endswith("grading profile: not measured)")
    with pytest.raises(KeyError):
        report("day09", "no_such_figure", 1.0)


def test_the_record_block_is_rewritten_in_place(tmp_path):
    page = tmp_path / "record.md"
    page.write_text(f"before\n{README_START}\nold table\n{README_END}\nafter\n")
    update_readme(page, RECORD)
    assert page.read_text() == (f"before\n{README_START}\n{render_table(RECORD)}\n"
                                f"{README_END}\nafter\n")


def test_record_runs_a_notebook_keeps_its_figures_and_stops_its_kernel(tmp_path):
    """`record` on a one-day course: the figure a cell reports and the notebook's time land in
    the record and the table of docs/record.md, and no kernel outlives the run."""
    import os

    import nbformat

    from autograder.authoring.measure import record

    day = "day01_tiny"
    for top in ("source", "solutions"):
        folder = tmp_path / top / day
        folder.mkdir(parents=True)
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(
            'from course.record import report\nreport("day01", "val_loss", 1.25)')]
        nbformat.write(nb, folder / f"{day}.ipynb")
    (tmp_path / RECORD_PAGE).parent.mkdir()
    (tmp_path / RECORD_PAGE).write_text(f"x\n{README_START}\n{README_END}\n")
    path = tmp_path / "record.json"

    def children() -> set[int]:
        me = str(os.getpid())
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                found.add(int(stat.parent.name))
        return found

    before = children()
    result = record(tmp_path, ["grading"], path=path)
    entry = result["profiles"]["grading"]["days"][day]
    assert entry["figures"] == {"val_loss": 1.25}
    assert entry["notebook_seconds"] > 0
    assert json.loads(path.read_text()) == result
    assert "| day01_tiny | — | not measured | " in (tmp_path / RECORD_PAGE).read_text()
    assert children() <= before, "a kernel outlived the record run"
