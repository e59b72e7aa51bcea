"""The Mental models page in headless Chromium: a model created over MCP (official SDK client) is read,
found stale, refreshed with the operator's model and deleted in the browser.

Real store, connector and scripted chat-completions server processes. Every page state passes the
web app's common checks (no console errors, no CSP violation, no serious axe finding).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from tests.connector.test_e2e_mental import call, models_at_store
from tests.connector.test_e2e_thinking import ALL, answer, fake_model
from tests.connector.test_e2e_tools import connector, mcp_session, mint
from tests.support.tools import needs_tool

from ..conftest import RunningStore, brains_of, direct_memorize
from .test_webapp_browser import AXE, CHROMIUM, CHROMIUM_ARGS, signed_in_page

pytestmark = [
    pytest.mark.timeout(300),
    needs_tool(shutil.which(CHROMIUM) is not None, "Debian chromium is not installed"),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]


def test_a_person_reads_refreshes_and_deletes_a_mental_model_in_chromium(store: RunningStore, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    bob_leads = direct_memorize(store.url, alice.token, brain_id, "Team: Bob leads the platform team")
    shots = Path(os.environ.get("WEBAPP_SCREENSHOTS") or tmp_path / "shots")
    shots.mkdir(parents=True, exist_ok=True)

    with fake_model(tmp_path) as (model_url, script, _log):
        env = {"CONNECTOR_MODEL_URL": model_url, "CONNECTOR_MODEL": "fake-llm", "CONNECTOR_REPULL_TTL_MS": "1"}
        with connector(tmp_path / "c", store, env=env) as server:
            base = server.base_url

            async def over_mcp() -> str:
                async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
                    model_id = (await call(client, action="create", name="Team directory",
                                           question="Who leads which team?"))["model"]["id"]
                    answer(script, {"content": f"Bob leads the platform team [{bob_leads}]."})
                    await call(client, action="refresh", id=model_id)
                    return model_id

            model_id = asyncio.run(over_mcp())
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                try:
                    page, checks = signed_in_page(browser, base, alice.token, shots)
                    page.get_by_role("link", name="Mental models").click()
                    page.wait_for_url(base + "/app/mental")
                    item = page.locator("main li").filter(has_text="Team directory")
                    assert "up to date" in item.inner_text()
                    checks.page_ok("mental-list")

                    item.get_by_role("link", name="Team directory").click()
                    page.wait_for_url(f"{base}/app/mental/{model_id}")
                    main = page.inner_text("main")
                    assert "Bob leads the platform team" in main and "Who leads which team?" in main
                    assert "fake-llm" in main
                    checks.page_ok("mental-model")
                    # The cited memory is linked to its own page.
                    page.locator("section").filter(has_text="Memories it cites").get_by_role(
                        "link", name="Team: Bob leads the platform team").click()
                    page.wait_for_url(f"{base}/app/memory/{bob_leads}")
                    page.go_back()

                    # A memory another device writes makes it stale; the page says so and links it.
                    carol = direct_memorize(store.url, alice.token, brain_id, "Team: Carol now leads the platform team")
                    page.reload()
                    assert "stale" in page.inner_text("main")
                    assert page.locator(f'section a[href$="/memory/{carol}"]').count() == 1

                    # A form without the page's CSRF token changes nothing.
                    forged = page.request.post(f"{base}/app/mental/{model_id}/delete", form={"csrf": "forged"})
                    assert forged.status == 403
                    assert len(models_at_store(store, alice.token, brain_id)) == 1

                    answer(script, {"content": f"Carol leads the platform team [{carol}], after Bob [{bob_leads}]."})
                    page.get_by_role("button", name="Refresh").click()
                    page.wait_for_url(f"**/app/mental/{model_id}?done=refreshed")
                    main = page.inner_text("main")
                    assert "Refreshed" in main and "Carol leads the platform team" in main and "stale" not in main
                    checks.page_ok("mental-refreshed")
                    [kept] = models_at_store(store, alice.token, brain_id)
                    assert set(kept["cited"]) == {carol, bob_leads}

                    page.get_by_role("button", name="Delete").click()
                    page.wait_for_url("**/app/mental?done=deleted")
                    assert "no mental models yet" in page.inner_text("main")
                    assert models_at_store(store, alice.token, brain_id) == []
                finally:
                    browser.close()
