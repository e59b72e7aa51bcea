"""Headless Debian Chromium driven by Playwright, as the browser tests use it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.tools import needs_tool

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def needs_chromium() -> pytest.MarkDecorator:
    """The mark for a test (or ``pytestmark``) that drives Chromium."""
    return needs_tool(shutil.which(CHROMIUM) is not None, "Debian chromium is not installed")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``), closed on the way out."""
    # Imported here: modules that only collect (or skip without Chromium) do not load Playwright.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def screenshots(tmp_path: Path) -> Path:
    """Where the pages' screenshots go (WEBAPP_SCREENSHOTS, else the test's own directory)."""
    shots = Path(os.environ.get("WEBAPP_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    return shots
