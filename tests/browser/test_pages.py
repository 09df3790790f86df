"""The instructor's pages in a real browser: feedback, class report and similarity.

Each page is written from a small class (Day 3 results made here; the notebooks are the
course's own answer key and release notebook, so nothing is graded) and opened in Chromium
from disk, as an instructor opens it. The test checks that each page loads without a console
error, that the report's figures load under the pages' Content-Security-Policy, and that the
feedback page's longest output line wraps inside the page (no scrolling sideways); and it takes
screenshots (``$BROWSER_ARTIFACTS_DIR``, default ``build/browser-artifacts``; a committed set is
in ``tests/artifacts/``: ``page_feedback.png``, ``page_report.png``, ``page_similarity.png``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
from chromium import CHROMIUM_FLAGS, artifacts

from autograder.cohort.similarity import run_similarity
from autograder.grading.feedback import write_feedback
from autograder.grading.pipeline import Result, TestResult, graded_cells
from autograder.grading.report import write_report

ROOT = Path(__file__).resolve().parents[2]
DAY = "day03_self_attention"


def _class(tmp: Path) -> Path:
    """results/ for four students of Day 3 (one full, one wrong mask, one blank, one
    missing), with the notebook beside each result, and their submissions/."""
    key = nbformat.read(str(ROOT / "solutions" / DAY / f"{DAY}.ipynb"), as_version=4)
    blank = nbformat.read(str(ROOT / "release" / DAY / f"{DAY}.ipynb"), as_version=4)
    cells = graded_cells(key)
    long_line = "attention weights per row: " + ", ".join(f"{0.1 * i:.4f}" for i in range(60))
    for cell in key.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            cell.outputs = [nbformat.v4.new_output("stream", text=long_line + "\n")]
            break
    wrong = ("CheckFailure: attn_weights differ from the expected values (rtol=1e-05): max "
             "abs difference 0.412 at index (0, 2, 3).\nHint: the mask was added after the "
             "softmax; mask the scores before it")
    plans = {"alice": (key, {}), "bob": (key, {"day03_mask": wrong}),
             "carol": (blank, {g: "NotImplementedError: " for g, _ in cells})}
    results = tmp / "grading" / "results"
    for student, (nb, failed) in plans.items():
        tests = [TestResult(g, 0.0 if g in failed else p, p, failed.get(g, ""))
                 for g, p in cells]
        r = Result(student, DAY, "graded", sum(t.points for t in tests),
                   sum(t.max_points for t in tests), tests)
        (results / student).mkdir(parents=True)
        (results / student / f"{DAY}.json").write_text(json.dumps(r.to_json()))
        nbformat.write(nb, str(results / student / f"{DAY}.ipynb"))
        (tmp / "subs" / student / DAY).mkdir(parents=True)
        shutil.copy(results / student / f"{DAY}.ipynb", tmp / "subs" / student / DAY)
    (results / "dave").mkdir()
    missing = Result("dave", DAY, "missing", 0.0, sum(p for _, p in cells))
    (results / "dave" / f"{DAY}.json").write_text(json.dumps(missing.to_json()))
    return tmp / "grading"


def test_the_instructors_pages_in_a_browser(tmp_path, browser_path):
    """Do the feedback, report and similarity pages load cleanly, show their figures and
    wrap long outputs?"""
    from playwright.sync_api import sync_playwright

    grading = _class(tmp_path)
    run_similarity(ROOT, tmp_path / "subs", [DAY], grading / "similarity", threshold=0.5)
    feedback = write_feedback(grading / "results", grading / "feedback", root=ROOT,
                              students=["bob"])[0]
    report = write_report(grading / "results", grading / "report", ROOT)
    similarity = grading / "similarity" / "similarity.html"
    out = artifacts()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_context(viewport={"width": 1100, "height": 900}).new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            for name, path in (("feedback", feedback), ("report", report),
                               ("similarity", similarity)):
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                page.screenshot(path=str(out / f"page_{name}.png"), full_page=True)
                if name == "feedback":
                    text = page.locator("body").inner_text()
                    assert "Points per exercise" in text and "Day 3: " in text
                    assert "mask the scores before it" in text
                    assert page.evaluate("document.documentElement.scrollWidth <= "
                                         "document.documentElement.clientWidth")
                if name == "report":
                    sizes = page.evaluate("[...document.images].map(i => i.naturalWidth)")
                    assert len(sizes) == 3 and min(sizes) > 0, sizes
                    text = page.locator("body").inner_text()
                    assert "not started" in text and "mask the scores before it" in text
                if name == "similarity":
                    assert "Day 3: " in page.locator("h2").first.inner_text()
            assert not errors, errors
        finally:
            browser.close()
