"""End to end in a real browser: JupyterLab on loopback, headless Chromium driven by Playwright.

The test starts JupyterLab (this interpreter's, so the course is installed) on 127.0.0.1 with a
random token, opens the Day 2 notebook (answers filled in, explorer cells appended; see
lab_notebook.py), runs all cells through JupyterLab's own "Run All" command, and checks that:

- every cell ran without an error output;
- all four explorers render as widgets, and moving the scaling explorer's d_k slider with the
  keyboard (as a user would) redraws its figure;
- the notebook toolbar has no "Validate": the lab runs with `make lab`'s Jupyter config
  (``autograder/selfcheck/lab``), where nbgrader's extension is off (its Validate cannot run
  the hidden tests and said "Success" of wrong notebooks).

Screenshots of each explorer go to ``$BROWSER_ARTIFACTS_DIR`` (default ``build/browser-artifacts``;
``tests/artifacts/`` holds a committed set). The browser is Debian's ``chromium`` package
(``/usr/bin/chromium``, or ``$CHROMIUM``); the test never downloads a browser. It is skipped, with
the reason, only when Chromium or the ``playwright`` package is missing.
"""

from __future__ import annotations

import time
from pathlib import Path

import lab_notebook
import pytest
from chromium import CHROMIUM_FLAGS, artifacts, jupyter_lab

ROOT = Path(__file__).resolve().parents[2]
EXPLORERS = ["scaling", "attention", "positional", "sampling"]





@pytest.fixture(scope="module")
def lab(tmp_path_factory, browser_path):
    """A JupyterLab server on 127.0.0.1 serving a folder with the test notebook."""
    work = tmp_path_factory.mktemp("lab")
    notebook = lab_notebook.build(ROOT, work / "course")
    with jupyter_lab(work, work / "course", COURSE_WIDGETS="interactive") as lab:
        yield {**lab, "notebook": notebook, "root": work / "course"}


KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle';
}"""

ALL_RAN = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session.kernel;
  const cells = w.content.widgets.filter(c => c.model.type === 'code');
  return k.status === 'idle' && cells.every(c => c.model.executionCount !== null);
}"""

ERRORS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const out = [];
  for (const c of w.content.widgets) {
    if (c.model.type !== 'code') continue;
    for (const o of c.model.outputs.toJSON()) {
      if (o.output_type === 'error') out.push(c.model.id + ': ' + o.ename + ': ' + o.evalue);
    }
  }
  return out;
}"""


def test_notebook_runs_and_explorers_react_in_chromium(lab, browser_path):
    """In a real browser, do all cells run, do the four explorers render, does a slider
    redraw its figure, and is there no nbgrader Validate button on the toolbar?"""
    from playwright.sync_api import expect, sync_playwright

    t0 = time.monotonic()
    out = artifacts()
    rel = lab["notebook"].relative_to(lab["root"]).as_posix()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1300})
            page.set_default_timeout(60_000)
            page.goto(f"{lab['base']}/lab/tree/{rel}?token={lab['token']}")
            page.wait_for_selector(".jp-NotebookPanel .jp-Notebook")
            page.wait_for_function(KERNEL_IDLE, timeout=60_000)

            # No nbgrader "Validate" on the toolbar (make lab's config turns nbgrader off).
            toolbar = page.locator(".jp-NotebookPanel-toolbar")
            toolbar.get_by_text("Python 3").first.wait_for(state="visible", timeout=20_000)
            assert toolbar.get_by_text("Validate").count() == 0
            toolbar.screenshot(path=str(out / "jupyterlab_toolbar.png"))

            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(ALL_RAN, timeout=90_000, polling=500)
            errors = page.evaluate(ERRORS)
            assert errors == [], f"cells raised errors in the browser: {errors}"

            # The day's own explorers come first; the test's four are appended after them.
            import nbformat

            own = sum("_explorer(" in c.source
                      for c in nbformat.read(str(lab["notebook"]), as_version=4).cells
                      if c.cell_type == "code" and not c.id.startswith("browser-"))
            explorers = page.locator(".course-explorer")
            explorers.nth(own + len(EXPLORERS) - 1).wait_for(state="attached", timeout=30_000)
            assert explorers.count() == own + len(EXPLORERS)
            for i, name in enumerate(EXPLORERS):
                box = explorers.nth(own + i)
                box.scroll_into_view_if_needed()
                img = box.locator("img").first
                img.wait_for(state="visible")
                assert img.evaluate("i => i.naturalWidth > 100"), f"{name}: no figure drawn"
                box.screenshot(path=str(out / f"{name}_explorer.png"))

            # Move the d_k slider one step with the keyboard; the figure must change.
            scaling = explorers.nth(own)
            scaling.scroll_into_view_if_needed()
            img = scaling.locator("img").first
            before = img.get_attribute("src")
            caption = scaling.locator(".course-explorer-caption").first
            expect(caption).to_contain_text("d_k = 64:")
            handle = scaling.locator(".noUi-handle").first
            handle.focus()
            for _ in range(3):
                handle.press("ArrowRight")
            page.wait_for_function("([el, src]) => el.getAttribute('src') !== src",
                                   arg=[img.element_handle(), before], timeout=20_000)
            try:   # the caption is re-rendered: a locator, not an element handle
                expect(caption).to_contain_text("d_k = 512:", timeout=10_000)
            finally:
                scaling.screenshot(path=str(out / "scaling_explorer_after_slider.png"))
        finally:
            browser.close()
    seconds = time.monotonic() - t0
    (out / "browser_test_seconds.txt").write_text(f"{seconds:.1f}\n", encoding="utf-8")
    print(f"browser test: {seconds:.1f} s; screenshots in {out}")
