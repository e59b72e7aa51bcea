"""The web app's edit and import refuse credentials like every other write path (issue 24, item 7),
against a real store with a signed-in session: plain AWS keys, GitHub tokens, PEM private keys and
our own agent keys, in any field."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from connector.engine.format.archive import pack_archive
from connector.engine.format.brain import Brain
from connector.engine.writes.ops import Memorize

from ..conftest import RunningStore, brains_of, shared_store, upload_raw
from .conftest import app_client, sign_in
from .test_webapp_http import _live

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n-----END RSA PRIVATE KEY-----"
AGENT_KEY = "bsk_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7cDE0fGHi"


def test_edit_refuses_credentials(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain = Brain()
    stored = Memorize.from_request({"title": "Deploy", "type": "learning", "path": "ops/",
                                    "content": "We deploy on Fridays."}).apply(brain, datetime.now(UTC))["stored"][0]
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain), {"If-None-Match": "*"}).status_code == 200
    memory_id = stored["id"]
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        for fields, kind in [({"content": f"The key is {AWS}"}, "AWS Access Key"),
                             ({"content": f"token {GITHUB}"}, "GitHub Token"),
                             ({"content": PEM}, "Private Key"),
                             ({"content": "fine", "title": f"key {AGENT_KEY}"}, "Brain store or connector token"),
                             ({"content": "fine", "tags": f"ops, {GITHUB}"}, "GitHub Token")]:
            edit = client.post(f"/app/memory/{memory_id}/edit", data={"csrf": csrf, "type": "learning", **fields})
            assert edit.status_code == 409 and kind in edit.text, (kind, edit.status_code)
            assert AWS not in edit.text and GITHUB not in edit.text and AGENT_KEY not in edit.text
        assert set(_live(store, alice.token, brain_id)) == {memory_id}


def test_import_refuses_memories_with_credentials(store: RunningStore) -> None:
    bob = store.add_user("bob")
    memories = [
        {"title": "Fine", "type": "learning", "path": "notes/", "content": "Plants need water."},
        {"title": "AWS", "type": "learning", "path": "notes/", "content": f"key {AWS}"},
        {"title": "GitHub", "type": "learning", "path": "notes/", "content": "ci", "tags": [GITHUB]},
        {"title": "PEM", "type": "learning", "path": "notes/", "content": PEM},
        {"title": "Agent", "type": "learning", "path": "notes/", "content": "x",
         "encoding_context": {"project": AGENT_KEY}},
    ]
    payload = json.dumps({"format": "brain-store/memories", "version": 1, "memories": memories}).encode()
    with app_client(store.url) as client:
        csrf = sign_in(client, bob.token)
        preview = client.post("/app/import", data={"csrf": csrf},
                              files={"file": ("brain.json", payload, "application/json")})
        assert preview.status_code == 200, preview.text
        assert "1 new memory would be saved" in preview.text or "1 new memories would be saved" in preview.text
        for title in ("AWS", "GitHub", "PEM", "Agent"):
            assert f"<bdi>{title}</bdi>: looks like it contains a credential" in preview.text
        assert AWS not in preview.text and GITHUB not in preview.text and "MIIEow" not in preview.text
        reference = re.search(r'name="reference" value="([^"]+)"', preview.text).group(1)  # type: ignore[union-attr]
        assert client.post("/app/import/confirm", data={"csrf": csrf, "reference": reference}).status_code == 303
    brain_id = brains_of(store.url, bob.token)[0]["id"]
    titles = {e["title"] for e in _live(store, bob.token, brain_id).values()}
    assert titles == {"Fine"}
