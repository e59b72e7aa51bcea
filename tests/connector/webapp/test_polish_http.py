"""Small things that looked like bugs (#36 item 9), over HTTP against a real store process."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from connector.engine.format.brain import Brain
from connector.engine.tending.review import Flag, FlagPairs
from connector.engine.format.graphemes import shortened
from connector.engine.writes.memorize import CONNECTOR_SOURCE, MAX_CONTEXT_CHARS, MemoryInput, over_limit
from connector.engine.writes.ops import Memorize, connector_memorize
from connector.engine.format.views import ahead_of_higher_scores

from ..conftest import RunningStore, auth, brains_of, device_write, direct_memorize, download_brain, shared_store
from ..review_support import statuses_at_store
from .conftest import app_client, sign_in

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

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
    # On a store that shares brains the writer is named, as an assistant's memory names them.
    assert f'source: "brain-connector (web app), written by {alice.name}"' in _front_matter(store, alice.token, brain_id,
                                                                                            memory_id)


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


def _one_new_memory_in_two_pairs(store: RunningStore, token: str, brain_id: str) -> tuple[str, str, str]:
    """A device writes two old memories and a new one similar to both, and queues both pairs."""

    def write(brain: Brain) -> tuple[str, str, str]:
        now = datetime(2026, 3, 1, 12, tzinfo=UTC)
        old = [connector_memorize(text, agent="other device").apply(brain, now + timedelta(seconds=number))
               ["stored"][0]["id"] for number, text in enumerate(("The standup is at 9:30.", "Standup: half past nine."))]
        new = connector_memorize("We moved the standup to 10:00.", agent="other device").apply(
            brain, now + timedelta(seconds=5))["stored"][0]["id"]
        FlagPairs([Flag(new, old[0], "update", 0.9, "write", "other device"),
                   Flag(new, old[1], "update", 0.8, "write", "other device")], []).apply(brain, now)
        return new, old[0], old[1]

    return device_write(store.url, token, brain_id, write)


def test_keep_old_says_which_other_pairs_it_closed_and_no_choice_is_the_default(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    new, first, second = _one_new_memory_in_two_pairs(store, alice.token, brain_id)
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        page = client.get("/app/review").text
        assert "2 pairs waiting" in page
        # Before the click: each pair says what "Keep old" would close besides.
        assert page.count("“Keep old” also closes 1 other pair of the new memory.") == 2
        # No decision is the emphasised default (only the merge form's own submit, inside its details, is).
        decisions = re.findall(r'<input type="hidden" name="decision" value="(\w+)">\s*<button type="submit"([^>]*)>', page)
        assert sorted(decision for decision, _ in decisions) == sorted(["keep_new", "keep_old", "dismiss"] * 2)
        assert not any("primary" in attributes for _, attributes in decisions)
        done = client.post("/app/review", data={"csrf": csrf, "new": new, "old": first, "decision": "keep_old"})
        assert done.status_code == 303, done.text
        assert "closed=1" in done.headers["location"] and second in done.headers["location"]
        after = client.get(done.headers["location"]).text
        assert "It also closed 1 other pair that had the same memory (it left the brain)." in after
        assert f'/app/memory/{second}?brain={brain_id}"><bdi>Standup: half past nine.</bdi></a>' in after
        assert "Nothing is waiting for review." in after
        # A made-up or foreign id in the address shows nothing it should not.
        forged = client.get("/app/review?done=keep_old&closed=3&with=mem_20200101_000000_aaaaaa,%3Cscript%3E").text
        forged = forged[forged.index("<main"):forged.index("</main>")]
        assert "It also closed 3 other pairs" in forged and "<script>" not in forged and "mem_20200101" not in forged
    _, statuses = statuses_at_store(store.url, alice.token, brain_id)
    assert statuses == {(new, first): "kept_old", (new, second): "pending"}  # closed as its memory left, not decided


def test_the_hits_listed_above_higher_scores_are_found() -> None:
    # The strong exact hit first, then by fused score: only the first is out of score order.
    assert ahead_of_higher_scores([0.41, 0.83, 0.80, 0.55]) == [0]
    assert ahead_of_higher_scores([0.9, 0.8, 0.8, 0.1]) == []  # ties and order by score: no hint
    assert ahead_of_higher_scores([0.5, 0.6, 0.4, 0.45]) == [0, 2]
    assert ahead_of_higher_scores([]) == []


def test_hybrid_results_in_score_order_carry_no_reordering_hint(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    for text in ("Database connection pools reuse open connections to the server.",
                 "How many database connections a web app should keep open.",
                 "The tomatoes need water every morning in July."):
        direct_memorize(store.url, alice.token, brain_id, text)
    with app_client(store.url) as client:
        sign_in(client, alice.token)
        page = client.get("/app/search", params={"query": "keeping db connections open", "mode": "hybrid"}).text
        scores = [float(score) for score in re.findall(r'<p class="muted score">Score ([\d.]+):', page)]
        assert len(scores) >= 2 and scores == sorted(scores, reverse=True)
        assert "Listed above higher scores" not in page


def _time_instants(html: str) -> list[str]:
    return re.findall(r'<time datetime="([^"]+)"', html)


def test_history_rows_are_versions_by_when_written_with_a_current_row_and_consecutive_changes(
        store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    first = direct_memorize(store.url, alice.token, brain_id, "First note: the boiler.")
    second = direct_memorize(store.url, alice.token, brain_id, "Second note: the bike.")
    third = direct_memorize(store.url, alice.token, brain_id, "Third note: the garden.")
    listed = httpx.get(f"{store.url}/api/brains/{brain_id}/versions", headers=auth(alice.token), timeout=30).json()
    newer, older = listed["versions"]  # the 2nd and the 1st upload, kept when the next one came
    # Written when its upload came, replaced when the next one did: the same instant in one upload.
    assert newer["written_at"] == older["date"] and newer["written_at"] < newer["date"]
    record = brains_of(store.url, alice.token)[0]
    with app_client(store.url) as client:
        sign_in(client, alice.token)
        page = client.get("/app/history").text
        rows = re.findall(r"<tr>\s*<td>(.*?)</tr>", page, re.S)
        assert len(rows) == 3
        assert "current" in rows[0] and "Restore..." not in rows[0] and "/app/history/diff" not in rows[0]
        # Each row's first instant is when that version was written; a snapshot's second, when it was replaced.
        written = [_time_instants(row)[0][:19] for row in rows]
        assert written == [record["last_synced_at"][:19], newer["written_at"][:19], older["written_at"][:19]]
        assert _time_instants(rows[1])[1][:19] == newer["date"][:19]
        assert "oldest kept" in rows[2] and "/app/history/changes" not in rows[2]
        # What each version changed from the one before it: the versions are told apart.
        links = re.findall(r'/app/history/changes\?version=([^"&]+)&amp;brain=([^"]+)"', page)
        assert links == [("current", brain_id), (newer["version"], brain_id)]
        now = client.get("/app/history/changes?version=current").text
        assert "Added in this version: 1" in now and f"/app/memory/{third}" in now and f"/app/memory/{second}" not in now
        middle = client.get(f"/app/history/changes?version={newer['version']}").text
        assert "Added in this version: 1" in middle and f"/app/memory/{second}" in middle
        assert f"/app/memory/{third}" not in middle and f"/app/memory/{first}" not in middle
        oldest = client.get(f"/app/history/changes?version={older['version']}").text
        assert "oldest version the store keeps" in oldest
        assert client.get("/app/history/changes?version=19990101T000000.000000000").status_code == 404


def test_a_memory_with_a_thousand_long_tags_shows_some_and_says_how_many_more(store: RunningStore) -> None:
    """An archive another client wrote may carry memories of 1,000 tags of 1,000 characters (more
    than any write here takes): the memory page shows 100 of them, the search results 20, each cut
    to 300 characters, then "and N more"; the page weighed megabytes. The Edit form keeps them all."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    tags = [f"tag{number:04d}-" + "x" * 992 + "-end" for number in range(1000)]
    huge = MemoryInput(title="Boiler tags", type="learning", content="The boiler is serviced in October.",
                       path="notes/", tags=tags)
    assert over_limit(huge) is not None  # nothing written here takes it: only another client's archive
    memory_id = device_write(store.url, alice.token, brain_id,
                             lambda brain: Memorize([huge]).apply(brain, datetime.now(UTC))["stored"][0]["id"])
    with app_client(store.url) as client:
        sign_in(client, alice.token)
        page = client.get(f"/app/memory/{memory_id}")
        assert page.status_code == 200
        shown = re.findall(r"<li><bdi>(tag\d{4}-x*…)</bdi></li>", page.text)
        assert shown == [shortened(tag, MAX_CONTEXT_CHARS) for tag in tags[:100]]
        assert all(len(tag) == MAX_CONTEXT_CHARS for tag in shown)
        assert "and 900 more" in page.text and "-end" not in page.text and "tag0100-" not in page.text
        assert len(page.content) < 100_000
        found = client.get("/app/search", params={"query": "boiler serviced", "mode": "exact"})
        assert found.status_code == 200 and "Boiler tags" in found.text
        assert re.findall(r"<li><bdi>tag(\d{4})-x*…</bdi></li>", found.text) == [f"{n:04d}" for n in range(20)]
        assert "and 980 more" in found.text and "-end" not in found.text
        edit = client.get(f"/app/memory/{memory_id}/edit")
        assert edit.status_code == 200 and ", ".join(tags) in edit.text  # an edit drops none of them
