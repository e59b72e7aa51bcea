"""The web app imports Markdown notes, our Markdown export, mem0 exports and conversations, against real
store and connector processes (and a scripted model server); every result is read back from the store's archive."""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.connector.imports import samples
from tests.connector.oauth.live import running_connector
from tests.connector.test_e2e_thinking import fake_model
from tests.support.processes import ServerProcess

from ..conftest import RunningStore, StoreUser, brains_of, direct_memorize, download_brain
from .conftest import at_store, csrf_of, signed_in_browser

pytestmark = pytest.mark.timeout(240)


@contextmanager
def alice_signed_in(store: RunningStore, tmp_path: Path, memory: str,
                    address: str) -> Iterator[tuple[StoreUser, ServerProcess, httpx.Client]]:
    """Alice, with ``memory`` in her brain, signed in from ``address`` to a connector process's web
    app: (alice, the connector, her browser)."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, memory)
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as server:
        yield alice, server, signed_in_browser(server.base_url, alice.token, address)


def upload(browser: httpx.Client, name: str, data: bytes, chosen: str = "auto") -> httpx.Response:
    csrf = csrf_of(browser.get("/app/transfer").text)
    return browser.post("/app/import", data={"csrf": csrf, "format": chosen}, files={"file": (name, data)})


def confirm(browser: httpx.Client, preview: httpx.Response) -> None:
    match = re.search(r'name="reference" value="([^"]+)"', preview.text)
    assert match, preview.text
    done = browser.post("/app/import/confirm", data={"csrf": csrf_of(preview.text), "reference": match.group(1)})
    assert done.status_code == 303, done.text


def plain_text(html: str) -> str:
    """A page without the <bdi> elements that isolate the names quoted in its messages."""
    return re.sub(r"</?bdi>", "", html)


def vault_zip(root: Path) -> bytes:
    vault = samples.obsidian_vault(root)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(vault.rglob("*")):
            if path.is_file():
                archive.write(path, f"Vault/{path.relative_to(vault)}")
    return buffer.getvalue()


def test_a_vault_zip_and_a_mem0_export_are_checked_then_imported_duplicates_reported(
        store: RunningStore, tmp_path: Path) -> None:
    with alice_signed_in(store, tmp_path, "The compost bin is turned every second Sunday.", "198.51.100.7") as (alice, server, browser):
        before = at_store(store, alice.token)
        preview = upload(browser, "Vault.zip", vault_zip(tmp_path))
        assert preview.status_code == 200, preview.text
        text = preview.text
        assert "2 new memories would be saved" in text and "1 already in this brain (skipped)" in text
        assert "<bdi>Compost</bdi>: already held as" in text and "Empty.md: no text" in plain_text(text)
        assert at_store(store, alice.token) == before  # the dry run wrote nothing
        confirm(browser, preview)
        after = at_store(store, alice.token)
        assert set(after) - set(before) == {"Tomato plan", "2024-05-02"}
        assert after["Tomato plan"]["tags"] == ["garden", "plants"]
        assert (f'source: "imported from Vault.zip/Vault/Projects/Garden/Tomatoes.md, imported by {alice.name}"'
                in after["Tomato plan"]["text"])

        preview = upload(browser, "memories.json", json.dumps(samples.MEM0_RESULTS).encode(), "mem0")
        assert "2 new memories would be saved" in preview.text
        confirm(browser, preview)
        veggie = at_store(store, alice.token)["Is a vegetarian and allergic to nuts"]
        assert veggie["tags"] == ["user:alex", "food", "source:onboarding"] and veggie["origin"] == "agent-inferred"

        # Again: everything is already here; nothing to confirm, nothing written.
        before = at_store(store, alice.token)
        again = upload(browser, "memories.json", json.dumps(samples.MEM0_RESULTS).encode())
        assert "0 new memories would be saved" in again.text and "2 already in this brain" in again.text
        assert 'name="reference"' not in again.text
        assert at_store(store, alice.token) == before
        log = server.log()
    assert "Traceback" not in log and '"status": 500' not in log


def test_our_markdown_export_round_trips_through_the_web_app(store: RunningStore, tmp_path: Path) -> None:
    alice, bob = store.add_user("alice"), store.add_user("bob")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, "Dentist appointments are on Tuesdays.")
    direct_memorize(store.url, alice.token, brain_id, "路由器的说明书在书房的抽屉里。")
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as server:
        exported = signed_in_browser(server.base_url, alice.token, "198.51.100.8").get("/app/export/memories.zip")
        assert exported.status_code == 200
        bobs = signed_in_browser(server.base_url, bob.token, "198.51.100.9")
        preview = upload(bobs, "brain-20260101.zip", exported.content)
        assert "2 new memories would be saved" in preview.text, preview.text
        confirm(bobs, preview)
    first, second = at_store(store, alice.token), at_store(store, bob.token)
    assert set(first) == set(second) and len(first) == 2
    for title, old in first.items():
        new = second[title]
        assert new["body"] == old["body"]
        for key in ("path", "type", "cognitive_type", "tags", "origin", "salience", "confidence", "encoding_context"):
            assert new.get(key) == old.get(key), (title, key)


def test_bad_files_and_conversations_without_a_model_are_refused_and_change_nothing(
        store: RunningStore, tmp_path: Path) -> None:
    with alice_signed_in(store, tmp_path, "The boiler is serviced every October.", "198.51.100.10") as (alice, server, browser):
        before = at_store(store, alice.token)
        cases = [
            ("note.md", b"---\ntitle: [unclosed\n---\nbody\n", "auto", "note.md, line 2: the front matter is not YAML"),
            ("nested.md", b"---\na: " + b"[" * 5000 + b"]" * 5000 + b"\n---\nbody\n", "auto",
             "nested.md, line 2: the front matter&#39;s &#39;a&#39; is nested too deeply"),
            ("digits.md", b"---\ntitle: Long\ncount: " + b"9" * 4301 + b"\n---\nbody\n", "auto",
             "digits.md, line 3: the front matter&#39;s &#39;count&#39; is a number of more than 4300 digits"),
            ("export.json", b'[\n{"memory": "a"},\n{"memory": }\n]', "auto", "export.json, line 3: not JSON"),
            ("conversations.json", json.dumps(samples.chatgpt_conversations()).encode(), "auto", "needs a model"),
            ("conversations.json", json.dumps(samples.claude_conversations()).encode(), "claude", "needs a model"),
            ("m.json", json.dumps(samples.MEM0_LIST).encode(), "chatgpt", "is not a ChatGPT conversations export"),
            # A "\ud800" escape (half of a character: JSON and YAML read it, no UTF-8 file holds it) in
            # any format: writing it failed, and the dry run answered 500.
            ("ours.json", b'{"format": "brain-store/memories", "version": 1, "memories": [{"title": "t", '
                          b'"type": "learning", "path": "notes/", "content": "a \\ud800 b"}]}', "auto",
             "memory 1 (t): &#39;content&#39; holds a lone surrogate"),
            ("titled.json", b'{"format": "brain-store/memories", "version": 1, "memories": [{"title": "t\\udc00", '
                            b'"type": "learning", "path": "notes/", "content": "ab"}]}', "auto",
             "memory 1 (?): &#39;title&#39; holds a lone surrogate"),
            ("mem0.json", b'{"results": [{"id": "1", "memory": "ok", "categories": ["\\ud800"]}]}', "auto",
             "memory 1: &#39;tags&#39; holds a lone surrogate"),
            ("half.md", b'---\ntitle: "x\\ud800y"\n---\nbody\n', "auto", "half.md: &#39;title&#39; holds a lone surrogate"),
            ("cli.brain-export", b'{"version": 1, "exportedAt": "2026-01-01", "files": {"a.md": "# A\\n\\ud800"}}',
             "auto", "cli.brain-export: &#39;a.md&#39; is not text"),
        ]
        for name, data, chosen, reason in cases:
            answer = upload(browser, name, data, chosen)
            assert answer.status_code == 400, (name, answer.text)
            assert reason in plain_text(answer.text) and 'name="reference"' not in answer.text, (name, reason)
        assert at_store(store, alice.token) == before
        log = server.log()
    assert "Traceback" not in log


def test_an_import_too_large_to_hold_until_confirmed_is_refused_at_the_dry_run(
        store: RunningStore, tmp_path: Path) -> None:
    # 200 notes of Chinese, 9.5 million characters (a 100 KB zip): the held import, sealed, came
    # to 66 MB, more than a sealed record is read back; the dry run offered "Import 200
    # memories" and the confirmation always answered that the import had expired.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for number in range(200):
            archive.writestr(f"n{number}.md", f"# 笔记 {number}\n" + f"番茄种在南边的苗床上，黎明时浇水{number}。" * 2480)
    with alice_signed_in(store, tmp_path, "The boiler is serviced every October.", "198.51.100.10") as (alice, server, browser):
        before = at_store(store, alice.token)
        browser.timeout = httpx.Timeout(300)
        answer = upload(browser, "notes.zip", buffer.getvalue())
        assert answer.status_code == 400, answer.text[-2000:]
        assert "The memories of this file take more than 40 MB; split it." in answer.text
        assert 'name="reference"' not in answer.text
        assert at_store(store, alice.token) == before


def test_conversations_with_the_operators_model_are_extracted_and_held_for_verification(
        store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    with fake_model(tmp_path) as (model_url, script, log):
        script.write_text(json.dumps([{"content": samples.extraction(
            ("Moving to Lisbon in March", "decision", "Moving to Lisbon in March with the dog Bruno."))}]))
        env = {"CONNECTOR_MODEL_URL": model_url, "CONNECTOR_MODEL": "fake-llm"}
        with running_connector(tmp_path, store.url, state_dir=tmp_path / "state", extra_env=env) as server:
            browser = signed_in_browser(server.base_url, alice.token, "198.51.100.11")
            preview = upload(browser, "conversations.json", json.dumps(samples.chatgpt_conversations()).encode())
            assert preview.status_code == 200, preview.text
            assert "1 new memory would be saved, 1 of them waiting for your verification" in preview.text
            assert at_store(store, alice.token) == {}
            confirm(browser, preview)
        assert len(log.read_text().splitlines()) == 1  # extracted once, at the dry run; the confirmation reuses it
    lisbon = at_store(store, alice.token)["Moving to Lisbon in March"]
    assert lisbon["origin"] == "external" and lisbon["quarantined"] is True
    assert "source:moving-to-lisbon" in lisbon["tags"]


def test_an_imported_supersedes_naming_a_memory_of_the_brain_is_dropped_and_reported(
        store: RunningStore, tmp_path: Path) -> None:
    with alice_signed_in(store, tmp_path, "The boiler is serviced every October.", "198.51.100.12") as (alice, server, browser):
        before = at_store(store, alice.token)
        (held_title, held), = before.items()
        held["id"] = re.search(r'^id: "?(mem_\w+)', held["text"], re.MULTILINE).group(1)  # type: ignore[union-attr]
        document = {"format": "brain-store/memories", "version": 1, "memories": [
            {"id": "mem_20250103_cccccc", "title": "Boiler moved", "type": "learning", "path": "home/",
             "origin": "user", "content": "Nothing is serviced any more.", "supersedes": [held["id"]]}]}
        preview = upload(browser, "other-brain.json", json.dumps(document).encode())
        assert preview.status_code == 200, preview.text
        line = (f"Boiler moved: &#39;supersedes&#39; names {held['id']}, a memory of this brain the file does "
                "not hold; that link was dropped")
        assert "1 new memory would be saved" in preview.text and line in plain_text(preview.text), preview.text
        confirm(browser, preview)
        after = at_store(store, alice.token)
        # Alice's memory is not replaced: recall still serves it.
        assert "superseded_by" not in after[held_title] and "valid_until" not in after[held_title]
        assert "supersedes" not in after["Boiler moved"]
        log = server.log()
    assert "Traceback" not in log


def test_a_brain_export_of_the_brain_command_line_imports_with_its_chinese_and_japanese_titles(
        store: RunningStore, tmp_path: Path) -> None:
    """The reference `.brain-export` (spec/session-and-export.md §2): a brain's files in one JSON
    document. It was "in no format this app imports"; its titles live in its index.json."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    for content in ("# 東京オフィスの会議室予約ルール\n\n会議室は前日までに予約すること。",
                    "# 部署流程：蓝绿发布\n\n支付团队每周四使用蓝绿发布进行部署。"):
        direct_memorize(store.url, alice.token, brain_id, content)
    brain, _ = download_brain(store.url, alice.token, brain_id)
    files = {path: data.decode("utf-8") for path, data in brain.files.items()}
    files["_archived/captured/old.md"] = "---\nid: mem_20200101_000000\ntype: learning\n---\n古いメモ。\n"
    export = json.dumps({"version": 1, "exportedAt": "2026-12-01T00:00:00.000Z", "files": files},
                        ensure_ascii=False).encode("utf-8")
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as server:
        bobs = signed_in_browser(server.base_url, bob.token, "198.51.100.10")
        bobs.get("/app?lang=ja")
        preview = upload(bobs, "work.brain-export", export)
        assert preview.status_code == 200, preview.text
        assert "2 件の新しい記憶が保存されます" in preview.text, preview.text
        assert "_archived/captured/old.md：アーカイブ済みの記憶" in plain_text(preview.text)
        confirm(bobs, preview)
        assert set(at_store(store, bob.token)) == {"東京オフィスの会議室予約ルール", "部署流程：蓝绿发布"}
        # Made with a passphrase, the file is encrypted: refused with what to do, nothing written.
        sealed = upload(bobs, "sealed.brain-export", bytes(range(256)) * 4)
        assert "sealed.brain-export は暗号化されています" in plain_text(sealed.text), sealed.text
        assert len(at_store(store, bob.token)) == 2
        log = server.log()
    assert "Traceback" not in log and '"status": 500' not in log


def test_a_model_candidate_that_shows_nothing_refuses_the_import_with_a_reason(
        store: RunningStore, tmp_path: Path) -> None:
    # The model's candidate held only a zero-width space: str.strip() let it through the
    # candidate check, then memorize refused it as empty and the dry run answered 500.
    alice = store.add_user("alice")
    with fake_model(tmp_path) as (model_url, script, _):
        script.write_text(json.dumps([{"content": samples.extraction(
            ("Moving to Lisbon in March", "decision", "Moving to Lisbon in March with the dog Bruno."),
            ("Nothing", "decision", "\u200b\u2060"))}]))
        env = {"CONNECTOR_MODEL_URL": model_url, "CONNECTOR_MODEL": "fake-llm"}
        with running_connector(tmp_path, store.url, state_dir=tmp_path / "state", extra_env=env) as server:
            browser = signed_in_browser(server.base_url, alice.token, "198.51.100.13")
            preview = upload(browser, "conversations.json", json.dumps(samples.chatgpt_conversations()).encode())
            assert preview.status_code == 400, preview.text[-2000:]
            assert "item 2: &#39;content&#39; must be a non-empty string" in plain_text(preview.text), preview.text
            assert 'name="reference"' not in preview.text
            log = server.log()
    assert at_store(store, alice.token) == {}
    assert "Traceback" not in log
