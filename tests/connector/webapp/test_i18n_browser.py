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
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from babel.messages.pofile import read_po

from connector.engine.writes.memorize import CONNECTOR_SOURCE
from connector.i18n import CATALOG_DIRS, catalog_path
from tests.connector.oauth import live
from tests.support.browser import chromium, needs_chromium
from tests.support.tools import needs_tool

from ..conftest import RunningStore, brains_of
from ..review_support import flag_pairs_at_store
from .test_webapp_browser import AXE, CSP_WATCH, Checks, _write_through_mcp

pytestmark = [
    pytest.mark.timeout(300),
    needs_chromium(),
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


def untranslated(text: str, fragments: list[str], data: list[str]) -> list[str]:
    """The catalog's English ``fragments`` that ``text`` shows outside data.

    Data (memory titles, content, tags and sources, the names the store and apps
    chose) excuses a fragment only where the fragment lies wholly inside a place the data is
    shown: an untranslated label that merely contains a data word ("Show external links"
    beside a memory of type "external") is still found.
    """
    shown = [(found.start(), found.end()) for value in data for found in re.finditer(re.escape(value), text)]
    left = []
    for piece in fragments:
        for found in re.finditer(rf"(?<![A-Za-z]){re.escape(piece)}(?![A-Za-z])", text):
            if not any(start <= found.start() and found.end() <= end for start, end in shown):
                left.append(piece)
                break
    return left


def test_data_excuses_only_what_lies_inside_it() -> None:
    fragments = ["Show external links", "written", "Tags"]
    data = ["external", "brain-connector (MCP), written by alice"]
    assert untranslated("Source brain-connector (MCP), written by alice", fragments, data) == []
    assert untranslated("Show external links · external", fragments, data) == ["Show external links"]
    assert untranslated("written 3 May · Tags", fragments, data) == ["written", "Tags"]


class Visit:
    """The checks of one language on each page."""

    def __init__(self, page: Any, checks: Checks, locale: str, data: list[str]) -> None:
        self.page, self.checks, self.locale, self.data = page, checks, locale, data
        self.fragments = english_fragments(locale) if locale in CATALOG_DIRS else []
        # A message of the catalog is never data: else its untranslated use would pass as data.
        assert not set(self.fragments) & set(data), set(self.fragments) & set(data)
        self.seen: list[str] = []

    def check(self, name: str, status: int = 200) -> str:
        page = self.page
        page.wait_for_load_state("load")
        assert page.evaluate("document.documentElement.lang") == self.locale, name
        text = page.inner_text("body") + "\n" + page.title()
        if self.fragments:
            left = untranslated(text, self.fragments, self.data)
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


@pytest.mark.slow
def test_every_page_in_three_languages(store: RunningStore, tmp_path: Path) -> None:
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
                "house", "garden", "keys", "bike",  # tags (types and origins are translated)
                f"{CONNECTOR_SOURCE}, written by {alice.name}"]  # the source a memory written through MCP records

        with chromium() as browser:
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
                page.locator("table.snapshots td a[href*='/history/changes']").first.click()
                page.wait_for_url("**/app/history/changes?version=**")
                visit.check("history-changes")
                page.goto(f"{base}/app/history")
                page.locator("table.snapshots td a[href*='/history/diff']").first.click()
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
