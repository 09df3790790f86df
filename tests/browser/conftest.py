"""The browser tests' fixture: the path of Chromium, or a skip that says what to install."""

from __future__ import annotations

import pytest
from chromium import chromium


@pytest.fixture(scope="module")
def browser_path() -> str:
    pytest.importorskip("playwright.sync_api", reason="the `playwright` Python package is not "
                        "installed (pip install playwright; it drives Debian's chromium)")
    path = chromium()
    if path is None:
        pytest.skip("Chromium is not installed (apt-get install chromium chromium-driver); "
                    "set CHROMIUM to its path if it lives elsewhere")
    return path
