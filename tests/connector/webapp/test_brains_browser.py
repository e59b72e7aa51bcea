"""Issue #36 in headless Chromium, against real store and connector processes: several brains
(create, rename, switch, delete from the web app, the choice shared with MCP), deep links kept
across sign-in, and pages instead of JSON at ``/``, at ``/mcp`` and at unknown ``/app``
addresses, in English, Chinese and Japanese. Every page: no console error, no CSP violation,
no serious or critical axe-core finding."""

from __future__ import annotations

import asyncio
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.connector.oauth import live
from tests.support.processes import console_script
from tests.support.browser import chromium, needs_chromium, screenshots
from tests.support.tools import needs_tool

from ..conftest import RunningStore, auth, brains_of, direct_memorize
from .test_webapp_browser import AXE, CSP_WATCH, Checks, app_in_chromium

pytestmark = [
    pytest.mark.timeout(300),
    needs_chromium(),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]


def _mcp(mcp_url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Tool calls through the official MCP client, signed in with the connector's OAuth flow as
    ``token``'s user (the same subject as the web app's sign-in); their structured answers."""
    async def run() -> list[dict[str, Any]]:
        provider = live.signed_in_provider(mcp_url, token, live.MemoryStorage(), client_name="Brains browser test")
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
                answers = []
                for name, arguments in calls:
                    result = await client.call_tool(name, arguments)
                    assert not result.is_error, result.content[0].text
                    answers.append(result.structured_content)
                return answers
    # In a thread of its own: Playwright's sync API keeps an event loop running in this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run()).result()


def _store_cli(store: RunningStore, *args: str) -> str:
    done = subprocess.run([console_script("brain-store"), *args, "--data", str(store.data)],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_several_brains_deep_links_and_pages_for_people_in_chromium(store: RunningStore, tmp_path: Path) -> None:
    alice, bob = store.add_user("alice"), store.add_user("bob")
    default_id = brains_of(store.url, alice.token)[0]["id"]
    memory_id = direct_memorize(store.url, alice.token, default_id, "The boiler is serviced every October")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(bob.token), json={"name": "team"}, timeout=30).json()
    _store_cli(store, "share", team["id"], "--with", "alice", "--role", "viewer")
    shots = screenshots(tmp_path)
    with live.running_connector(tmp_path, store.url, state_dir=tmp_path / "state",
                                extra_env={"CONNECTOR_REPULL_TTL_MS": "0"}) as connector:
        base = connector.base_url
        with chromium() as browser:
            context = browser.new_context(viewport={"width": 1024, "height": 800})
            context.add_init_script(CSP_WATCH)
            page = context.new_page()
            checks = Checks(page, shots)

            # 7. The connector's "/" and its MCP URL in a browser are pages, in three languages.
            answer = page.goto(base + "/")
            assert answer is not None and answer.status == 200
            assert page.get_by_role("heading", name="Your brain store's connector").is_visible()
            assert page.get_by_text(f"claude mcp add --transport http brain {base}/mcp").is_visible()
            checks.page_ok("welcome")
            answer = page.goto(base + "/mcp")
            assert answer is not None and answer.status == 200
            assert page.get_by_role("heading", name="This address is for AI assistants").is_visible()
            checks.page_ok("mcp-in-a-browser")
            page.goto(base + "/mcp?lang=ja")
            assert page.get_by_role("heading", name="このアドレスは AI アシスタント用です").is_visible()
            assert page.locator("html").get_attribute("lang") == "ja"
            page.goto(base + "/?lang=zh-Hans")
            assert page.get_by_role("heading", name="你的大脑存储服务的连接器").is_visible()
            page.get_by_role("link", name="打开网页应用").click()
            page.wait_for_url("**/app/signin**")
            page.goto(base + "/?lang=en")
            # The page's own link leads to the web app.
            page.get_by_role("link", name="Open the web app").click()
            page.wait_for_url("**/app/signin**")

            # 6. A deep link while signed out: sign in, then that memory (not the home page).
            page.goto(f"{base}/app/memory/{memory_id}")
            page.wait_for_url("**/app/signin?next=**")
            checks.page_ok("signin-with-next")
            page.get_by_label("Your store token").fill(alice.token)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{base}/app/memory/{memory_id}")
            assert page.get_by_role("heading", name="The boiler is serviced every October").is_visible()

            # 7. An unknown address of the app: the friendly not-found page, signed in (its nav shown).
            answer = page.goto(base + "/app/no-such-page")
            assert answer is not None and answer.status == 404
            assert page.get_by_role("heading", name="Page not found").is_visible()
            assert page.get_by_role("navigation", name="Main").get_by_role("link", name="Brains").is_visible()
            # Chromium logs the document's own 404 status; nothing else may go wrong on the page.
            assert [error for error in checks.console_errors if "404" not in error] == []
            checks.console_errors.clear()
            checks.page_ok("not-found")
            page.goto(base + "/app/no-such-page?lang=ja")
            assert page.get_by_role("heading", name="ページが見つかりません").is_visible()
            assert [error for error in checks.console_errors if "404" not in error] == []
            checks.console_errors.clear()
            page.goto(base + "/app?lang=en")

            # 1. Brains: her own, and bob's shared one (viewer: usable, not renamable).
            page.get_by_role("navigation", name="Main").get_by_role("link", name="Brains").click()
            page.wait_for_url(base + "/app/brains")
            assert page.get_by_role("button", name="Rename brain default").is_visible()
            assert page.get_by_text("shared by bob, you are viewer (read-only)").is_visible()
            assert page.get_by_role("button", name="Rename brain team").count() == 0
            checks.page_ok("brains")
            page.get_by_label("Name (for example work or personal)").fill("work")
            page.get_by_role("button", name="Create brain").click()
            page.wait_for_url("**/app/brains?done=brain_created")
            work_id = next(b["id"] for b in brains_of(store.url, alice.token) if b["name"] == "work")
            page.get_by_label("New name for work").fill("job")
            page.get_by_role("button", name="Rename brain work").click()
            page.wait_for_url("**/app/brains?done=brain_renamed")
            assert {b["id"]: b["name"] for b in brains_of(store.url, alice.token)}[work_id] == "job"
            page.get_by_role("button", name="Use this brain: job").click()
            page.wait_for_url("**/app/brains?done=brain")

            # The web app's choice is the MCP tools' choice (one sign-in subject, by brain id)...
            status, saved = _mcp(base + "/mcp", alice.token, [
                ("brain_status", {}), ("brain_memorize", {"content": "The job brain holds work notes"})])
            assert status["active_brain"]["id"] == work_id
            assert {brain["name"] for brain in status["brains"]} == {"default", "job", "team"}
            page.goto(base + "/app")
            assert page.get_by_role("heading", name="Your brain: job").is_visible()
            assert page.get_by_role("link", name="The job brain holds work notes").first.is_visible()
            # ... and the other way round.
            _mcp(base + "/mcp", alice.token, [("brain_use", {"brain": default_id})])
            page.goto(base + "/app/brains")
            assert page.get_by_role("button", name="Use this brain: job").is_visible()  # no longer in use

            # Delete asks first; the store keeps the data (the operator can bring it back).
            page.get_by_role("link", name="Delete brain job").click()
            page.wait_for_url(f"**/app/brains/{work_id}/delete")
            checks.page_ok("brain-delete")
            page.get_by_role("button", name="Delete brain").click()
            page.wait_for_url("**/app/brains?done=brain_deleted")
            assert page.get_by_role("button", name="Rename brain job").count() == 0
            assert work_id not in {b["id"] for b in brains_of(store.url, alice.token)}
            status, = _mcp(base + "/mcp", alice.token, [("brain_status", {})])
            assert work_id not in {brain["id"] for brain in status["brains"]}
            assert "job" in _store_cli(store, "brain", "list")  # kept, listed as deleted
            _store_cli(store, "brain", "undelete", work_id)
            back = {b["id"]: b for b in brains_of(store.url, alice.token)}
            assert back[work_id]["name"] == "job" and back[work_id]["checksum"] is not None

            # The brains page in Japanese.
            page.goto(base + "/app/brains?lang=ja")
            assert page.get_by_role("heading", name="ブレイン", exact=True).is_visible()
            assert page.get_by_text("bob さんが共有、あなたは閲覧者（読み取り専用）").is_visible()
            checks.page_ok("brains-ja")


def test_the_brains_page_fits_a_phone_in_japanese_and_chinese(store: RunningStore, tmp_path: Path) -> None:
    # The brain URL (<base>/mcp/brains/<name>) has no break in it: on its own line in Chinese or
    # Japanese text it pushed the page 6 px sideways at 360 px.
    alice = store.add_user("alice")
    name = "仕事用のブレイン（東京オフィス・会議室予約と議事録をまとめて管理するためのもの）"
    assert httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": name},
                      timeout=30).status_code == 201
    with app_in_chromium(store.url, alice.token, tmp_path) as (_connector, page, checks):
        page.set_viewport_size({"width": 360, "height": 740})
        for locale in ("ja", "zh-Hans", "en"):
            page.goto(page.url.split("/app")[0] + f"/app/brains?lang={locale}")
            assert page.evaluate("document.documentElement.lang") == locale
            assert name in page.inner_text("main")
            assert page.evaluate("document.documentElement.scrollWidth") <= 360, locale
            checks.page_ok(f"brains-phone-{locale}")
