"""The web app keeps one truth (issue #35 items 8-11): headless Chromium, real store and connector.

- a review decision about a pinned memory moves the pin to the memory kept (and session
  start, asked through the official MCP client, serves that one);
- New memory, Edit and Import run brain_memorize's similar check: their pairs wait in Review;
- an old version (opened through "Replaces") offers no Edit, Pin or Forget, and the
  server refuses them anyway: two versions never become current;
- Pin, Forget, Restore: the restored memory is not pinned, on its page, on the home page
  and in the archive; Unpin of a memory that is not pinned says so.

Every change is checked in the brain downloaded from the store (the command line's
format and invariants included); every page passes the app's usual checks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from connector.engine.format.brain import Brain
from connector.engine.writes.ops import Forget, Pin
from connector.engine.writes.restore import frontmatter_values
from connector.engine.tending.review import review_document
from tests.engine.writes_support import check_consistency
from tests.support.browser import chromium, needs_chromium, screenshots
from tests.support.tools import needs_tool

from ..conftest import RunningStore, StoreUser, brains_of, device_write, download_brain
from ..review_support import flag_pairs_at_store
from ..test_e2e_tools import connector, mcp_session, mint
from .test_webapp_browser import AXE, signed_in_page

pytestmark = [
    pytest.mark.timeout(400),
    needs_chromium(),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]

ENV = {"CONNECTOR_REPULL_TTL_MS": "1"}


class AtStore:
    """The brain as the store holds it, downloaded and loaded with the engine."""

    def __init__(self, store: RunningStore, user: StoreUser) -> None:
        self.store, self.user = store, user
        self.brain_id = brains_of(store.url, user.token)[0]["id"]

    def brain(self) -> Brain:
        brain, _ = download_brain(self.store.url, self.user.token, self.brain_id)
        check_consistency(brain)  # the command line's format and invariants, after every change
        return brain

    def entries(self) -> dict[str, Any]:
        return self.brain().read_json("index.json")["memories"]


def pin_state(brain: Brain, memory_id: str) -> tuple[bool, bool, bool]:
    """(index entry pinned, listed in pinned.json, file's front matter pinned) of a live memory."""
    entry = brain.read_json("index.json")["memories"][memory_id]
    listed = any(pin.get("id") == memory_id for pin in (brain.read_json("pinned.json") or {}).get("pins", []))
    front = frontmatter_values(brain.read_text(entry["path"]) or "")
    return entry.get("pinned") is True, listed, front.get("pinned") is True


def session_start_pins(base: str, user: StoreUser) -> list[str]:
    """The ids session start serves as pinned (the MCP ``session_start`` prompt)."""

    async def ask() -> list[str]:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read"})) as client:
            prompt = await client.get_prompt("session_start", {})
            text = prompt.messages[0].content.text
            payload = json.loads(text[text.index("{"):])
            return [item["id"] for item in payload["pinned"]]

    # Playwright's sync API runs its own event loop in this thread: the MCP client runs in another.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, ask()).result()


@contextmanager
def in_chromium(store: RunningStore, user: StoreUser, tmp_path: Path) -> Iterator[tuple[str, Any, Any]]:
    """A connector process over ``store`` and a Chromium page signed in there as ``user``:
    (the connector's base URL, the page, the checks every page passes)."""
    shots = screenshots(tmp_path)
    with connector(tmp_path, store, env=ENV) as server, chromium() as browser:
        page, checks = signed_in_page(browser, server.base_url, user.token, shots)
        yield server.base_url, page, checks


def new_memory(page: Any, base: str, title: str, content: str) -> str:
    """Write a memory through New memory; its id (from the page it lands on)."""
    page.goto(base + "/app/new")
    page.get_by_label("Title (optional: the first line otherwise)").fill(title)
    page.get_by_label("Content (Markdown)").fill(content)
    page.get_by_role("button", name="Save").click()
    page.wait_for_url("**/app/memory/*?done=new*")
    return page.url.split("/app/memory/")[1].split("?")[0]


def csrf_of_page(page: Any) -> str:
    return page.locator('input[name="csrf"]').first.get_attribute("value")


def test_the_pin_follows_a_review_decision(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    at_store = AtStore(store, alice)
    (kept, replaced), (merged_new, merged_old) = flag_pairs_at_store(store.url, alice.token, at_store.brain_id, [
        ("The standup is at 9:30.", "We moved the standup to 10:00.", "update"),
        ("Deploys go out on Tuesdays.", "We deploy every Tuesday.", "duplicate"),
    ])

    def pin_olds(brain: Brain) -> None:
        Pin(replaced, "global", 2).apply(brain, datetime.now(UTC))
        Pin(merged_old, "global", 5).apply(brain, datetime.now(UTC))

    device_write(store.url, alice.token, at_store.brain_id, pin_olds)  # pinned by another device
    with in_chromium(store, alice, tmp_path) as (base, page, checks):
        assert sorted(session_start_pins(base, alice)) == sorted([replaced, merged_old])
        page.goto(base + "/app/review")

        def pair_item(new_id: str) -> Any:
            return page.locator("ol.review > li").filter(has=page.locator(f'a[href$="/memory/{new_id}?brain={at_store.brain_id}"]'))

        # Keep new on a pinned old memory: the pin moves to the new one, everywhere.
        pair_item(kept).get_by_role("button", name="Keep new").click()
        page.wait_for_url("**/app/review?done=keep_new*")
        brain = at_store.brain()
        assert pin_state(brain, replaced) == (False, False, False)
        assert pin_state(brain, kept) == (True, True, True)
        assert brain.read_json("index.json")["memories"][kept]["pin_priority"] == 2

        # Merge a pair whose old memory is pinned: the merged memory carries the pin.
        item = pair_item(merged_new)
        item.get_by_text("Merge into one memory").click()
        item.get_by_label("Merged text (Markdown)").fill("Deploys go out every **Tuesday**.")
        item.get_by_label("Title").fill("Deploy day")
        item.get_by_role("button", name="Merge", exact=True).click()
        page.wait_for_url("**/app/review?done=merge*")
        brain = at_store.brain()
        entries = brain.read_json("index.json")["memories"]
        [merged] = [memory_id for memory_id, entry in entries.items() if entry["title"] == "Deploy day"]
        assert pin_state(brain, merged_old) == (False, False, False)
        assert pin_state(brain, merged_new) == (False, False, False)
        assert pin_state(brain, merged) == (True, True, True) and entries[merged]["pin_priority"] == 5

        # Session start serves the kept and merged texts, not the superseded ones.
        assert sorted(session_start_pins(base, alice)) == sorted([kept, merged])
        page.goto(base + "/app")
        pinned = page.get_by_role("region", name="Pinned (always given to your assistants)")
        assert pinned.get_by_role("link", name="We moved the standup to 10:00.").is_visible()
        assert pinned.get_by_role("link", name="Deploy day").is_visible()
        assert pinned.locator("li").count() == 2
        checks.page_ok("review-pin-follows")


NEAR_IDENTICAL = [
    "The spare house key is under the blue flowerpot by the back door.",
    "The spare house key is under the blue flower pot by the back door.",
    "Our spare house key is kept under the blue flowerpot at the back door.",
    "The spare key to the house is under the blue flowerpot next to the back door.",
]


@pytest.mark.slow
def test_every_web_write_path_runs_the_similar_check(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    at_store = AtStore(store, alice)
    with in_chromium(store, alice, tmp_path) as (base, page, checks):
        ids = [new_memory(page, base, "", text) for text in NEAR_IDENTICAL]
        # Each later memory waits in Review beside one written before it, queued by the write itself.
        pairs = review_document(at_store.brain())["pairs"]
        assert pairs, "New memory queued no pair"
        assert {pair["new"] for pair in pairs} == set(ids[1:])
        assert all(pair["old"] in ids and pair["status"] == "pending" and pair["via"] == "write"
                   for pair in pairs)
        page.goto(base + "/app")
        assert f'/app/review">{len(pairs)}</a>' in page.content()  # the home page counts them
        page.goto(base + "/app/review")
        assert f"{len(pairs)} pairs waiting" in page.inner_text("main")
        checks.page_ok("review-from-new-memory")

        # Edit: a memory edited into the same fact as another waits beside it too.
        other = new_memory(page, base, "Dentist", "Our dentist is Dr. Okafor on Elm Street.")
        page.goto(f"{base}/app/memory/{other}/edit")
        page.get_by_label("Content (Markdown)").fill(
            "The spare house key is under the blue flowerpot, by the back door.")
        page.get_by_role("button", name="Save").click()
        page.wait_for_url("**/app/memory/*?done=edit*")
        edited = page.url.split("/app/memory/")[1].split("?")[0]
        pairs = review_document(at_store.brain())["pairs"]
        assert {pair["old"] for pair in pairs if pair["new"] == edited} & set(ids)
        assert not [pair for pair in pairs if pair["new"] == edited and pair["old"] == other]

        # Import: a memory of the file that repeats one in the brain waits beside it.
        document = {"format": "brain-store/memories", "version": 1, "memories": [
            {"title": "House key", "type": "learning", "path": "notes/",
             "content": "The spare house key is under the blue flowerpot near the back door."},
        ]}
        upload = tmp_path / "import.json"
        upload.write_text(json.dumps(document), encoding="utf-8")
        page.goto(base + "/app/transfer")
        page.get_by_label("A file to import", exact=False).set_input_files(str(upload))
        page.get_by_role("button", name="Check the file").click()
        page.get_by_role("button", name="Import 1 memory").click()
        page.wait_for_url("**/app?done=import*")
        brain = at_store.brain()
        entries = brain.read_json("index.json")["memories"]
        [imported] = [memory_id for memory_id, entry in entries.items() if entry["title"] == "House key"]
        pairs = review_document(brain)["pairs"]
        assert {pair["old"] for pair in pairs if pair["new"] == imported} & set(ids)


def test_an_old_version_cannot_be_edited_pinned_or_forgotten(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    at_store = AtStore(store, alice)
    with in_chromium(store, alice, tmp_path) as (base, page, checks):
        first = new_memory(page, base, "Car colour", "The car is blue.")
        page.get_by_role("link", name="Edit").click()
        page.get_by_label("Content (Markdown)").fill("The car was repainted green.")
        page.get_by_role("button", name="Save").click()
        page.wait_for_url("**/app/memory/*?done=edit*")
        current = page.url.split("/app/memory/")[1].split("?")[0]
        csrf = csrf_of_page(page)
        before = at_store.entries()
        assert before[first]["superseded_by"] == current

        # The old version, opened through its "Replaces" link: history, no Edit, Pin or Forget.
        page.get_by_role("region", name="Validity and history").get_by_role("link", name="Car colour").click()
        page.wait_for_url(f"**/app/memory/{first}?brain={at_store.brain_id}")  # the brain of the page
        assert "An old version, kept as history" in page.inner_text("main")
        actions = page.get_by_role("group", name="Actions")
        assert actions.count() == 0
        for name in ("Edit", "Pin", "Forget"):
            assert page.get_by_role("link", name=name, exact=True).count() == 0
            assert page.get_by_role("button", name=name, exact=True).count() == 0
        checks.page_ok("memory-old-version")

        # The server refuses them too (a form kept from before, or made by hand): nothing changes.
        edit_page = page.request.get(f"{base}/app/memory/{first}/edit")
        assert edit_page.status == 409 and "old version" in edit_page.text()
        posts = {
            "edit": {"title": "Car colour", "content": "The car is red.", "type": "learning", "tags": ""},
            "pin": {}, "forget": {"force": "1"},
        }
        for action, form in posts.items():
            answer = page.request.post(f"{base}/app/memory/{first}/{action}",
                                       form={"csrf": csrf, **form}, headers={"Origin": base},
                                       max_redirects=0)
            assert answer.status == 409, (action, answer.status)
            assert "old version" in answer.text(), action
        after = at_store.entries()
        assert after == before
        current_versions = [memory_id for memory_id, entry in after.items() if not entry.get("superseded_by")]
        assert current_versions == [current]

        # Another device forgets the old version; restored here, it comes back as the old version it is.
        device_write(store.url, alice.token, at_store.brain_id,
                     lambda brain: Forget(first).apply(brain, datetime.now(UTC)))
        page.goto(base + "/app/archive")
        page.get_by_role("button", name="Restore").click()
        page.wait_for_url(f"**/app/memory/{first}?done=restore*")
        assert "An old version, kept as history" in page.inner_text("main")
        after = at_store.entries()
        assert after[first]["superseded_by"] == current
        assert [memory_id for memory_id, entry in after.items() if not entry.get("superseded_by")] == [current]


def test_a_restored_memory_is_not_pinned_anywhere(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    at_store = AtStore(store, alice)
    with in_chromium(store, alice, tmp_path) as (base, page, checks):
        memory_id = new_memory(page, base, "Boarding pass", "The boarding pass is in the travel folder.")
        page.get_by_role("button", name="Pin", exact=True).click()
        page.wait_for_url("**?done=pin*")
        assert pin_state(at_store.brain(), memory_id) == (True, True, True)
        page.get_by_role("button", name="Forget", exact=True).click()
        page.wait_for_url("**?done=forget*")
        page.goto(base + "/app/archive")
        page.get_by_role("button", name="Restore").click()
        page.wait_for_url(f"**/app/memory/{memory_id}?done=restore*")

        # The page: not pinned, and Pin offered.
        assert page.locator(".badge.pin").count() == 0
        assert page.get_by_role("button", name="Pin", exact=True).is_visible()
        assert page.get_by_role("button", name="Unpin").count() == 0
        checks.page_ok("memory-restored")
        # The archive: not pinned in the index, pinned.json or the file.
        assert pin_state(at_store.brain(), memory_id) == (False, False, False)
        # The home page: no pinned memory.
        page.goto(base + "/app")
        assert page.get_by_text("No pinned memories.").is_visible()
        # The export: not pinned.
        exported = page.request.get(base + "/app/export/memories.json").json()
        [item] = [item for item in exported["memories"] if item["id"] == memory_id]
        assert item.get("pinned") is not True

        # Unpin of a memory that is not pinned (a form kept from before) says so and changes nothing.
        page.goto(f"{base}/app/memory/{memory_id}")
        before = at_store.entries()
        answer = page.request.post(f"{base}/app/memory/{memory_id}/unpin", form={"csrf": csrf_of_page(page)},
                                   headers={"Origin": base}, max_redirects=0)
        assert answer.status == 303
        page.goto(base + answer.headers["location"] if answer.headers["location"].startswith("/")
                  else answer.headers["location"])
        said = page.get_by_role("status").inner_text()
        assert "was not pinned" in said and "Unpinned." not in said
        assert at_store.entries()[memory_id] == before[memory_id]
        # And a pinned one: "Unpinned.", and the archive agrees.
        page.get_by_role("button", name="Pin", exact=True).click()
        page.wait_for_url("**?done=pin*")
        page.get_by_role("button", name="Unpin", exact=True).click()
        page.wait_for_url("**?done=unpin*")
        assert page.get_by_role("status").inner_text().startswith("Unpinned.")
        assert pin_state(at_store.brain(), memory_id) == (False, False, False)
