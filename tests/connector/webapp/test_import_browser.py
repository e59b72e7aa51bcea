"""A person brings an Obsidian vault and a mem0 export into their brain in headless Chromium, with real
store and connector processes: a dry run first (new, duplicates, left-out files), then the import,
checked in the store's archive; a conversations export without a model is refused and changes nothing.
Every page passes the checks of test_webapp_browser.py (console, CSP, axe, phone width)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.connector.imports import samples
from tests.support.browser import needs_chromium
from tests.support.tools import needs_tool

from ..conftest import RunningStore, brains_of, direct_memorize
from .test_webapp_browser import AXE, Store, app_in_chromium
from .test_webapp_import_formats import vault_zip

pytestmark = [
    pytest.mark.timeout(300),
    needs_chromium(),
    needs_tool(AXE.is_file(), "axe-core is not installed: npm ci --prefix tests/browser"),
]


def test_a_vault_and_a_mem0_export_are_imported_from_the_import_page(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, "The compost bin is turned every second Sunday.")
    at_store = Store(store, alice)
    vault = tmp_path / "Vault.zip"
    vault.write_bytes(vault_zip(tmp_path / "made"))
    mem0 = samples.write_json(tmp_path / "mem0-memories.json", samples.MEM0_RESULTS)
    chats = samples.write_json(tmp_path / "conversations.json", samples.chatgpt_conversations())
    with app_in_chromium(store.url, alice.token, tmp_path) as (connector, page, checks):
        base = connector.base_url
        page.get_by_role("link", name="Export and import").click()
        checks.page_ok("import-empty")
        before = at_store.entries()

        page.get_by_label("A file to import", exact=False).set_input_files(str(vault))
        page.get_by_role("button", name="Check the file").click()
        page.wait_for_url(base + "/app/import")
        main = page.inner_text("main")
        assert "Dry run: nothing has been written yet." in main
        assert "2 new memories would be saved." in main and "1 already in this brain (skipped)." in main
        assert "Compost: already held as" in main and "Projects/diagram.png: not a Markdown file" in main
        checks.page_ok("import-vault-dry-run")
        assert at_store.entries() == before
        page.get_by_role("button", name="Import 2 memories").click()
        page.wait_for_url(base + "/app?done=import")
        titles = {entry["title"] for entry in at_store.entries().values()}
        assert {"Tomato plan", "2024-05-02"} <= titles and len(titles) == 3

        page.goto(base + "/app/transfer")
        page.get_by_label("A file to import", exact=False).set_input_files(str(mem0))
        page.get_by_label("Format").select_option("mem0")
        page.get_by_role("button", name="Check the file").click()
        page.wait_for_url(base + "/app/import")
        assert "2 new memories would be saved." in page.inner_text("main")
        assert page.get_by_label("Format").input_value() == "mem0"  # the choice stays
        page.get_by_role("button", name="Import 2 memories").click()
        page.wait_for_url(base + "/app?done=import")
        veggie = next(entry for entry in at_store.entries().values()
                      if entry["title"] == "Is a vegetarian and allergic to nuts")
        assert veggie["tags"] == ["user:alex", "food", "source:onboarding"]

        # Conversations need the operator's model: none here, so the page says so and nothing changes.
        before = at_store.entries()
        page.goto(base + "/app/transfer")
        page.get_by_label("A file to import", exact=False).set_input_files(str(chats))
        page.get_by_role("button", name="Check the file").click()
        page.wait_for_url(base + "/app/import")
        main = page.inner_text("main")
        assert "needs a model" in main and "CONNECTOR_MODEL_URL" in main
        assert page.get_by_role("button", name=re.compile(r"^Import \d+ memor")).count() == 0
        # The refusal is answered 400, which Chromium logs as the page's only console error.
        assert checks.console_errors == ["Failed to load resource: the server responded with a status of 400 "
                                         "(Bad Request)"]
        checks.console_errors.clear()
        checks.page_ok("import-needs-model")
        assert at_store.entries() == before

        page.set_viewport_size({"width": 360, "height": 740})
        page.goto(base + "/app/transfer")
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
        log = connector.log()
    assert "Traceback" not in log
