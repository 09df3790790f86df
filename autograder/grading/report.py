"""``report``: the class report, an HTML page with PNG figures made with matplotlib.

- score distribution per day (graded submissions, percent of the day's points);
- pass rate per graded cell (share of graded submissions with full points on that test);
- the most frequent diagnoses: failures grouped by what their message names (the catalogued
  mistake of its "Hint:", the first step of the computation that differs ("Step:") or the
  place of its "Where:", whichever it states first; else its first line), numbers set aside
  for grouping, shown as one student read it, as a share of that day's graded submissions
  ("38% ... scale by sqrt(d_k)"), with the tests where it showed; a stub left as it was is
  "not started", never a diagnosis;
- the count of each status per day, and of notebooks not started.

Only days with a submission appear. The page is a Jinja2 template with autoescaping
(:mod:`autograder.core.pages`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from pathlib import Path

from autograder.core.records import STATUSES, Result, Status, _atomic_write_text

NUM = re.compile(r"(?<![\w.])-?\d+(\.\d+)?(e-?\d+)?(?!\w)")  # not the 2 of norm2


def load_results(results_dir: Path) -> list[Result]:
    out = []
    for p in sorted(Path(results_dir).glob("*/*.json")):
        try:
            out.append(Result.from_json(json.loads(p.read_text(encoding="utf-8"))))
        except (ValueError, TypeError, KeyError):
            continue
    return out


def named_part(message: str) -> str:
    """What a failure message names: its hint (the catalogued mistake), else where the values
    differ, else its first line; the exception name dropped, numbers kept."""
    msg = message.split(": ", 1)[1] if re.match(r"^\w+: ", message) else message
    lines = [line.strip() for line in msg.strip().splitlines() if line.strip()]
    named = [line.split(":", 1)[1].strip() for line in lines
             if line.startswith(("Hint:", "Step:", "Where:"))]
    return named[0] if named else (lines[0] if lines else "")


def diagnosis_key(message: str) -> str:
    """:func:`named_part` with its numbers blanked and cut short: the report's grouping key."""
    return NUM.sub("#", named_part(message))[:180]


def is_blank(result: Result) -> bool:
    """A notebook whose every failed test failed on a stub still raising NotImplementedError:
    nothing was attempted there, which is not a mistake to re-teach."""
    failed = [t for t in result.tests if t.points < t.max_points]
    return bool(failed) and all((t.message or "").startswith("NotImplementedError")
                                for t in failed)


def summarize(results: list[Result]) -> dict:
    """Per graded day: scores, pass rate per test, the statuses, the blank notebooks, and the
    diagnoses ranked by the share of the day's graded submissions that got them (a
    notebook's stubs left as they were count as "not started", not as a diagnosis)."""
    days = sorted({r.day for r in results if r.status != Status.MISSING})
    results = [r for r in results if r.day in days]
    graded = [r for r in results if r.status in (Status.GRADED, Status.TAMPERED, Status.TIMEOUT,
                                                  Status.MEMORY_LIMIT, Status.KERNEL_DIED)]
    scores = {d: [100 * r.score / r.max_score for r in graded if r.day == d and r.max_score]
              for d in days}
    cell_pass: dict[tuple[str, str], list[bool]] = defaultdict(list)
    diag: dict[str, Counter] = defaultdict(Counter)
    tests_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    examples: dict[tuple[str, str], str] = {}
    n_day = Counter(r.day for r in graded)
    blank = Counter(r.day for r in graded if is_blank(r))
    for r in sorted(graded, key=lambda r: r.student):
        seen = set()
        for t in r.tests:
            ok = t.points >= t.max_points
            cell_pass[(r.day, t.grade_id)].append(ok)
            if not ok and t.message and not t.message.startswith("NotImplementedError"):
                key = diagnosis_key(t.message)
                tests_of[(r.day, key)].add(t.grade_id)
                examples.setdefault((r.day, key), named_part(t.message)[:240])
                seen.add(key)
        for key in seen:  # a submission counts once per diagnosis, whatever tests show it
            diag[r.day][key] += 1
    frequent = []
    for d, counter in diag.items():
        for text, n in counter.items():
            frequent.append({"day": d, "grade_id": ", ".join(sorted(tests_of[(d, text)])),
                             "diagnosis": text, "example": examples[(d, text)], "count": n,
                             "share": n / n_day[d]})
    frequent.sort(key=lambda x: (-x["share"], -x["count"], x["day"]))
    status = {d: Counter(r.status for r in results if r.day == d) for d in days}
    return {"days": days, "scores": scores,
            "pass_rate": {f"{d}/{g}": sum(v) / len(v) for (d, g), v in cell_pass.items()},
            "frequent": frequent, "status": status, "blank": dict(blank),
            "n": len(results)}


def _bar_chart(path: Path, title: str, labels: list[str], values: list[float], *, xlabel: str,
               colors, width: float, row_height: float,
               xlim: tuple[float, float] | None = None) -> tuple[str, str]:
    """One horizontal bar per label, first label on top, saved to ``path``.

    Returns (file name, title) for the report's figure list.
    """
    import textwrap

    import matplotlib.pyplot as plt  # the Agg backend is chosen by _figures

    labels = [textwrap.fill(label, 48) for label in labels]   # long labels wrap, never cut
    lines = sum(label.count("\n") + 1 for label in labels)
    fig, ax = plt.subplots(figsize=(width, row_height * max(len(labels), lines * 0.6) + 1.2))
    ax.barh(labels, values, color=colors)
    ax.invert_yaxis()
    if xlim is not None:
        ax.set_xlim(*xlim)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.subplots_adjust(left=max(fig.subplotpars.left, 0.42))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name, title


def _figures(summary: dict, out_dir: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figs = []
    days = summary["days"]
    if days:
        n = len(days)
        cols = min(n, 3)
        rows = (n + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
        cmap = plt.get_cmap("viridis")
        for i, d in enumerate(days):
            ax = axes[i // cols][i % cols]
            ax.hist(summary["scores"][d], bins=[0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100.01],
                    color=cmap(0.35 + 0.5 * i / max(1, n - 1)), edgecolor="white")
            ax.set_title(d, fontsize=9)
            ax.set_xlabel("score (% of the day's points)")
            ax.set_ylabel("submissions")
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))   # whole submissions
        for j in range(n, rows * cols):
            axes[j // cols][j % cols].axis("off")
        fig.suptitle("Score distribution per day")
        fig.tight_layout()
        fig.savefig(out_dir / "scores.png", dpi=110)
        plt.close(fig)
        figs.append(("scores.png", "Score distribution per day"))
    rates = summary["pass_rate"]
    if rates:
        vals = [100 * rates[k] for k in rates]
        figs.append(_bar_chart(
            out_dir / "pass_rate.png", "Pass rate per graded cell", list(rates), vals,
            xlabel="pass rate (% of graded submissions with full points)",
            colors=plt.get_cmap("viridis")([v / 100 * 0.8 + 0.1 for v in vals]),
            width=8, row_height=0.32, xlim=(0, 100)))
    top = summary["frequent"][:10]
    if top:
        figs.append(_bar_chart(
            out_dir / "diagnoses.png", "Most frequent diagnoses",
            [f"{x['example'][:110]} ({x['grade_id']})" for x in top],
            [100 * x["share"] for x in top],
            xlabel="share of the day's graded submissions (%)",
            colors=plt.get_cmap("cividis")(0.6), width=9, row_height=0.45))
    return figs


def _similarity_href(results_dir: Path, out_dir: Path) -> str:
    """The relative link to ``<grading>/similarity/similarity.html`` (written by ``python -m
    autograder similarity --output <grading>``) when it exists, else ``""``."""
    page = Path(results_dir).parent / "similarity" / "similarity.html"
    if not page.is_file():
        return ""
    return Path(os.path.relpath(page.resolve(), Path(out_dir).resolve())).as_posix()


def write_report(results_dir: Path, out_dir: Path, root: Path | None = None) -> Path:
    """Write ``out_dir/report.html`` (+ PNGs and summary.json); returns the HTML path.
    ``root`` (the course) gives each day its title."""
    from autograder.core.course import day_title
    from autograder.core.pages import render

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = load_results(results_dir)
    summary = summarize(results)
    figs = _figures(summary, out_dir)
    titles = {}
    for d in summary["days"]:
        try:
            titles[d] = day_title(root, d) if root is not None else d
        except (OSError, ValueError, AttributeError):
            titles[d] = d
    shown = [s for s in STATUSES if any(summary["status"][d].get(s) for d in summary["days"])]
    rows = [{"day": titles[d], "counts": [summary["status"][d].get(s, 0) for s in shown],
             "blank": summary["blank"].get(d, 0)} for d in summary["days"]]
    frequent = [{**x, "day": titles.get(x["day"], x["day"]), "pct": f"{100 * x['share']:.0f}"}
                for x in summary["frequent"][:25]]
    page = render("report.html.j2", n=summary["n"], source=str(results_dir),
                  similarity=_similarity_href(results_dir, out_dir), statuses=shown,
                  rows=rows, figures=figs, frequent=frequent)
    target = out_dir / "report.html"
    _atomic_write_text(target, page)
    _atomic_write_text(out_dir / "summary.json", json.dumps(
        {k: v for k, v in summary.items() if k != "status"} |
        {"status": {d: dict(c) for d, c in summary["status"].items()}}, indent=1))
    return target
