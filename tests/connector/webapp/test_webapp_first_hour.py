"""The web app as a new user meets it: a welcome instead of a warning, a New memory page
(same write path, CSRF and role checks as an edit), and the recent memories with paging."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta

import pytest

from connector.engine.format.archive import pack_archive
from connector.engine.format.brain import Brain
from connector.engine.writes.ops import connector_memorize

from ..conftest import RunningStore, brains_of, download_brain, shared_store, upload_raw
from .conftest import app_client, sign_in

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(120)
SAME_ORIGIN = {"origin": "http://127.0.0.1:8788"}


def _memories(store: RunningStore, token: str, brain_id: str) -> dict:
    brain, _ = download_brain(store.url, token, brain_id)
    return (brain.read_json("index.json") or {}).get("memories", {})


def test_a_new_user_is_welcomed_and_told_what_to_do_next(store: RunningStore) -> None:
    newcomer = store.add_user("newcomer")
    with app_client(store.url) as client:
        sign_in(client, newcomer.token)
        home = client.get("/app").text
        assert "Welcome: your brain is ready" in home
        assert 'href="/app/new"' in home and 'href="/app/transfer"' in home
        assert "different account" not in home and "no-cloud-brain" not in home
        assert 'class="notice"' not in home


def test_new_memory_is_saved_through_the_write_path_with_its_checks(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    form = {"title": "Kettle descaling", "content": "Descale the **kettle** with citric acid monthly.",
            "type": "decision", "tags": "home, kitchen"}
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        page = client.get("/app/new")
        assert page.status_code == 200 and 'action="/app/new"' in page.text
        # Without the form's token, or from another site: refused, nothing saved.
        assert client.post("/app/new", data=form).status_code == 403
        assert client.post("/app/new", data={**form, "csrf": csrf},
                           headers={"origin": "https://evil.example"}).status_code == 403
        # Refused input comes back as typed, with the reason, and saves nothing.
        empty = client.post("/app/new", data={**form, "csrf": csrf, "content": "  "}, headers=SAME_ORIGIN)
        assert empty.status_code == 400 and "must not be empty" in empty.text and "Kettle descaling" in empty.text
        assert not brains_of(store.url, alice.token)[0]["checksum"]

        done = client.post("/app/new", data={**form, "csrf": csrf}, headers=SAME_ORIGIN)
        assert done.status_code == 303, done.text
        memory_id = re.fullmatch(r"/app/memory/(mem_[0-9a-f_]+)\?done=new", done.headers["location"]).group(1)
        entry = _memories(store, alice.token, brain_id)[memory_id]
        assert entry["title"] == "Kettle descaling" and entry["type"] == "decision"
        assert entry["tags"] == ["home", "kitchen"]
        shown = client.get(done.headers["location"]).text
        assert "Saved." in shown and "citric acid" in shown

    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token, access="read")
        assert 'href="/app/new"' not in client.get("/app").text
        assert client.get("/app/new").status_code == 403
        refused = client.post("/app/new", data={**form, "csrf": csrf, "title": "Not this"}, headers=SAME_ORIGIN)
        assert refused.status_code == 403 and "read-only" in refused.text
    assert len(_memories(store, alice.token, brain_id)) == 1


def test_home_lists_recent_memories_newest_first_with_paging(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain = Brain()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [connector_memorize(f"Note number {n} about the garden.", title=f"Garden note {n}")
           .apply(brain, start + timedelta(hours=n))["stored"][0]["id"] for n in range(25)]
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain), {"If-None-Match": "*"}).status_code == 200
    newest_first = ids[::-1]
    with app_client(store.url) as client:
        sign_in(client, alice.token)

        def listed(page: str) -> tuple[list[str], str]:
            html = client.get("/app", params={"page": page} if page else None).text
            section = html.split('id="recent-h"', 1)[1].split("</section>", 1)[0]
            return re.findall(r'href="/app/memory/(mem_[0-9a-f_]+)"', section), html

        first, html = listed("")
        assert first == newest_first[:20]
        assert '<a href="#recent-h">25</a>' in html  # the count leads to the list
        assert "Page 1 of 2" in html and 'href="/app?page=2#recent-h"' in html and "Welcome" not in html
        second, html = listed("2")
        assert second == newest_first[20:] and 'href="/app?page=1#recent-h"' in html
        assert listed("99")[0] == second and listed("x")[0] == first  # out of range or not a number: clamped


def test_the_sign_in_page_says_truly_where_the_token_is_kept(store: RunningStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with app_client(store.url) as client:
        assert "kept only in this server's memory" in client.get("/app/signin").text
    with app_client(store.url, state_dir=tmp_path / "state") as client:
        page = client.get("/app/signin").text
        assert "kept only in this server's memory" not in page
        assert "sealed (encrypted) in this server's state (its directory or bucket)" in page


def test_a_sign_in_while_the_store_is_down_is_logged_with_why(caplog: pytest.LogCaptureFixture) -> None:
    from tests.support.processes import free_port

    from .conftest import csrf_of

    nowhere = f"http://127.0.0.1:{free_port()}"
    token = "bst_" + "Q" * 43
    with app_client(nowhere) as client, caplog.at_level("WARNING", logger="connector.identity"):
        page = client.get("/app/signin")
        done = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": token})
        assert done.status_code == 503 and "cannot be reached" in done.text
    logged = [record.getMessage() for record in caplog.records if record.name == "connector.identity"]
    assert any(f"store unreachable at {nowhere}/auth/me (ConnectError" in line for line in logged), logged
    assert token not in caplog.text


def test_titles_read_without_markdown_and_times_readably(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain = Brain()
    stored = connector_memorize("The pot on the balcony is blue.", title="**blue flowerpot**")
    # Written by another client, as the reference would: the title keeps its Markdown in the brain.
    stored.memories[0] = dataclasses.replace(stored.memories[0], title="**blue flowerpot**")
    memory_id = stored.apply(brain, datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC))["stored"][0]["id"]
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain), {"If-None-Match": "*"}).status_code == 200
    with app_client(store.url) as client:
        sign_in(client, alice.token)
        home = client.get("/app").text
        assert "><bdi>blue flowerpot</bdi></a>" in home and "**blue flowerpot**" not in home
        page = client.get(f"/app/memory/{memory_id}").text
        assert "<h1><bdi>blue flowerpot</bdi>" in page and "**" not in page
        # Times: readable, the exact instant kept in the <time> element.
        assert re.search(r'<time datetime="2026-03-01T12:00:00\.123Z" title="[^"]+">1 Mar 2026, 12:00 UTC</time>', page)
        assert re.search(r"<time datetime=\"[^\"]+\" title=\"[^\"]+\">\d{1,2} \w{3} \d{4}, \d\d:\d\d UTC</time>", home)
        visible = re.sub(r"<[^>]+>", " ", page)
        assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", visible), "a raw ISO instant is shown as text"


def test_a_new_memory_holding_a_credential_is_refused_as_an_edit_is(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        refused = client.post("/app/new", data={"csrf": csrf, "title": "AWS", "type": "learning", "tags": "",
                                                "content": "The key is AKIAIOSFODNN7EXAMPLE for the bucket."},
                              headers=SAME_ORIGIN)
        assert refused.status_code == 400 and "Leave the secret out" in refused.text
    assert not brains_of(store.url, alice.token)[0]["checksum"]
