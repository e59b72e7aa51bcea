"""The Review page in headless Chromium: a person decides about four pairs of similar memories.

Real store and connector processes. The pairs were flagged by another device (written
to the store with the brain's own queue file); each decision is made in the browser
and then checked in the store's archive, which must stay in the command line's format.
Every page state passes the same checks as the rest of the web app (no console errors,
no CSP violation, no serious axe finding, no sideways scrolling at 360 px).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.connector.oauth import live
from tests.engine.writes_support import check_consistency
from tests.support.browser import chromium, needs_chromium, screenshots
from tests.support.tools import needs_tool

from ..conftest import RunningStore, brains_of, direct_memorize
from ..review_support import flag_pairs_at_store, statuses_at_store
from .test_webapp_browser import AXE, signed_in_page

pytestmark = [
    pytest.mark.timeout(300),
    needs_chromium(),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]

PAIRS = [
    ("The standup is at 9:30.", "We moved the standup to 10:00.", "update"),
    ("We use Redis for the job queue.", "We replaced Redis with NATS for the job queue.", "update"),
    ("Deploys go out on Tuesdays.", "We deploy every Tuesday.", "duplicate"),
    ("Lunch is at noon.", "Lunch is at noon, in the canteen.", "duplicate"),
]


def test_a_person_decides_about_similar_memories_in_chromium(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, "The office wifi is called Nimbus.")
    standup, queue, deploy, lunch = flag_pairs_at_store(store.url, alice.token, brain_id, PAIRS)
    shots = screenshots(tmp_path)

    def at_store() -> tuple[dict, dict, dict]:
        brain, statuses = statuses_at_store(store.url, alice.token, brain_id)
        check_consistency(brain)  # the command line's format and invariants, after every decision
        entries = brain.read_json("index.json")["memories"]
        archived = (brain.read_json("_archived/index.json") or {}).get("memories", {})
        return entries, archived, statuses

    with live.running_connector(tmp_path, store.url, state_dir=tmp_path / "state",
                                extra_env={"CONNECTOR_REPULL_TTL_MS": "1"}) as connector:
        base = connector.base_url
        with chromium() as browser:
            page, checks = signed_in_page(browser, base, alice.token, shots)
            # The home page says how many pairs wait, and links to them.
            page.get_by_role("link", name="4", exact=True).click()
            page.wait_for_url(base + "/app/review")
            assert "4 pairs waiting" in page.inner_text("main")
            checks.page_ok("review")

            def pair_item(new_id: str):
                return page.locator("ol.review > li").filter(has=page.locator(f'a[href$="/memory/{new_id}?brain={brain_id}"]'))

            # Keep new: the old memory is superseded by the new one.
            pair_item(standup[0]).get_by_role("button", name="Keep new").click()
            page.wait_for_url("**/app/review?done=keep_new*")
            assert "the old one is superseded" in page.inner_text("main")
            entries, _, statuses = at_store()
            assert entries[standup[1]]["superseded_by"] == standup[0]
            assert entries[standup[0]]["supersedes"] == [standup[1]]
            assert statuses[standup] == "kept_new"

            # Keep old: the new memory goes to the archive (restorable).
            pair_item(queue[0]).get_by_role("button", name="Keep old").click()
            page.wait_for_url("**/app/review?done=keep_old*")
            entries, archived, statuses = at_store()
            assert queue[0] not in entries and archived[queue[0]]["archived_reason"] == "review_keep_old"
            assert "superseded_by" not in entries[queue[1]] and statuses[queue] == "kept_old"

            # Merge: the person edits one text; it supersedes both.
            item = pair_item(deploy[0])
            item.get_by_text("Merge into one memory").click()
            item.get_by_label("Merged text (Markdown)").fill("Deploys go out every **Tuesday**.")
            item.get_by_label("Title").fill("Deploy day")
            checks.page_ok("review-merge")
            item.get_by_role("button", name="Merge", exact=True).click()
            page.wait_for_url("**/app/review?done=merge*")
            entries, _, statuses = at_store()
            merged = [memory_id for memory_id, entry in entries.items() if entry["title"] == "Deploy day"]
            assert len(merged) == 1 and entries[merged[0]]["supersedes"] == [deploy[0], deploy[1]]
            assert entries[deploy[0]]["superseded_by"] == merged[0] == entries[deploy[1]]["superseded_by"]
            assert statuses[deploy] == "merged"

            # Not the same: dismissed; both stay, and the pair is not asked again.
            pair_item(lunch[0]).get_by_role("button", name="Not the same").click()
            page.wait_for_url("**/app/review?done=dismiss*")
            entries, _, statuses = at_store()
            assert lunch[0] in entries and lunch[1] in entries and statuses[lunch] == "dismissed"
            assert "superseded_by" not in entries[lunch[0]] and "superseded_by" not in entries[lunch[1]]
            assert "Nothing is waiting for review." in page.inner_text("main")
            checks.page_ok("review-done")

            # A phone-sized screen, with a pair waiting: nothing scrolls sideways.
            flag_pairs_at_store(store.url, alice.token, brain_id,
                                [("The car is blue.", "The car was repainted green last week.", "update")])
            page.set_viewport_size({"width": 360, "height": 740})
            page.goto(base + "/app/review")
            assert "1 pair waiting" in page.inner_text("main")
            assert page.evaluate("document.documentElement.scrollWidth") <= 360
            checks.page_ok("review-phone")
            assert not checks.console_errors, checks.console_errors
