"""A person tends their brain in headless Chromium: real store and connector processes.

Memories are written through MCP (the official SDK, signed in with the connector's
OAuth flow); then, in the browser: sign in, search, open, pin, edit, forget,
restore, approve a quarantined memory, restore a snapshot, export and check the
export for re-import. After each action the store's archive,
downloaded and loaded with the engine, shows the change. Every page: no console
errors, no CSP violation, no serious or critical axe-core finding, no sideways
scrolling at 360 px. Screenshots go to WEBAPP_SCREENSHOTS when set (docs/ uses them).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.connector.oauth import live
from tests.support.browser import chromium, needs_chromium, screenshots
from tests.support.tools import needs_tool

from ..conftest import RunningStore, StoreUser, brains_of, download_brain

AXE = Path(__file__).resolve().parents[2] / "browser" / "node_modules" / "axe-core" / "axe.min.js"
# Records CSP violations in the page itself (an init script runs before the page's own code, if any).
CSP_WATCH = ("window.__csp = []; document.addEventListener('securitypolicyviolation', "
             "e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));")

pytestmark = [
    pytest.mark.timeout(300),
    needs_chromium(),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]


async def _write_through_mcp(mcp_url: str, token: str) -> dict[str, str]:
    """Two memories through brain_memorize: an ordinary one and one held for verification."""
    provider = live.signed_in_provider(mcp_url, token, live.MemoryStorage(), client_name="Browser test agent")
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
            plain = await client.call_tool("brain_memorize", {
                "content": "The spare house key is under the **blue flowerpot** by the back door.",
                "title": "Spare house key", "type": "observation", "tags": ["house", "keys"]})
            held = await client.call_tool("brain_memorize", {
                "content": "A forum post says the garden tap must be drained before the first frost.",
                "title": "Drain the garden tap", "origin": "external", "tags": ["house", "garden"]})
            assert not plain.is_error and not held.is_error
            assert held.structured_content["stored"]["quarantine_pending"] is True
            return {"plain": plain.structured_content["stored"]["id"], "held": held.structured_content["stored"]["id"]}


class Store:
    """The store's view of the brain, downloaded and loaded with the engine."""

    def __init__(self, store: RunningStore, user: StoreUser) -> None:
        self.store, self.user = store, user
        self.brain_id = brains_of(store.url, user.token)[0]["id"]

    def entries(self) -> dict[str, Any]:
        brain, _ = download_brain(self.store.url, self.user.token, self.brain_id)
        return (brain.read_json("index.json") or {}).get("memories", {})

    def archived(self) -> dict[str, Any]:
        brain, _ = download_brain(self.store.url, self.user.token, self.brain_id)
        return (brain.read_json("_archived/index.json") or {}).get("memories", {})


class Checks:
    """What every page must pass, and its screenshot."""

    def __init__(self, page: Any, shots: Path) -> None:
        self.page = page
        self.shots = shots
        self.console_errors: list[str] = []
        self.axe_source = AXE.read_text(encoding="utf-8")
        page.on("console", lambda message: self.console_errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: self.console_errors.append(str(error)))

    def page_ok(self, name: str) -> None:
        page = self.page
        page.wait_for_load_state("load")
        assert page.evaluate("window.__csp") == [], f"CSP violations on {name}"
        assert not self.console_errors, (name, self.console_errors)
        # axe is evaluated through the DevTools protocol: the page's CSP (no inline scripts) stays on.
        if not page.evaluate("typeof window.axe !== 'undefined'"):
            page.evaluate(self.axe_source)
        found = page.evaluate(
            "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
            ".map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.html).slice(0, 3)}))"
        )
        grave = [v for v in found if v["impact"] in ("serious", "critical")]
        assert not grave, (name, grave)
        page.screenshot(path=str(self.shots / f"webapp-{name}.png"), full_page=True)


def signed_in_page(browser: Any, base: str, token: str, shots: Path,
                   viewport: dict[str, int] | None = None) -> tuple[Any, Checks]:
    """A new browser context signed in to the app with a store token: its page (on the home
    page, CSP violations recorded) and the checks every page must pass."""
    context = browser.new_context(viewport=viewport or {"width": 1024, "height": 800})
    context.add_init_script(CSP_WATCH)
    page = context.new_page()
    checks = Checks(page, shots)
    page.goto(base + "/app")
    page.get_by_label("Your store token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(base + "/app")
    return page, checks


@contextmanager
def app_in_chromium(store_url: str, token: str, tmp_path: Path) -> Iterator[tuple[Any, Any, Checks]]:
    """A connector on ``store_url`` (pulling on every request) and Chromium signed in to its web
    app with ``token``: the connector, the page and the checks every page must pass."""
    shots = screenshots(tmp_path)
    with live.running_connector(tmp_path, store_url, state_dir=tmp_path / "state",
                                extra_env={"CONNECTOR_REPULL_TTL_MS": "0"}) as connector:
        with chromium() as browser:
            page, checks = signed_in_page(browser, connector.base_url, token, shots)
            yield connector, page, checks


@pytest.mark.slow
def test_person_tends_their_brain_in_chromium(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    shots = screenshots(tmp_path)
    with live.running_connector(tmp_path, store.url, state_dir=tmp_path / "state",
                                extra_env={"CONNECTOR_REPULL_TTL_MS": "0"}) as connector:
        base = connector.base_url
        ids = asyncio.run(_write_through_mcp(base + "/mcp", alice.token))
        at_store = Store(store, alice)
        assert ids["plain"] in at_store.entries()
        requested_hosts: set[str] = set()

        with chromium() as browser:
            context = browser.new_context(viewport={"width": 1024, "height": 800})
            context.add_init_script(CSP_WATCH)
            page = context.new_page()
            page.on("request", lambda request: requested_hosts.add(urlsplit(request.url).netloc))
            checks = Checks(page, shots)

            # Sign in with the store token.
            page.goto(base + "/app")
            assert page.url == base + "/app/signin"
            checks.page_ok("signin")
            page.get_by_label("Your store token").fill(alice.token)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(base + "/app")
            assert page.get_by_role("heading", name="Awaiting your verification").is_visible()
            waiting = page.get_by_role("region", name="Awaiting your verification")
            assert waiting.get_by_role("link", name="Drain the garden tap").is_visible()
            # Every memory is listed under "Recent memories" too, and the count leads there.
            recent = page.get_by_role("region", name="Recent memories")
            assert recent.get_by_role("link", name="Drain the garden tap").is_visible()
            assert page.get_by_role("link", name="2", exact=True).get_attribute("href") == "#recent-h"
            checks.page_ok("home")

            # Search for the memory the agent wrote through MCP.
            page.get_by_role("searchbox", name="Search").fill("spare key")
            page.keyboard.press("Enter")
            page.wait_for_url("**/app/search?**")
            result = page.get_by_role("link", name="Spare house key")
            assert result.is_visible()
            assert "relevance" in page.inner_text(".score")
            # The recall mode: labelled, the server's default (hybrid) chosen, exact a keyboard choice away.
            mode = page.get_by_label("Recall mode")
            assert mode.input_value() == "hybrid"
            assert "meaning similarity" in page.locator(".score").first.inner_text()
            checks.page_ok("search")
            # A topic the brain never mentions: no results, and the page says no memory matches well.
            page.get_by_role("searchbox", name="Search").fill("saxophone lessons")
            page.keyboard.press("Enter")
            page.wait_for_url("**/app/search?query=saxophone*")
            assert page.get_by_role("status").filter(has_text="No memory matches well.").is_visible()
            assert page.locator("ol.results > li").count() == 0
            checks.page_ok("search-nothing-matches")
            page.get_by_role("searchbox", name="Search").fill("spare key")
            page.get_by_label("Recall mode").select_option(label="Exact words")
            page.get_by_role("button", name="Search").click()
            page.wait_for_url("**/app/search?**mode=exact**")
            assert page.get_by_label("Recall mode").input_value() == "exact"
            assert "meaning similarity" not in page.locator(".score").first.inner_text()
            result = page.get_by_role("link", name="Spare house key")
            result.click()
            page.wait_for_url(f"**/app/memory/{ids['plain']}")
            assert page.locator(".content strong").inner_text() == "blue flowerpot"
            checks.page_ok("memory")

            # Pin it with the keyboard alone: Tab to the button, Enter.
            for _ in range(40):
                page.keyboard.press("Tab")
                if page.evaluate("document.activeElement.textContent.trim()") == "Pin":
                    break
            else:
                raise AssertionError("the Pin button cannot be reached with Tab")
            page.keyboard.press("Enter")
            page.wait_for_url("**done=pin**")
            assert page.get_by_role("button", name="Unpin").is_visible()
            assert at_store.entries()[ids["plain"]]["pinned"] is True

            # Edit: a new memory that supersedes the old one.
            page.get_by_role("link", name="Edit").click()
            page.wait_for_url("**/edit*")
            checks.page_ok("edit")
            page.get_by_label("Content (Markdown)").fill("The spare house key is now in the **key safe** by the garage.")
            page.get_by_role("button", name="Save").click()
            page.wait_for_url("**done=edit**")
            new_id = page.url.split("/memory/")[1].split("?")[0]
            assert new_id != ids["plain"]
            entries = at_store.entries()
            assert entries[new_id]["supersedes"] == [ids["plain"]] and entries[new_id]["origin"] == "user"
            assert entries[ids["plain"]]["superseded_by"] == new_id
            assert page.get_by_role("link", name="Spare house key").first.is_visible()  # "Replaces: ..."
            # The supersession is a link: drawn as a picture of the neighbourhood.
            assert page.get_by_role("img", name="This memory (in the middle) and the memories linked to it").is_visible()
            checks.page_ok("graph")

            # Forget, then restore from the archive.
            page.get_by_role("button", name="Forget").click()
            page.wait_for_url("**done=forget**")
            assert new_id not in at_store.entries() and new_id in at_store.archived()
            page.get_by_role("link", name="Archive").click()
            page.wait_for_url(base + "/app/archive")
            assert page.get_by_role("link", name="Spare house key").is_visible()
            checks.page_ok("archive")
            page.goto(f"{base}/app/memory/{new_id}")
            page.get_by_role("button", name="Restore").click()
            page.wait_for_url("**done=restore**")
            assert new_id in at_store.entries() and new_id not in at_store.archived()
            assert page.get_by_role("button", name="Forget").is_visible()

            # Approve the memory that waits for verification.
            page.get_by_role("link", name="Home").click()
            page.get_by_role("region", name="Awaiting your verification").get_by_role(
                "link", name="Drain the garden tap").click()
            page.wait_for_url(f"**/app/memory/{ids['held']}")
            assert page.get_by_role("button", name="Reject").is_visible()
            checks.page_ok("verify")
            page.get_by_role("button", name="Approve").click()
            page.wait_for_url("**done=approve**")
            held = at_store.entries()[ids["held"]]
            assert "quarantined" not in held and held["vetted"] is True

            # History: restore the newest snapshot (the brain before the approval), after confirming.
            page.get_by_role("link", name="History").click()
            page.wait_for_url(base + "/app/history")
            page.get_by_role("link", name=re.compile("^What changed since")).first.click()
            page.wait_for_url("**/app/history/diff?version=**")
            assert "Changed since then: 1" in page.inner_text("main")
            assert page.get_by_role("link", name="Drain the garden tap").is_visible()
            checks.page_ok("history-diff")
            page.get_by_role("link", name="restore this snapshot...").click()
            page.wait_for_url("**/app/history?confirm=**")
            checks.page_ok("history")
            page.get_by_role("button", name="Restore this snapshot").click()
            page.wait_for_url("**/app/history?done=snapshot&brain=*")
            assert at_store.entries()[ids["held"]]["quarantined"] is True
            page.get_by_role("link", name="Home").click()
            assert page.get_by_role("region", name="Awaiting your verification").get_by_role(
                "link", name="Drain the garden tap").is_visible()

            # Export as JSON, then check that file for import: a dry run, all already present.
            page.get_by_role("link", name="Export and import").click()
            with page.expect_download() as download_info:
                page.get_by_role("link", name="Download as JSON").click()
            exported = tmp_path / "export.json"
            download_info.value.save_as(exported)
            assert len(json.loads(exported.read_text())["memories"]) == len(at_store.entries())
            page.get_by_label("A file to import", exact=False).set_input_files(str(exported))
            page.get_by_role("button", name="Check the file").click()
            page.wait_for_url(base + "/app/import")
            assert "0 new memories would be saved" in page.inner_text("main")
            assert f"{len(at_store.entries())} already in this brain" in page.inner_text("main")
            checks.page_ok("transfer")

            # A new memory typed in the app, from the menu.
            page.goto(base + "/app")
            page.get_by_role("link", name="New memory").click()
            page.wait_for_url(base + "/app/new")
            checks.page_ok("new")
            page.get_by_label("Title (optional: the first line otherwise)").fill("Bike lock code")
            page.get_by_label("Content (Markdown)").fill("The bike lock opens with the **old** code.")
            page.get_by_label("Tags (comma-separated)").fill("bike, home")
            page.get_by_role("button", name="Save").click()
            page.wait_for_url("**/app/memory/mem_*?done=new*")
            assert "Saved." in page.inner_text("main") and "Bike lock code" in page.inner_text("h1")
            assert any(entry.get("title") == "Bike lock code" for entry in at_store.entries().values())

            # A phone-sized screen: nothing scrolls sideways.
            page.set_viewport_size({"width": 360, "height": 740})
            for path in ("/app/archive", "/app/history", "/app/transfer", "/app", "/app/new", "/app/search?query=house",
                         f"/app/memory/{new_id}"):
                page.goto(base + path)
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= 360, (path, width)
            checks.page_ok("phone")

            # A new user's empty brain: a welcome with what to do next, accessible too.
            newcomer = store.add_user("newcomer")
            fresh = browser.new_context(viewport={"width": 360, "height": 740})
            fresh.add_init_script(CSP_WATCH)
            welcome = fresh.new_page()
            welcome_checks = Checks(welcome, shots)
            welcome.goto(base + "/app")
            welcome.get_by_label("Your store token").fill(newcomer.token)
            welcome.get_by_role("button", name="Sign in").click()
            welcome.wait_for_url(base + "/app")
            assert welcome.get_by_role("heading", name="Welcome: your brain is ready").is_visible()
            assert welcome.get_by_role("link", name="Add your first memory").get_attribute("href") == "/app/new"
            assert "different account" not in welcome.inner_text("main")
            assert welcome.evaluate("document.documentElement.scrollWidth") <= 360
            welcome_checks.page_ok("welcome")
            assert not welcome_checks.console_errors, welcome_checks.console_errors
            fresh.close()

            # Sign out ends the session.
            page.get_by_role("button", name="Sign out").click()
            page.wait_for_url("**/app/signin?out=1")
            page.goto(base + "/app")
            assert page.url == base + "/app/signin"
            assert not checks.console_errors, checks.console_errors
        assert requested_hosts == {urlsplit(base).netloc}, requested_hosts
