"""Text people wrote is isolated on the web app's pages, in headless Chromium against real store
and connector processes: a memory title holding U+202E (RIGHT-TO-LEFT OVERRIDE) reorders nothing
after it on its line (the badges stay to its right), and an Arabic title still reads right to
left inside its own box."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from connector.engine.format.brain import Brain
from connector.engine.writes.ops import connector_memorize
from tests.support.browser import needs_chromium
from tests.support.tools import needs_tool

from ..conftest import RunningStore, brains_of, device_write
from .test_webapp_browser import AXE, app_in_chromium

pytestmark = [
    pytest.mark.timeout(300),
    needs_chromium(),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]

OVERRIDE_TITLE = "Pay the rent \u202eon the first of the month"
ARABIC_TITLE = "خطة السفر إلى القاهرة"

# Whether the text node holding ``title`` sits, below ``box``, in an element whose computed
# unicode-bidi isolates it (a <bdi>, dir="auto", or CSS: any of them passes).
ISOLATED = """(box, title) => {
  const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.data.includes(title)) continue;
    for (let el = node.parentElement; el && el !== box.parentElement; el = el.parentElement) {
      if (['isolate', 'isolate-override', 'plaintext'].includes(getComputedStyle(el).unicodeBidi)) return true;
    }
    return false;
  }
  return null;
}"""

# The on-screen x of the first and of the last character of ``title`` in ``box``.
CHARACTER_XS = """(box, title) => {
  const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(title);
    if (at < 0) continue;
    const x = (offset) => { const range = document.createRange(); range.setStart(node, offset);
                            range.setEnd(node, offset + 1); return range.getBoundingClientRect().x; };
    return [x(at), x(at + title.length - 1)];
  }
  return null;
}"""


def _write(store: RunningStore, token: str) -> dict[str, str]:
    """The two memories, written by a device (pull, change, push): their ids by title.

    This app's writes turn bidi controls in a title into spaces, so the override arrives as
    another program writing the brain's files could leave it: the title in index.json edited
    after the write (a memory's file holds no title)."""
    brain_id = brains_of(store.url, token)[0]["id"]

    def memorize(brain: Brain) -> dict[str, str]:
        ids = {}
        for title, content in ((OVERRIDE_TITLE, "Rent is due on the first of each month."),
                               (ARABIC_TITLE, "نسافر إلى القاهرة في الربيع.")):
            stored = connector_memorize(content, title=title.replace("\u202e", ""), type="observation",
                                        tags=["home"]).apply(brain, datetime.now(UTC))["stored"][0]
            ids[title] = str(stored["id"])
        index = brain.read_json("index.json")
        index["memories"][ids[OVERRIDE_TITLE]]["title"] = OVERRIDE_TITLE
        brain.write_json("index.json", index)
        return ids

    return device_write(store.url, token, brain_id, memorize)


def _line_reads_in_order(page: Any, memory_id: str, title: str) -> None:
    """In the list item linking to the memory: the title is isolated and its badge (the text
    after it on the line) is to the right of the whole link, where it is written."""
    item = page.locator(f'li:has(> a[href$="/memory/{memory_id}"])').first
    link = item.locator(f'a[href$="/memory/{memory_id}"]')
    badge = item.locator(".badge").first
    assert badge.inner_text() == "observation"
    link_box, badge_box = link.bounding_box(), badge.bounding_box()
    assert link_box is not None and badge_box is not None
    assert badge_box["x"] >= link_box["x"] + link_box["width"] - 1, (title, link_box, badge_box)
    assert link.evaluate(ISOLATED, title) is True, title


def test_a_title_with_a_bidi_override_reorders_nothing_after_it(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    ids = _write(store, alice.token)
    with app_in_chromium(store.url, alice.token, tmp_path) as (connector, page, checks):
        base = connector.base_url
        for name, address in (("home", "/app"), ("search-browse", "/app/search?type=observation")):
            if page.url != base + address:
                page.goto(base + address)
            checks.page_ok(f"bidi-{name}")
            for title, memory_id in ids.items():
                _line_reads_in_order(page, memory_id, title)
            # The Arabic title still reads right to left in its own box: its first letter is
            # drawn to the right of its last.
            link = page.locator(f'a[href$="/memory/{ids[ARABIC_TITLE]}"]').first
            first, last = link.evaluate(CHARACTER_XS, ARABIC_TITLE)
            assert first > last, (name, first, last)

        page.goto(base + f"/app/memory/{ids[OVERRIDE_TITLE]}")
        checks.page_ok("bidi-memory")
        heading = page.locator("h1")
        assert heading.evaluate(ISOLATED, OVERRIDE_TITLE) is True
        log = connector.log()
    assert "Traceback" not in log
