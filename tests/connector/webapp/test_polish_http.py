"""Small things that looked like bugs (#36 item 9), over HTTP against a real store process."""

from __future__ import annotations

import re

import pytest

from connector.engine.writes.memorize import CONNECTOR_SOURCE
from connector.engine.writes.ops import connector_memorize

from ..conftest import RunningStore, brains_of, direct_memorize, download_brain
from .conftest import app_client, sign_in

pytestmark = pytest.mark.timeout(120)


def _front_matter(store: RunningStore, token: str, brain_id: str, memory_id: str) -> str:
    brain, _ = download_brain(store.url, token, brain_id)
    path = (brain.read_json("index.json") or {})["memories"][memory_id]["path"]
    data = brain.read(path)
    assert data is not None
    return data.decode("utf-8").split("\n---", 1)[0]


def test_web_app_writes_carry_their_own_source(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    # An MCP write (brain_memorize's operation) keeps the connector's MCP label.
    assert connector_memorize("From an assistant.").memories[0].source == CONNECTOR_SOURCE == "brain-connector (MCP)"
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        new = client.post("/app/new", data={"csrf": csrf, "title": "Tea", "content": "I prefer green tea.",
                                            "type": "preference", "tags": ""})
        assert new.status_code == 303, new.text
        memory_id = new.headers["location"].split("/app/memory/")[1].split("?")[0]
        page = client.get(f"/app/memory/{memory_id}")
        assert "brain-connector (web app)" in page.text and "brain-connector (MCP)" not in page.text
    assert 'source: "brain-connector (web app)"' in _front_matter(store, alice.token, brain_id, memory_id)


def test_no_recall_count_that_recall_never_updates(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    memory_id = direct_memorize(store.url, alice.token, brain_id, "The boiler is serviced in October.")
    with app_client(store.url) as client:
        sign_in(client, alice.token)
        for _ in range(5):
            found = client.get("/app/search", params={"query": "boiler serviced"})
            assert f"/app/memory/{memory_id}" in found.text
        page = client.get(f"/app/memory/{memory_id}")
        assert page.status_code == 200
        # Recall reads only (../shared/spec/recall.md): the count stays 0, so the page shows none.
        brain, _ = download_brain(store.url, alice.token, brain_id)
        assert brain.read_json("index.json")["memories"][memory_id]["access_count"] == 0
        assert "Times recalled" not in page.text and "Last used" not in page.text
        assert "Created" in page.text


def test_the_search_box_asks_for_a_search(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url) as client:
        sign_in(client, alice.token)
        for path in ("/app/search", "/app/search?query=tea"):
            placeholder = re.search(r'<input type="search" name="query"[^>]*placeholder="([^"]+)"', client.get(path).text)
            assert placeholder and placeholder.group(1) == "Search your memories", path


def test_types_and_origins_read_in_the_pages_language(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        assert client.get("/app?lang=ja").status_code == 200
        form = client.get("/app/new").text
        # The choice reads in Japanese; the value sent stays the format's word.
        assert '<option value="preference">好み</option>' in form and '<option value="decision">決定</option>' in form
        new = client.post("/app/new", data={"csrf": csrf, "title": "Tea", "content": "I prefer green tea.",
                                            "type": "preference", "tags": ""})
        assert new.status_code == 303, new.text
        memory_id = new.headers["location"].split("/app/memory/")[1].split("?")[0]
        page = client.get(f"/app/memory/{memory_id}").text
        assert '<span class="badge">好み</span>' in page and re.search(r"<dd>本人</dd>", page)
        assert ">preference<" not in page and "<dd>user</dd>" not in page
        listed = client.get("/app/search", params={"query": "green tea"}).text
        assert '<span class="badge">好み</span>' in listed
        assert client.get("/app?lang=zh-Hans").status_code == 200
        page = client.get(f"/app/memory/{memory_id}").text
        assert '<span class="badge">偏好</span>' in page and "<dd>本人</dd>" in page
    # Stored as the format says, whatever the page's language.
    front = _front_matter(store, alice.token, brain_id, memory_id)
    assert "\ntype: preference" in front and '\norigin: "user"' in front

