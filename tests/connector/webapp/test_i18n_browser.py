"""Every page a person uses, in headless Chromium, in English, simplified Chinese and Japanese:
real store and connector processes. Japanese comes from the browser's language (Accept-Language),
Chinese from the switch on the sign-in page (its cookie then beats the browser's English).

Each page: ``<html lang>`` is the locale, no English message of the catalog is left in the
visible text (memory content, titles and ids are data and stay as written), dates read in the
locale with the exact instant in ``<time datetime>``, and the checks of every app page (no CSP
violation, no console error, axe-core finds nothing serious)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from babel.messages.pofile import read_po

from connector.i18n import CATALOG_DIRS, catalog_path
from tests.connector.oauth import live
from tests.support.tools import needs_tool

from ..conftest import RunningStore, brains_of
from ..review_support import flag_pairs_at_store
from .test_webapp_browser import AXE, CHROMIUM, CHROMIUM_ARGS, CSP_WATCH, Checks, _write_through_mcp

pytestmark = [
    pytest.mark.timeout(300),
    needs_tool(shutil.which(CHROMIUM) is not None, "Debian chromium is not installed"),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]

PLACEHOLDER = re.compile(r"%\(\w+\)[sd]|%%|<[^>]+>|&\w+;")
# How each locale writes an instant (babel): the readable text of a <time>.
DATES = {
    "en": re.compile(r"^\d{1,2} [A-Z][a-z]{2} \d{4}, \d\d:\d\d UTC$"),
    "zh-Hans": re.compile(r"^\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d UTC$"),
    "ja": re.compile(r"^\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d UTC$"),
}


def english_fragments(locale: str) -> list[str]:
    """The English pieces of the catalog's messages (between placeholders and markup) that a
    page in ``locale`` must not show: words a translation keeps (JSON, Markdown) are left out."""
    with catalog_path(locale).open("rb") as source:
        catalog = read_po(source)
    kept = " ".join(" ".join(m.string) if isinstance(m.string, (list, tuple)) else m.string for m in catalog if m.id)
    fragments: set[str] = set()
    for message in catalog:
        for msgid in ([message.id] if isinstance(message.id, str) else list(message.id or ())):
            for piece in PLACEHOLDER.split(msgid):
                piece = piece.strip(" .,:;()“”\"'")
                if len(piece) >= 4 and re.search(r"[A-Za-z]{3}", piece) and piece not in kept:
                    fragments.add(piece)
    return sorted(fragments, key=len, reverse=True)


class Visit:
    """The checks of one language on each page."""

    def __init__(self, page: Any, checks: Checks, locale: str, data: list[str]) -> None:
        self.page, self.checks, self.locale, self.data = page, checks, locale, data
        self.fragments = english_fragments(locale) if locale in CATALOG_DIRS else []
        self.seen: list[str] = []

    def check(self, name: str, status: int = 200) -> str:
        page = self.page
        page.wait_for_load_state("load")
        assert page.evaluate("document.documentElement.lang") == self.locale, name
        text = page.inner_text("body") + "\n" + page.title()
        if self.fragments:
            # Data (memory titles and content, ids, the app's own name for itself) is taken out first.
            visible = text
            for value in self.data:
                visible = visible.replace(value, " ")
            left = [piece for piece in self.fragments if re.search(rf"(?<![A-Za-z]){re.escape(piece)}(?![A-Za-z])", visible)]
            assert left == [], (self.locale, name, left[:8])
        for instant, readable in page.eval_on_selector_all(
                "time", "els => els.map(e => [e.getAttribute('datetime'), e.textContent])"):
            assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", instant), (name, instant)
            assert DATES[self.locale].match(readable), (self.locale, name, readable)
        if status >= 400:  # the browser logs the page's own status; nothing else may be logged
            expected = f"the server responded with a status of {status}"
            self.checks.console_errors[:] = [error for error in self.checks.console_errors if expected not in error]
        self.checks.page_ok(f"{self.locale}-{name}")
        self.seen.append(name)
        return text


def _register_client(base: str) -> str:
    answer = httpx.post(f"{base}/register", json={"client_name": "Browser test app",
                                                  "redirect_uris": ["http://127.0.0.1:9/cb"],
                                                  "token_endpoint_auth_method": "none"}, timeout=30)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["client_id"])


def _export_file(tmp_path: Path) -> Path:
    path = tmp_path / "import.json"
    path.write_text(json.dumps({"format": "brain-store/memories", "version": 1, "memories": [
        {"title": "Bike shop hours", "path": "observations/bike-shop-hours.md", "content": "The bike shop closes at six on Saturdays.", "type": "observation",
         "tags": ["bike"]},
        # The same content again: listed in the preview as already held, not written twice.
        {"title": "Bike shop (copy)", "path": "observations/", "content": "The bike shop closes at six on Saturdays.",
         "type": "observation"},
    ]}), encoding="utf-8")
    return path


def test_every_page_in_three_languages(store: RunningStore, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    alice = store.add_user("alice")
    shots = tmp_path / "shots"
    shots.mkdir()
    with live.running_connector(tmp_path, store.url, state_dir=tmp_path / "state",
                                extra_env={"CONNECTOR_REPULL_TTL_MS": "1"}) as connector:
        base = connector.base_url
        ids = asyncio.run(_write_through_mcp(base + "/mcp", alice.token))
        brain_id = brains_of(store.url, alice.token)[0]["id"]
        flag_pairs_at_store(store.url, alice.token, brain_id, [
            ("The dentist is on Monday at 9.", "The dentist moved to Tuesday at 10.", "update")])
        client_id = _register_client(base)
        authorize = (f"{base}/authorize?response_type=code&client_id={client_id}"
                     f"&redirect_uri={quote('http://127.0.0.1:9/cb', safe='')}&code_challenge="
                     f"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256&state=s1"
                     f"&resource={quote(base + '/mcp', safe='')}")
        upload = _export_file(tmp_path)
        # What pages show as data: memory titles and content, the names the store and apps chose.
        data = ["Spare house key", "blue flowerpot", "Drain the garden tap", "Browser test app", "Bike shop hours", "The bike shop closes at six on Saturdays.",
                "The dentist is on Monday at 9.", "The dentist moved to Tuesday at 10.", "other device",
                "The spare house key is under the", "by the back door.",
                "A forum post says the garden tap must be drained before the first frost.", "Browser test agent",
                "observation", "learning", "external", "house", "garden", "keys", "bike",
                "written by"]  # the source a memory records: "brain-connector, written by <agent>"

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                for locale, browser_language in (("en", "en-US"), ("ja", "ja-JP"), ("zh-Hans", "en-US")):
                    context = browser.new_context(viewport={"width": 1024, "height": 800}, locale=browser_language)
                    context.add_init_script(CSP_WATCH)
                    page = context.new_page()
                    visit = Visit(page, Checks(page, shots), locale, data)

                    page.goto(base + "/app")
                    page.wait_for_url(base + "/app/signin")
                    if locale == "zh-Hans":
                        # The switch: a visible link on the sign-in page, its choice kept in a cookie.
                        page.get_by_role("navigation").get_by_role("link", name="简体中文").click()
                        page.wait_for_url("**/app/signin?lang=zh-Hans")
                    visit.check("signin")
                    page.locator("#token").fill(alice.token)
                    page.locator("form.stack button.primary").click()
                    page.wait_for_url(base + "/app")
                    visit.check("home")

                    page.goto(f"{base}/app/memory/{ids['plain']}")
                    text = visit.check("memory")
                    assert "The spare house key is under the" in text  # memory content is never translated
                    page.goto(f"{base}/app/memory/{ids['plain']}/edit")
                    visit.check("edit")
                    page.goto(f"{base}/app/new")
                    visit.check("new")
                    page.goto(f"{base}/app/search?query=spare+key&mode=hybrid")
                    visit.check("search")
                    page.goto(f"{base}/app/search?query=saxophone+lessons&mode=hybrid")
                    visit.check("search-nothing-matches")
                    page.goto(f"{base}/app/review")
                    assert page.locator("ol.review > li").count() == 1
                    visit.check("review")
                    page.goto(f"{base}/app/mental")
                    visit.check("mental-models")
                    page.goto(f"{base}/app/archive")
                    visit.check("archive")
                    page.goto(f"{base}/app/history")
                    visit.check("history")
                    page.locator("table.snapshots td a").first.click()
                    page.wait_for_url("**/app/history/diff?version=**")
                    visit.check("history-diff")
                    page.goto(f"{base}/app/transfer")
                    visit.check("transfer")
                    page.locator("#import-file").set_input_files(str(upload))
                    page.locator("form[enctype] button").click()
                    page.wait_for_url("**/app/import")
                    visit.check("import-preview")
                    page.goto(f"{base}/app/memory/mem_20990101_000000_zzzzzz")
                    visit.check("error", 404)
                    page.goto(authorize)
                    visit.check("oauth-consent")
                    if locale == "zh-Hans":
                        # The choice held across the OAuth page and back in the app, whatever the browser asks.
                        cookie = next(c for c in context.cookies() if c["name"] == "brain_lang")
                        assert cookie["value"] == "zh-Hans" and cookie["sameSite"] == "Lax" and cookie["path"] == "/"
                    context.close()
            finally:
                browser.close()
