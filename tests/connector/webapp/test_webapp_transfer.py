"""Export (JSON of our schema, zip of Markdown) and import with a dry run, against a real store."""

from __future__ import annotations

import io
import json
import re
import zipfile
from urllib.parse import unquote

import httpx
import pytest

from ..conftest import RunningStore, auth, brains_of, direct_memorize, download_brain, shared_store
from ..test_e2e_sharing import share, store_cli
from .conftest import app_client, at_store, sign_in

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(120)


def test_export_then_import_into_an_empty_brain_reproduces_the_memories(store: RunningStore) -> None:
    alice, bob = store.add_user("alice"), store.add_user("bob")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, "Dentist appointments are on Tuesdays.")
    direct_memorize(store.url, alice.token, brain_id, "The router admin page is at 192.168.1.1 **only** on the LAN.")
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        # Pin one so the export carries a flag beyond the text.
        first = next(iter(at_store(store, alice.token).values()))
        memory_id = next(mid for mid, e in (download_brain(store.url, alice.token, brain_id)[0]
                                            .read_json("index.json")["memories"].items()) if e["path"] == first["path"])
        assert client.post(f"/app/memory/{memory_id}/pin", data={"csrf": csrf}).status_code == 303
        exported = client.get("/app/export/memories.json")
        assert exported.status_code == 200 and "attachment" in exported.headers["content-disposition"]
        document = exported.json()
        assert document["format"] == "brain-store/memories" and document["version"] == 1
        assert len(document["memories"]) == 2
        item = next(m for m in document["memories"] if m["id"] == memory_id)
        assert item["pinned"] is True and item["content"] and "created" in item["frontmatter"]
        archive = zipfile.ZipFile(io.BytesIO(client.get("/app/export/memories.zip").content))
        assert sorted(archive.namelist()) == sorted(m["path"] for m in at_store(store, alice.token).values())
        assert all(name.endswith(".md") and archive.read(name).startswith(b"---") for name in archive.namelist())
        # A third memory from an outside source, for the quarantine of imports.
        document["memories"].append({"title": "From a web page", "type": "learning", "path": "captured/",
                                     "content": "A blog says the boiler needs descaling yearly.", "origin": "external"})
        payload = json.dumps(document).encode()
    before = at_store(store, alice.token)

    with app_client(store.url) as client:
        csrf = sign_in(client, bob.token)
        preview = client.post("/app/import", data={"csrf": csrf},
                              files={"file": ("brain.json", payload, "application/json")})
        assert preview.status_code == 200, preview.text
        assert "3 new memories would be saved, 1 of them waiting for your verification" in preview.text
        assert at_store(store, bob.token) == {}  # a dry run writes nothing
        reference = re.search(r'name="reference" value="([^"]+)"', preview.text).group(1)
        done = client.post("/app/import/confirm", data={"csrf": csrf, "reference": reference})
        assert done.status_code == 303, done.text
        # The same reference cannot be used twice.
        again = client.post("/app/import/confirm", data={"csrf": csrf, "reference": reference})
        assert again.status_code == 409
    after = at_store(store, bob.token)
    assert set(after) == set(before) | {"From a web page"}
    for title, memory in before.items():
        assert after[title]["body"] == memory["body"]
        for key in ("type", "cognitive_type", "tags", "origin", "salience", "confidence", "encoding_context"):
            assert after[title].get(key) == memory.get(key), (title, key)
    assert after["From a web page"]["quarantined"] is True


def test_import_refuses_bad_files_and_read_only_sign_ins(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        for payload in (b"not json", b'{"format": "other"}', json.dumps({"format": "brain-store/memories",
                        "version": 1, "memories": [{"title": "x", "type": "nonsense", "content": "y", "path": "a/"}]}).encode()):
            answer = client.post("/app/import", data={"csrf": csrf}, files={"file": ("f.json", payload, "application/json")})
            assert answer.status_code == 400 and "would be saved" not in answer.text.replace("0 new memories would be saved", "")
            assert 'name="reference"' not in answer.text
        no_token = client.post("/app/import", files={"file": ("f.json", b"{}", "application/json")})
        assert no_token.status_code == 403
        assert client.post("/app/import/confirm", data={"csrf": csrf, "reference": "made-up"}).status_code == 409
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token, access="read")
        assert client.get("/app/export/memories.json").status_code == 200  # reading is allowed
        refused = client.post("/app/import", data={"csrf": csrf}, files={"file": ("f.json", b"{}", "application/json")})
        assert refused.status_code == 403
    assert at_store(store, alice.token) == {}


def test_an_import_checked_for_one_brain_is_written_there_whatever_brain_is_in_use_then(store: RunningStore) -> None:
    """The brain in use is the account's (MCP brain_use, another tab): if it changes between the dry
    run and the confirmation, the import still goes to the brain it was checked against, by id,
    never into the brain switched to (here one shared with others)."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    direct_memorize(store.url, alice.token, team["id"], "The team deploys on Thursdays.")
    share(store, team["id"], bob, "editor")
    own_id = next(brain["id"] for brain in brains_of(store.url, bob.token) if brain["id"] != team["id"])
    direct_memorize(store.url, bob.token, own_id, "Bob waters the plants on Sundays.")
    payload = json.dumps({"format": "brain-store/memories", "version": 1, "memories": [
        {"title": "Bob's private note", "type": "learning", "path": "captured/",
         "content": "Bob's doctor appointment is on the 14th."}]}).encode()
    with app_client(store.url) as client:
        csrf = sign_in(client, bob.token)
        preview = client.post("/app/import", data={"csrf": csrf}, files={"file": ("b.json", payload, "application/json")})
        assert preview.status_code == 200 and "1 new memory would be saved" in preview.text, preview.text
        reference = re.search(r'name="reference" value="([^"]+)"', preview.text).group(1)
        # Meanwhile the account switches to the shared brain (as an assistant's brain_use would).
        assert client.post("/app/brain", data={"csrf": csrf, "brain": team["id"]}).status_code == 303
        done = client.post("/app/import/confirm", data={"csrf": csrf, "reference": reference})
        assert done.status_code == 303, done.text
    team_brain, _ = download_brain(store.url, alice.token, team["id"])
    assert [entry["title"] for entry in team_brain.read_json("index.json")["memories"].values()] == [
        "The team deploys on Thursdays."]
    own_brain, _ = download_brain(store.url, bob.token, own_id)
    assert sorted(entry["title"] for entry in own_brain.read_json("index.json")["memories"].values()) == [
        "Bob waters the plants on Sundays.", "Bob's private note"]


def test_an_import_checked_for_a_brain_no_longer_shared_is_refused(store: RunningStore) -> None:
    """The brain the file was checked against is no longer this person's to write (its owner removed
    them): the confirmation says so and writes nowhere, not into the brain in use instead."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    direct_memorize(store.url, alice.token, team["id"], "The team deploys on Thursdays.")
    share(store, team["id"], bob, "editor")
    own_id = next(brain["id"] for brain in brains_of(store.url, bob.token) if brain["id"] != team["id"])
    payload = json.dumps({"format": "brain-store/memories", "version": 1, "memories": [
        {"title": "Release notes", "type": "learning", "path": "captured/", "content": "Releases ship on Fridays."}]}).encode()
    with app_client(store.url) as client:
        csrf = sign_in(client, bob.token)
        assert client.post("/app/brain", data={"csrf": csrf, "brain": team["id"]}).status_code == 303
        preview = client.post("/app/import", data={"csrf": csrf}, files={"file": ("b.json", payload, "application/json")})
        reference = re.search(r'name="reference" value="([^"]+)"', preview.text).group(1)
        store_cli(store, "unshare", team["id"], "--with", bob.name)
        refused = client.post("/app/import/confirm", data={"csrf": csrf, "reference": reference})
        assert refused.status_code == 409 and "no longer have access to the brain" in refused.text, refused.text
    team_brain, _ = download_brain(store.url, alice.token, team["id"])
    assert [entry["title"] for entry in team_brain.read_json("index.json")["memories"].values()] == [
        "The team deploys on Thursdays."]
    with pytest.raises(Exception):  # bob's own brain got nothing either (still no archive)
        download_brain(store.url, bob.token, own_id)


def test_what_an_editor_writes_or_imports_in_the_web_app_names_them_in_a_shared_brain(store: RunningStore) -> None:
    """The members of a shared brain see who said what (docs/sharing.md): a memory typed on the
    New memory page names its writer as an assistant's does, and an imported one names who
    imported it after what the file said, whoever the file claims wrote it."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    direct_memorize(store.url, alice.token, team["id"], "The team deploys on Thursdays.")
    share(store, team["id"], bob, "editor")
    payload = json.dumps({"format": "brain-store/memories", "version": 1, "memories": [
        {"title": "Freeze", "type": "decision", "path": "captured/", "content": "Deploys freeze in December.",
         "source": f"brain-connector (MCP), written by {alice.name}"}]}).encode()
    with app_client(store.url) as client:
        csrf = sign_in(client, bob.token)
        assert client.post("/app/brain", data={"csrf": csrf, "brain": team["id"]}).status_code == 303
        typed = client.post("/app/new", data={"csrf": csrf, "title": "Rollback", "type": "learning", "tags": "",
                                              "content": "Roll back with the previous image tag."})
        assert typed.status_code == 303, typed.text
        preview = client.post("/app/import", data={"csrf": csrf}, files={"file": ("f.json", payload, "application/json")})
        reference = re.search(r'name="reference" value="([^"]+)"', preview.text).group(1)
        assert client.post("/app/import/confirm", data={"csrf": csrf, "reference": reference}).status_code == 303
    brain, _ = download_brain(store.url, alice.token, team["id"])
    sources = {entry["title"]: brain.read_text(entry["path"]) for entry in brain.read_json("index.json")["memories"].values()}
    assert f'source: "brain-connector (web app), written by {bob.name}"' in sources["Rollback"]
    assert f'source: "brain-connector (MCP), written by {alice.name}, imported by {bob.name}"' in sources["Freeze"]


def test_the_same_file_confirmed_in_two_places_at_once_is_written_once(store: RunningStore) -> None:
    """Two tabs or devices (here two connectors) check the same file before either writes: both
    dry runs find nothing held, and both confirmations write. What the brain holds word for word
    by the time a write is applied is not written again, so each memory is there once."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, "The compost bin is emptied in spring.")
    payload = json.dumps({"format": "brain-store/memories", "version": 1, "memories": [
        {"title": f"Bed {n}", "type": "learning", "path": "garden/", "content": f"Raised bed {n} holds the tomatoes."}
        for n in (1, 2, 3)]}).encode()
    with app_client(store.url) as first, app_client(store.url) as second:
        checked = []
        for client in (first, second):
            csrf = sign_in(client, alice.token)
            preview = client.post("/app/import", data={"csrf": csrf}, files={"file": ("beds.json", payload, "application/json")})
            assert "3 new memories would be saved" in preview.text, preview.text
            checked.append((client, csrf, re.search(r'name="reference" value="([^"]+)"', preview.text).group(1)))
        for client, csrf, reference in checked:
            assert client.post("/app/import/confirm", data={"csrf": csrf, "reference": reference}).status_code == 303
    stored, _ = download_brain(store.url, alice.token, brain_id)
    titles = sorted(entry["title"] for entry in stored.read_json("index.json")["memories"].values())
    assert titles == ["Bed 1", "Bed 2", "Bed 3", "The compost bin is emptied in spring."]


def test_an_exports_file_name_says_which_brain_it_is(store: RunningStore) -> None:
    # Every export was "brain-<timestamp>.json": exports of several brains could not be told apart.
    alice = store.add_user("alice")
    made = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "王小明的笔记"}, timeout=30)
    assert made.status_code in (200, 201), made.text
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        default = client.get("/app/export/memories.json").headers["content-disposition"]
        assert re.fullmatch(r'attachment; filename="brain-default-\d{8}-\d{6}\.json"', default), default
        assert client.post("/app/brain", data={"csrf": csrf, "brain": made.json()["id"]}).status_code == 303
        for extension in ("json", "zip"):
            header = client.get(f"/app/export/memories.{extension}").headers["content-disposition"]
            # An ASCII name for every browser (the name transliterated), and the name as written (RFC 5987).
            found = re.fullmatch(rf'attachment; filename="brain-wang-xiao-ming-de-bi-ji-(\d{{8}}-\d{{6}})\.{extension}"; '
                                 rf"filename\*=UTF-8''([A-Za-z0-9%._-]+)", header)
            assert found, header
            assert unquote(found.group(2)) == f"brain-王小明的笔记-{found.group(1)}.{extension}"
