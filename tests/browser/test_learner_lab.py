"""The learner's JupyterLab as `make lab` opens it, in a real browser (issue 48's acceptance).

JupyterLab runs with `make lab`'s Jupyter config (``autograder/selfcheck/lab``: nbgrader's
extension off) on a learner folder made by ``python -m autograder workspace`` (what `make lab`
runs first). In Chromium, through JupyterLab's own commands and clicks:

1. Run All on the blank Day 2 notebook and on a wrong Day 12 notebook (heads merged without
   the transpose) reaches the last cell: every code cell ran and the Self-check button shows;
2. no "Validate" button and no nbgrader menu anywhere (Validate cannot run the hidden tests,
   and said "Success" of wrong notebooks);
3. the button on each gives the judged report, with the failing test and its diagnosis;
   the seconds from click to report go to ``learner_selfcheck_seconds.json``;
4. an edit typed into Day 2 and saved survives `make demo`, byte for byte, and shows again
   after a reload.

Screenshots: ``learner_run_all_blank.png``, ``learner_selfcheck_day12.png`` under
``$BROWSER_ARTIFACTS_DIR`` (default ``build/browser-artifacts``; ``tests/artifacts/`` holds a
committed set).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from chromium import CHROMIUM_FLAGS, artifacts, jupyter_lab

ROOT = Path(__file__).resolve().parents[2]
DAY2 = "day02_queries_keys_values"
DAY12 = "day12_causal_attention_tinygpt"
MARK = "# my note, typed in the browser: keep me"

ALL_RAN = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = w.content.widgets.filter(c => c.model.type === 'code');
  return !!k && k.status === 'idle' && cells.every(c => c.model.executionCount !== null);
}"""
KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle';
}"""


def _wrong_day12(path: Path) -> None:
    """The answer key of Day 12 with the heads merged without the transpose."""
    nb = nbformat.read(str(ROOT / "solutions" / DAY12 / f"{DAY12}.ipynb"), as_version=4)
    hit = 0
    for cell in nb.cells:
        if "y = y.transpose(1, 2).contiguous().view(B, N, D)" in cell.source:
            cell.source = cell.source.replace("y = y.transpose(1, 2).contiguous().view(B, N, D)",
                                              "y = y.reshape(B, N, D)")
            hit += 1
    assert hit == 1
    nbformat.write(nb, str(path))


@pytest.fixture(scope="module")
def learner_lab(tmp_path_factory, browser_path):
    work = tmp_path_factory.mktemp("learner")
    mine = work / "notebooks"
    subprocess.run([sys.executable, "-m", "autograder", "workspace", "--dir", str(mine)],
                   cwd=ROOT, check=True, capture_output=True, timeout=120)
    _wrong_day12(mine / DAY12 / f"{DAY12}.ipynb")
    with jupyter_lab(work, mine, TFS_GRADING_CACHE=str(work / "cache")) as lab:
        yield {**lab, "mine": mine}


def _open(page, lab, day: str) -> None:
    page.goto(f"{lab['base']}/lab/tree/{day}/{day}.ipynb?token={lab['token']}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    page.wait_for_function("p => { const w = window.jupyterapp && window.jupyterapp.shell"
                           ".currentWidget; return !!w && !!w.context && w.context.path === p }",
                           arg=f"{day}/{day}.ipynb", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, timeout=90_000)


NOT_RUN = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return [w.context.path, w.content.widgets.map((c, i) => [i, c.model.type,
          c.model.executionCount, c.model.type === 'code' ? c.model.outputs.toJSON()
          .filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue) : []])
          .filter(x => x[1] === 'code' && (x[2] === null || x[3].length))];
}"""


def _run_all_to_the_button(page):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    try:
        page.wait_for_function(ALL_RAN, timeout=180_000, polling=500)
    except PlaywrightTimeout:
        page.screenshot(path=str(artifacts() / "learner_run_all_stopped.png"))
        pytest.fail(f"Run All did not reach the end: {page.evaluate(NOT_RUN)}")
    # The notebook renders only the cells near the view: go to the last one, as a reader does.
    page.evaluate("""async () => {
      const nb = window.jupyterapp.shell.currentWidget.content;
      nb.activeCellIndex = nb.widgets.length - 1;
      await nb.scrollToItem(nb.widgets.length - 1, 'center');
    }""")
    button = page.locator(".jp-NotebookPanel:visible .jupyter-widgets button",
                          has_text="Self-check").last
    button.wait_for(state="visible", timeout=60_000)
    return button


def _report(page, button, expect: str) -> tuple[float, str]:
    time.sleep(8)               # the standby the button started gets ready (as a reader would)
    t0 = time.monotonic()
    button.click()
    report = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output",
                          has_text="Total:").last
    report.wait_for(state="visible", timeout=180_000)
    seconds = time.monotonic() - t0
    text = report.inner_text()
    assert expect in text, text
    return seconds, text


def test_a_learner_runs_checks_and_keeps_their_work(learner_lab, browser_path):
    from playwright.sync_api import sync_playwright

    out = artifacts()
    times: dict[str, float] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(90_000)

            # Day 2, blank: Run All reaches the button; no Validate, no nbgrader menu.
            _open(page, learner_lab, DAY2)
            assert page.locator(".jp-NotebookPanel-toolbar", has_text="Validate").count() == 0
            assert page.get_by_text("Nbgrader", exact=True).count() == 0
            button = _run_all_to_the_button(page)
            button.scroll_into_view_if_needed()
            page.screenshot(path=str(out / "learner_run_all_blank.png"))
            seconds, text = _report(page, button, "Total: 0/8 points")
            times["Day 2 (blank): click to report"] = round(seconds, 1)
            assert "✘ FAIL" in text and "raise NotImplementedError()" in text

            # An edit, saved: `make demo` leaves it as it was.
            first = page.locator(".jp-NotebookPanel:visible .jp-Cell.jp-CodeCell").nth(1)
            first.scroll_into_view_if_needed()
            first.locator(".cm-content").click()
            page.keyboard.press("Control+Home")
            page.keyboard.insert_text(MARK + "\n")
            page.keyboard.press("Escape")
            page.keyboard.press("Control+s")
            page.wait_for_function("() => !document.querySelector('.jp-mod-current.jp-mod-dirty')",
                                   timeout=30_000)
            saved = learner_lab["mine"] / DAY2 / f"{DAY2}.ipynb"
            kept = saved.read_bytes()
            assert MARK.encode() in kept
            t0 = time.monotonic()
            demo = subprocess.run(["make", "demo"], cwd=ROOT, capture_output=True, text=True,
                                  timeout=900)
            times["make demo"] = round(time.monotonic() - t0, 1)
            assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
            assert saved.read_bytes() == kept
            page.reload()
            page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
            page.locator(".jp-NotebookPanel:visible .cm-content", has_text=MARK).first.wait_for(
                state="visible", timeout=60_000)

            # Day 12, wrong (heads merged without the transpose): to the button, then the
            # report names the failing test and the mistake.
            _open(page, learner_lab, DAY12)
            button = _run_all_to_the_button(page)
            seconds, text = _report(page, button, "✘ FAIL")
            times["Day 12 (wrong): click to report"] = round(seconds, 1)
            assert "day12_attention_matches_sdpa" in text and "transpose" in text, text
            page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output",
                         has_text="Total:").last.scroll_into_view_if_needed()
            page.screenshot(path=str(out / "learner_selfcheck_day12.png"))
        finally:
            browser.close()
    (out / "learner_selfcheck_seconds.json").write_text(json.dumps(times, indent=1) + "\n")
    print(json.dumps(times, indent=1))

