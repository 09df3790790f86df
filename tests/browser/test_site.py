"""The course's website (`make site`, site/build.py) in a real browser, offline.

The test builds the site into a temporary folder (npm's MathJax first, with `npm ci`, when
site/node_modules lacks it), serves it with `http.server` on 127.0.0.1, and checks that:

- it has the home page, the 14 days of release/ (as the learner gets them: the notebook files it
  serves are release/'s, byte for byte) and the five docs;
- every internal link resolves: every page reachable from the home page is crawled, every
  same-site href and src is fetched, and every #anchor exists on its target page;
- every page loads in Chromium without a console error or an uncaught exception, and asks for
  nothing outside the site (no CDN: MathJax is served by the site);
- formulas render: MathJax's output (``mjx-container``) replaces the TeX on a day with math;
- the search box finds a Day 14 term ("KV cache").

Screenshots of the home page, Day 12 and one of Day 2's formulas go to
``$BROWSER_ARTIFACTS_DIR`` (default ``build/browser-artifacts``; ``tests/artifacts/`` holds a
committed set). Chromium is Debian's (``/usr/bin/chromium`` or ``$CHROMIUM``), never downloaded.
Skipped, with the reason, only when Chromium, the ``playwright`` package or npm is missing.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
from chromium import CHROMIUM_FLAGS, artifacts

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
DOCS = ["learners", "instructors", "authors", "security", "architecture", "record"]





@pytest.fixture(scope="module")
def site(tmp_path_factory, browser_path) -> Path:
    """The site, built now by site/build.py (what `make site` runs) into a temporary folder."""
    if not (SITE / "node_modules" / "mathjax" / "es5" / "tex-chtml.js").is_file():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed (apt-get install nodejs npm): the site serves "
                        "MathJax from npm's `mathjax` package")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=SITE, check=True,
                       timeout=300)
    out = tmp_path_factory.mktemp("site") / "html"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(SITE / "build.py"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SITE_REPO_URL": ""})
    assert proc.returncode == 0, \
        f"site/build.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    # Sphinx's warnings (a broken cross-reference, a missing figure) fail the build's check.
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert warnings == [], "the site's build warned:\n" + "\n".join(warnings)
    print(f"site build: {time.monotonic() - t0:.1f} s")
    return out


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


class _Links(HTMLParser):
    """The hrefs and srcs of a page, and the ids (and names) its elements carry."""

    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key):
                self.links.append(a[key])


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, "", b""


def _crawl(base: str) -> tuple[list[str], list[str]]:
    """Every page reachable from the home page; the broken links (``page: href (why)``)."""
    pages: dict[str, set[str]] = {}        # page URL -> its ids
    links: list[tuple[str, str]] = []      # (page, absolute href with its fragment)
    queue, seen, broken = [base + "/index.html"], set(), []
    status: dict[str, int] = {}
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        seen.add(url)
        code, ctype, body = _get(url)
        status[url] = code
        if code != 200 or "html" not in ctype:
            continue
        parser = _Links()
        parser.feed(body.decode("utf-8", errors="replace"))
        pages[url] = parser.ids
        for href in parser.links:
            absolute = urllib.parse.urljoin(url, href)
            if not absolute.startswith(base + "/") or href.startswith(("mailto:", "javascript:")):
                continue
            links.append((url, absolute))
            target = urllib.parse.urldefrag(absolute).url
            if target.endswith("/"):
                target += "index.html"
            if target not in seen:
                queue.append(target)
    for page, absolute in links:
        target, fragment = urllib.parse.urldefrag(absolute)
        if target.endswith("/"):
            target += "index.html"
        if status.get(target) != 200:
            broken.append(f"{page}: {absolute} (HTTP {status.get(target)})")
        elif fragment and target in pages and urllib.parse.unquote(fragment) not in pages[target]:
            broken.append(f"{page}: {absolute} (no #{fragment} on the page)")
    return sorted(pages), broken


def test_site_pages_links_math_and_search_in_chromium(site, server, browser_path):
    """Does the site hold the 14 days and the docs, does every link resolve, does every page load
    without console errors and without the network, is the math rendered, does search work?"""
    from playwright.sync_api import sync_playwright

    t0 = time.monotonic()
    out = artifacts()

    # The days are release/'s notebooks, as the learner gets them.
    days = sorted(p for p in (ROOT / "release").glob("day*/day*.ipynb") if p.parent.name == p.stem)
    assert len(days) == 14
    for nb in days:
        assert (site / "days" / f"{nb.stem}.html").is_file(), f"no page for {nb.stem}"
        served = site / nb.relative_to(ROOT)
        assert hashlib.sha256(served.read_bytes()).digest() == \
            hashlib.sha256(nb.read_bytes()).digest(), f"{served} is not release/'s notebook"
        text = (site / "days" / f"{nb.stem}.html").read_text(encoding="utf-8")
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, nb.stem
    for doc in DOCS:
        assert (site / "docs" / f"{doc}.html").is_file(), f"no page for docs/{doc}.md"

    pages, broken = _crawl(server)
    assert broken == [], "broken internal links:\n" + "\n".join(broken)
    expected = {f"{server}/index.html", *(f"{server}/days/{nb.stem}.html" for nb in days),
                *(f"{server}/docs/{d}.html" for d in DOCS)}
    assert expected <= set(pages), f"not reachable from the home page: {expected - set(pages)}"

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(30_000)
            errors: list[str] = []
            outside: list[str] = []
            page.on("console", lambda m: errors.append(f"{page.url}: console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"{page.url}: uncaught: {e}"))
            # A request cut short because the test moved to the next page (the favicon,
            # mostly) is not a missing file: a missing file is a 404, which the crawl finds.
            page.on("requestfailed", lambda r: None if r.failure == "net::ERR_ABORTED"
                    else errors.append(f"{page.url}: failed: {r.url} ({r.failure})"))
            page.on("request", lambda r: None if r.url.startswith((server, "data:", "blob:"))
                    else outside.append(r.url))

            for url in pages:
                page.goto(url, wait_until="load")
                if page.locator("span.math, div.math").count():
                    page.wait_for_selector("mjx-container", state="attached")
            assert errors == [], "errors in the browser:\n" + "\n".join(errors)
            assert outside == [], f"the site asked for something outside itself: {outside}"

            # Math: MathJax (served by the site) turns the TeX into mjx-container elements.
            page.goto(f"{server}/days/day02_queries_keys_values.html")
            page.wait_for_selector("mjx-container", state="attached")
            assert page.locator("mjx-container").count() >= 5
            assert page.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"
            assert "\\sqrt" not in page.locator("article").inner_text(), "unrendered TeX"
            formula = page.locator("div.math mjx-container").first
            formula.scroll_into_view_if_needed()
            assert formula.bounding_box()["width"] > 50, "the displayed formula has no width"
            formula.locator("xpath=ancestor::div[contains(@class,'math')][1]").screenshot(
                path=str(out / "site_day02_formula.png"))

            # The home page, with its search box; screenshot before searching.
            page.goto(f"{server}/index.html")
            page.locator("article h1").first.wait_for()
            assert "Transformers from Scratch" in page.locator("article h1").first.inner_text()
            for i in range(2):
                img = page.locator("figure img").nth(i)
                assert img.evaluate("i => i.complete && i.naturalWidth > 300"), "figure missing"
            page.screenshot(path=str(out / "site_home.png"))

            # Search: the theme's search box, as a reader types in it.
            page.keyboard.press("Control+k")
            box = page.locator("input[name='q']:visible").first
            box.fill("KV cache")
            box.press("Enter")
            page.wait_for_url("**/search.html?q=*")
            page.locator("#search-results p.search-summary").filter(
                has_text="Search finished").wait_for(timeout=30_000)
            hits = page.locator("#search-results ul.search li a")
            hrefs = [hits.nth(i).get_attribute("href") for i in range(hits.count())]
            assert any("day14_modern_transformer" in h for h in hrefs), \
                f"searching for 'KV cache' did not find Day 14: {hrefs}"

            # Day 12 as the learner gets it, with its link to the notebook.
            page.goto(f"{server}/days/day12_causal_attention_tinygpt.html")
            page.wait_for_selector("mjx-container", state="attached")
            link = page.locator("a.site-notebook-link")
            assert link.get_attribute("href").endswith(
                "release/day12_causal_attention_tinygpt/day12_causal_attention_tinygpt.ipynb")
            # Down to the day's first table, at most 1000 px: its last column is Chinese, and a
            # Chromium without a CJK font (CI's) draws boxes there.
            bottom = 1000
            if page.locator("article table").count():
                bottom = min(bottom, int(page.locator("article table").first.bounding_box()["y"]))
            page.screenshot(path=str(out / "site_day12.png"),
                            clip={"x": 0, "y": 0, "width": 1280, "height": max(bottom - 8, 400)})
            assert errors == [], "errors in the browser:\n" + "\n".join(errors)
        finally:
            browser.close()
    print(f"site test (browser part): {time.monotonic() - t0:.1f} s; screenshots in {out}")
