"""A class on the course's JupyterHub, end to end, in a real browser (Chromium via Playwright).

``python -m autograder classroom start`` runs the hub (as root: each user's server runs as
that user's own system account) with two students; then:

1. the instructor releases Day 2 (``classroom release 2``: nbgrader's ``release_assignment``);
2. both students log in through the hub's login page, open nbgrader's Assignment List in
   their lab and click "Fetch";
3. student1 types the answer key's code (from ``solutions/``) into the answer cells and saves,
   finds no nbgrader Validate button, runs the Self-check button's cell and clicks it: the
   hub's check (``autograder.classroom.hubcheck``) answers 8/8; both click "Submit";
4. the instructor collects, grades (the course's sandboxed ``grade``) and returns feedback
   (``classroom collect|grade|return 2``);
5. both students click "Fetch Feedback" and open their feedback page: 8 / 8 for student1,
   0 / 8 with the diagnoses for student2;
6. ``classroom stop`` leaves no process of the classroom behind, and the checkout's modes
   (its root and top-level entries) exactly as they were before ``classroom start``.

Screenshots and each step's seconds go where the JupyterLab test puts its own
(``$BROWSER_ARTIFACTS_DIR``, default ``build/browser-artifacts``; a committed set is in
``tests/artifacts/``). A second test stops a hub with Ctrl-C (SIGINT) and checks the same.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import nbformat
import pytest
from chromium import CHROMIUM_FLAGS, artifacts, free_port

ROOT = Path(__file__).resolve().parents[2]
DAY = "day02_queries_keys_values"
STUDENTS = ["student1", "student2"]


def _need_root_and_proxy() -> None:
    if os.geteuid() != 0:
        pytest.skip("the classroom hub runs as root (one system account per user): run the "
                    "test as root, as CI does")
    if shutil.which("configurable-http-proxy") is None:
        pytest.skip("configurable-http-proxy is not installed (npm install -g "
                    "configurable-http-proxy; Node.js from apt-get install nodejs npm)")


def _cli(*args: str, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, "-m", "autograder", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


MODES_BEFORE: dict[Path, dict[str, int]] = {}


def _modes() -> dict[str, int]:
    """``stat`` mode of the checkout's root and of each of its top-level entries."""
    return {p.name if p != ROOT else ".": p.lstat().st_mode
            for p in [ROOT, *sorted(ROOT.iterdir())]}


def _start(folder: Path, students: int = 2) -> tuple[subprocess.Popen, str, float]:
    """Start ``classroom start`` and wait for its "hub is up" line: (process, url, seconds)."""
    MODES_BEFORE[folder] = _modes()
    port = free_port()
    log = folder.parent / f"{folder.name}.out"
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "autograder", "classroom", "start",
                                 "--dir", str(folder), "--students", str(students),
                                 "--ip", "127.0.0.1", "--port", str(port)],
                                stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
    while "hub is up" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() - t0 > 120:
            proc.kill()
            pytest.fail("classroom start failed:\n" + log.read_text(errors="replace")[-4000:])
        time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}", time.monotonic() - t0


def _stop_and_check(proc: subprocess.Popen, folder: Path, how: str) -> None:
    from autograder.classroom import leftovers

    if how == "sigint":
        proc.send_signal(signal.SIGINT)
    else:
        _cli("classroom", "stop", "--dir", str(folder))
    proc.wait(timeout=60)
    assert leftovers(folder) == [], f"left running after {how}: {leftovers(folder)}"
    after = _modes()
    assert after == MODES_BEFORE[folder], "the checkout's modes changed: " + str(
        {k: (oct(v), oct(after.get(k, 0))) for k, v in MODES_BEFORE[folder].items()
         if after.get(k) != v})


@pytest.fixture()
def folder():
    # Under /tmp, not pytest's 0700 tmp_path: the students' accounts must reach the exchange.
    path = Path(tempfile.mkdtemp(prefix="tfs-classroom-test-", dir="/tmp"))
    yield path
    from autograder.classroom import sweep

    sweep(path)
    shutil.rmtree(path, ignore_errors=True)
    (path.parent / f"{path.name}.out").unlink(missing_ok=True)


def _solution_cells() -> dict[int, str]:
    """Index in the released notebook -> the answer key's source, for every answer cell."""
    release = nbformat.read(str(ROOT / "release" / DAY / f"{DAY}.ipynb"), as_version=4)
    answers = nbformat.read(str(ROOT / "solutions" / DAY / f"{DAY}.ipynb"), as_version=4)
    solved = {c.id: c.source for c in answers.cells
              if c.get("metadata", {}).get("nbgrader", {}).get("solution")
              and c.cell_type == "code"}
    return {i: solved[c.id] for i, c in enumerate(release.cells) if c.id in solved}


def _login(browser, base: str, name: str, password: str):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(90_000)
    page.goto(f"{base}/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_url(f"**/user/{name}/lab**", timeout=120_000)
    page.wait_for_selector(".jp-LabShell")
    return page


def _assignment_list(page):
    page.get_by_text("Nbgrader", exact=True).first.click()
    page.get_by_text("Assignment List", exact=True).first.click()
    panel = page.locator("#released_assignments_list")
    panel.wait_for(state="visible")
    return panel


def _click_in_list(page, list_id: str, label: str, timeout: float = 60_000) -> None:
    button = page.locator(f"#{list_id} button", has_text=label).first
    button.wait_for(state="visible", timeout=timeout)
    button.click()


def test_a_class_in_the_browser(folder, browser_path):  # noqa: F811
    """Release, fetch, fill in, submit, collect, grade, return, fetch feedback: do the students
    see 8/8 and 0/8 with the diagnoses, and is nothing left running after stop?"""
    _need_root_and_proxy()
    from playwright.sync_api import sync_playwright

    out = artifacts()
    times: dict[str, float] = {}

    def step(name: str, t0: float) -> None:
        times[name] = round(time.monotonic() - t0, 1)

    proc, base, up = _start(folder)
    times["hub up (classroom start)"] = round(up, 1)
    try:
        accounts = json.loads((folder / "accounts.json").read_text())
        t = time.monotonic()
        _cli("classroom", "release", "2", "--dir", str(folder))
        step("instructor: release Day 2", t)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
            try:
                pages = {}
                for name in STUDENTS:
                    t = time.monotonic()
                    pages[name] = page = _login(browser, base, name, accounts[name])
                    step(f"{name}: log in, server started", t)
                    t = time.monotonic()
                    _assignment_list(page)
                    _click_in_list(page, "released_assignments_list", "Fetch")
                    page.locator("#fetched_assignments_list button", has_text="Submit"
                                 ).first.wait_for(state="visible")
                    step(f"{name}: fetch Day 2", t)

                # student1 types the answer key into the answer cells, then saves.
                t = time.monotonic()
                page = pages["student1"]
                page.goto(f"{base}/user/student1/lab/tree/{DAY}/{DAY}.ipynb")
                page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
                cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
                for index, source in _solution_cells().items():
                    cell = cells.nth(index)
                    cell.scroll_into_view_if_needed()
                    cell.locator(".cm-content").click()
                    page.keyboard.press("Control+a")
                    page.keyboard.insert_text(source)
                page.keyboard.press("Escape")
                page.keyboard.press("Control+s")
                page.wait_for_function("() => !document.querySelector("
                                       "'.jp-mod-current.jp-mod-dirty')", timeout=30_000)
                cells.nth(min(_solution_cells())).scroll_into_view_if_needed()
                page.screenshot(path=str(out / "classroom_student_lab.png"))
                step("student1: fill in the answers and save", t)
                # No nbgrader Validate in the class (it cannot run the hidden tests and said
                # "Success" of wrong notebooks); the Self-check button is judged by the hub.
                assert page.locator(".jp-NotebookPanel-toolbar",
                                    has_text="Validate").count() == 0
                button_cell = cells.nth(len(cells.all()) - 1)
                button_cell.scroll_into_view_if_needed()
                button_cell.click()
                page.keyboard.press("Shift+Enter")
                button = page.locator(".jupyter-widgets button", has_text="Self-check").first
                button.wait_for(state="visible", timeout=120_000)
                t = time.monotonic()
                button.click()
                report = page.locator(".jp-OutputArea-output", has_text="Total: 8/8 points")
                report.first.wait_for(state="visible", timeout=180_000)
                step("student1: Self-check, click to report (judged by the hub)", t)
                assert "all tests pass" in report.first.inner_text()
                report.first.scroll_into_view_if_needed()
                page.screenshot(path=str(out / "classroom_selfcheck.png"))
                saved = json.loads((folder / "home/student1" / DAY / f"{DAY}.ipynb")
                                   .read_text())
                assert "NotImplementedError" not in "".join(
                    "".join(c["source"]) for i, c in enumerate(saved["cells"])
                    if i in _solution_cells())

                for name in STUDENTS:
                    t = time.monotonic()
                    page = pages[name]
                    if name == "student1":
                        _assignment_list(page)
                    _click_in_list(page, "fetched_assignments_list", "Submit")
                    page.locator("#submitted_assignments_list .item_status").first.wait_for(
                        state="visible")
                    if name == "student1":
                        page.screenshot(path=str(out / "classroom_submission.png"))
                    step(f"{name}: submit", t)

                for verb in ("collect", "grade", "return"):
                    t = time.monotonic()
                    _cli("classroom", verb, "2", "--dir", str(folder), "--jobs", "2")
                    step(f"instructor: {verb}", t)
                csv = (folder / "grading" / "grades.csv").read_text()
                assert "student1,8,8,8" in csv and "student2,0,0,8" in csv, csv

                for name, score in (("student1", "8 / 8"), ("student2", "0 / 8")):
                    t = time.monotonic()
                    page = pages[name]
                    page.reload()
                    page.wait_for_selector(".jp-LabShell")
                    _assignment_list(page)
                    _click_in_list(page, "submitted_assignments_list", "Fetch Feedback")
                    page.get_by_text("(view feedback)").first.wait_for(state="visible")
                    html = next((folder / "home" / name / DAY / "feedback").glob("*/*.html"))
                    rel = urllib.parse.quote(html.relative_to(folder / "home" / name)
                                             .as_posix())
                    page.goto(f"{base}/user/{name}/files/{rel}")
                    body = page.locator("body")
                    assert f"score {score}" in body.inner_text()
                    if name == "student2":
                        assert "still raises NotImplementedError" in body.inner_text()
                    page.screenshot(path=str(out / f"classroom_feedback_{name}.png"),
                                    full_page=True)
                    step(f"{name}: fetch and view feedback ({score})", t)
            finally:
                browser.close()
        _cli("report", "--output", str(folder / "grading"))
        assert (folder / "grading" / "report" / "report.html").is_file()
        t = time.monotonic()
        _stop_and_check(proc, folder, "stop")
        step("classroom stop, nothing left running", t)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        (out / "classroom_test_seconds.json").write_text(json.dumps(times, indent=1) + "\n")
        print(json.dumps(times, indent=1))


def test_ctrl_c_leaves_nothing_running(folder):
    """Does Ctrl-C on `classroom start` stop the hub, the proxy and a student's server?"""
    _need_root_and_proxy()
    import http.cookiejar
    import urllib.request

    proc, base, _ = _start(folder, students=1)
    try:
        password = json.loads((folder / "accounts.json").read_text())["student1"]
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        opener.open(f"{base}/hub/login", timeout=10).read()
        xsrf = next(c.value for c in jar if c.name == "_xsrf")
        form = urllib.parse.urlencode({"username": "student1", "password": password,
                                       "_xsrf": xsrf}).encode()
        # Logging in spawns the student's server (as the account student1).
        opener.open(f"{base}/hub/login", data=form, timeout=120).read()
        from autograder.classroom import leftovers
        from autograder.classroom.setup import account_uids

        uids = account_uids(folder)
        running = [p for p, _ in leftovers(folder)]
        assert any(Path(f"/proc/{p}").stat().st_uid in uids for p in running), running
        assert (ROOT / "solutions").stat().st_mode & 0o007 == 0  # closed while it runs
    finally:
        _stop_and_check(proc, folder, "sigint")
