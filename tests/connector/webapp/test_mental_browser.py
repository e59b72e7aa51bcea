"""The Mental models and Think pages in headless Chromium: a model created over MCP (official SDK client) is
read, found stale, refreshed with the operator's model and deleted in the browser; a person creates a
mental model, refreshes it, reflects on a question and extracts memories from pasted text, and the
store's archive holds what the pages said was written.

Real store, connector and scripted chat-completions server processes. Every page state passes the
web app's common checks (no console errors, no CSP violation, no serious axe finding).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.connector.test_e2e_mental import call, models_at_store
from tests.connector.test_e2e_thinking import ALL, answer, fake_model
from tests.connector.test_e2e_tools import connector, mcp_session, mint
from tests.support.browser import chromium, needs_chromium, screenshots
from tests.support.tools import needs_tool

from ..conftest import RunningStore, StoreUser, brains_of, direct_memorize, download_brain, memory_ids
from .test_webapp_browser import AXE, signed_in_page

pytestmark = [
    pytest.mark.timeout(300),
    needs_chromium(),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]


def alice_with_memory(store: RunningStore, content: str) -> tuple[StoreUser, str, str]:
    """A new user, alice, with ``content`` memorized in her brain: (alice, brain id, memory id)."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    return alice, brain_id, direct_memorize(store.url, alice.token, brain_id, content)


@contextmanager
def connector_with_model(store: RunningStore, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A connector process whose operator's model is the scripted server: its base URL and the script."""
    with fake_model(tmp_path) as (model_url, script, _log):
        env = {"CONNECTOR_MODEL_URL": model_url, "CONNECTOR_MODEL": "fake-llm", "CONNECTOR_REPULL_TTL_MS": "1"}
        with connector(tmp_path / "c", store, env=env) as server:
            yield server.base_url, script


def test_a_person_reads_refreshes_and_deletes_a_mental_model_in_chromium(store: RunningStore, tmp_path: Path) -> None:
    alice, brain_id, bob_leads = alice_with_memory(store, "Team: Bob leads the platform team")
    shots = screenshots(tmp_path)

    with connector_with_model(store, tmp_path) as (base, script):
        async def over_mcp() -> str:
            async with mcp_session(base + "/mcp", mint(base, alice, ALL)) as client:
                model_id = (await call(client, action="create", name="Team directory",
                                       question="Who leads which team?"))["model"]["id"]
                answer(script, {"content": f"Bob leads the platform team [{bob_leads}]."})
                await call(client, action="refresh", id=model_id)
                return model_id

        model_id = asyncio.run(over_mcp())
        with chromium() as browser:
            page, checks = signed_in_page(browser, base, alice.token, shots)
            page.get_by_role("link", name="Mental models").click()
            page.wait_for_url(base + "/app/mental")
            item = page.locator("main li").filter(has_text="Team directory")
            assert "up to date" in item.inner_text()
            checks.page_ok("mental-list")

            item.get_by_role("link", name="Team directory").click()
            page.wait_for_url(f"{base}/app/mental/{model_id}?brain={brain_id}")
            main = page.inner_text("main")
            assert "Bob leads the platform team" in main and "Who leads which team?" in main
            assert "fake-llm" in main
            checks.page_ok("mental-model")
            # The cited memory is linked to its own page.
            page.locator("section").filter(has_text="Memories it cites").get_by_role(
                "link", name="Team: Bob leads the platform team").click()
            page.wait_for_url(f"{base}/app/memory/{bob_leads}?brain={brain_id}")
            page.go_back()

            # A memory another device writes makes it stale; the page says so and links it.
            carol = direct_memorize(store.url, alice.token, brain_id, "Team: Carol now leads the platform team")
            page.reload()
            assert "stale" in page.inner_text("main")
            assert page.locator(f'section a[href$="/memory/{carol}?brain={brain_id}"]').count() == 1

            # A form without the page's CSRF token changes nothing.
            forged = page.request.post(f"{base}/app/mental/{model_id}/delete", form={"csrf": "forged"})
            assert forged.status == 403
            assert len(models_at_store(store, alice.token, brain_id)) == 1

            answer(script, {"content": f"Carol leads the platform team [{carol}], after Bob [{bob_leads}]."})
            page.get_by_role("button", name="Refresh").click()
            page.wait_for_url(f"**/app/mental/{model_id}?done=refreshed&brain={brain_id}")
            main = page.inner_text("main")
            assert "Refreshed" in main and "Carol leads the platform team" in main and "stale" not in main
            checks.page_ok("mental-refreshed")
            [kept] = models_at_store(store, alice.token, brain_id)
            assert set(kept["cited"]) == {carol, bob_leads}

            page.get_by_role("button", name="Delete").click()
            page.wait_for_url(f"**/app/mental?done=deleted&brain={brain_id}")
            assert "no mental models yet" in page.inner_text("main")
            assert models_at_store(store, alice.token, brain_id) == []


def test_a_person_creates_refreshes_reflects_and_extracts_in_chromium(store: RunningStore, tmp_path: Path) -> None:
    alice, brain_id, billing = alice_with_memory(store, "Deploys: the billing service ships on Thursdays")
    shots = screenshots(tmp_path)

    with connector_with_model(store, tmp_path) as (base, script):
        with chromium() as browser:
            page, checks = signed_in_page(browser, base, alice.token, shots)

            # ----- create a mental model, then refresh it with the operator's model.
            page.get_by_role("link", name="Mental models").click()
            page.wait_for_url(base + "/app/mental")
            checks.page_ok("mental-empty")
            page.get_by_label("Name").fill("Release rhythm")
            page.get_by_label("Question").fill("When do things ship?")
            page.get_by_role("button", name="Create").click()
            page.wait_for_url(f"**/app/mental/*?done=created&brain={brain_id}")
            assert "Mental model created" in page.inner_text("main") and "not written yet" in page.inner_text("main")
            checks.page_ok("mental-created")
            [model] = models_at_store(store, alice.token, brain_id)
            assert (model["name"], model["question"]) == ("Release rhythm", "When do things ship?")

            answer(script, {"content": f"Billing ships on **Thursdays** [{billing}]."})
            page.get_by_role("button", name="Refresh").click()
            page.wait_for_url(f"**/app/mental/{model['id']}?done=refreshed&brain={brain_id}")
            main = page.inner_text("main")
            assert "Billing ships on Thursdays" in main and "up to date" in main and "fake-llm" in main
            checks.page_ok("mental-refreshed")
            [model] = models_at_store(store, alice.token, brain_id)
            assert model["cited"] == [billing] and "Thursdays" in model["text"]

            # ----- reflect: the answer, its citation linked to the memory.
            page.get_by_role("link", name="Think").click()
            page.wait_for_url(base + "/app/think")
            checks.page_ok("think")
            answer(script, {"content": f"The billing service ships on Thursdays [{billing}]."})
            page.get_by_role("textbox", name="Question").fill("When does billing ship?")
            page.get_by_role("button", name="Reflect").click()
            page.wait_for_url(base + "/app/think/reflect")
            answer_section = page.locator("section.answer")
            assert "The billing service ships on Thursdays" in answer_section.inner_text()
            checks.page_ok("think-reflected")
            answer_section.get_by_role("link", name="Deploys: the billing service ships on Thursdays").first.click()
            page.wait_for_url(f"{base}/app/memory/{billing}?brain={brain_id}")
            page.get_by_role("link", name="Think").click()
            page.wait_for_url(base + "/app/think")

            # ----- extract from pasted text: both saved, held for approval, in the store's archive.
            before = memory_ids(download_brain(store.url, alice.token, brain_id)[0])
            answer(script, {"content": json.dumps({"memories": [
                {"title": "Release day", "type": "decision", "content": "Releases go out on Tuesdays.",
                 "tags": ["release"]},
                {"title": "Review style", "type": "preference", "content": "Alice wants small PRs.", "tags": []},
            ]})})
            page.get_by_label("Where it comes from").fill("Team sync")
            page.get_by_role("textbox", name="Text", exact=True).fill(
                "Meeting notes: we agreed releases go out on Tuesdays; Alice asked for small PRs.")
            page.get_by_role("button", name="Extract and save").click()
            page.wait_for_url(base + "/app/think/extract")
            saved_section = page.locator("section.notice").filter(has_text="Saved memories")
            text = saved_section.inner_text()
            assert "Saved memories: 2" in text and "Waiting for your approval: 2" in text
            assert text.count("awaiting verification") == 2
            checks.page_ok("think-extracted")
            brain, _ = download_brain(store.url, alice.token, brain_id)
            entries = brain.read_json("index.json")["memories"]
            saved = memory_ids(brain) - before
            assert {entries[memory_id]["title"] for memory_id in saved} == {"Release day", "Review style"}
            assert all(entries[memory_id]["origin"] == "external" and entries[memory_id]["quarantined"]
                       and "source:team-sync" in entries[memory_id]["tags"] for memory_id in saved)

            # A held memory opens on its page, where it is approved.
            saved_section.get_by_role("link", name="Release day").click()
            page.wait_for_url("**/app/memory/*")
            page.get_by_role("button", name="Approve").click()
            page.wait_for_url("**done=approve*")
            release = page.url.split("/app/memory/")[1].split("?")[0]
            entries = download_brain(store.url, alice.token, brain_id)[0].read_json("index.json")["memories"]
            assert not entries[release].get("quarantined")
