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

import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import lab_notebook
import pytest
from chromium import CHROMIUM_FLAGS, artifacts, free_port

ROOT = Path(__file__).resolve().parents[2]
EXPLORERS = ["scaling", "attention", "positional", "sampling"]





@pytest.fixture(scope="module")
def lab(tmp_path_factory, browser_path):
    """A JupyterLab server on 127.0.0.1 serving a folder with the test notebook."""
    work = tmp_path_factory.mktemp("lab")
    notebook = lab_notebook.build(ROOT, work / "course")
    port, token = free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "NBGRADER_EXECUTION", "COURSE_PROFILE", "JPY_SESSION_NAME")}
    bindir = str(Path(sys.executable).parent)
    env.update(COURSE_WIDGETS="interactive", OMP_NUM_THREADS="1",
               JUPYTER_CONFIG_PATH=str(ROOT / "autograder" / "selfcheck" / "lab"),
               PATH=bindir + os.pathsep + env.get("PATH", ""),
               JUPYTER_RUNTIME_DIR=str(work / "runtime"), JUPYTER_CONFIG_DIR=str(work / "config"),
               JUPYTERLAB_WORKSPACES_DIR=str(work / "workspaces"), HOME=str(work / "home"))
    (work / "home").mkdir()
    # No "Jupyter news" pop-up or update check: nothing may cover the widgets (or go online).
    settings = work / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}', encoding="utf-8")
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
           f"--port={port}", f"--ServerApp.token={token}", "--ServerApp.password=",
           f"--ServerApp.root_dir={work / 'course'}", "--LabApp.expose_app_in_browser=True",
           "--ServerApp.port_retries=0", f"--LabApp.user_settings_dir={work / 'settings'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:   # CI containers run as root
        cmd.append("--allow-root")
    log = open(work / "jupyter.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("JupyterLab did not start:\n"
                                + (work / "jupyter.log").read_text(errors="replace")[-3000:])
                time.sleep(0.3)
        yield {"base": base, "token": token, "notebook": notebook, "root": work / "course",
               "log": work / "jupyter.log"}
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()



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
