"""The web app over HTTP against a real store: sign-in, cookies, CSRF, read-only, sign-out, writes."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from connector.engine.format.archive import pack_archive
from connector.engine.format.brain import Brain
from connector.engine.writes.ops import Memorize, connector_memorize
from tests.engine.hybrid_support import make_brain

from ..conftest import RunningStore, brains_of, direct_memorize, download_brain, shared_store, upload_raw
from .conftest import app_client, csrf_of, sign_in

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(120)


def _entry(store: RunningStore, token: str, brain_id: str, memory_id: str) -> dict | None:
    brain, _ = download_brain(store.url, token, brain_id)
    return (brain.read_json("index.json") or {}).get("memories", {}).get(memory_id)


def test_pages_carry_a_strict_policy_and_need_a_session(store: RunningStore) -> None:
    with app_client(store.url) as client:
        assert client.get("/app").status_code == 303
        assert client.get("/app").headers["location"] == "/app/signin"
        assert client.get("/app/search?query=x").status_code == 303
        page = client.get("/app/signin")
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "http" not in csp
        assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
        assert "<script" not in page.text and "style=" not in page.text and "<style" not in page.text
        css = client.get("/app/static/app.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        assert client.get("/app/static/..%2Fsessions.py").status_code == 404


def test_session_cookie_attributes_and_server_side_sign_out(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url) as client:
        page = client.get("/app/signin")
        done = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": alice.token, "access": "write"})
        assert done.status_code == 303
        header = next(h for h in done.headers.get_list("set-cookie") if h.startswith("brain-app="))
        lowered = header.lower()
        assert "httponly" in lowered and "samesite=lax" in lowered and "path=/" in lowered
        assert "secure" not in lowered  # plain http on loopback
        max_age = int(lowered.split("max-age=")[1].split(";")[0])
        assert 0 < max_age <= 8 * 3600
        cookie_value = client.cookies.get("brain-app")
        assert cookie_value and alice.token not in header
        # The server keeps only a hash of the cookie value.
        web = client.app.state.webapp
        assert cookie_value not in repr(web.sessions._records._docs._documents.keys())
        csrf = csrf_of(client.get("/app").text)

        out = client.post("/app/signout", data={"csrf": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/app/signin?out=1"
        # The old cookie, replayed, no longer opens anything: the session ended server-side.
        client.cookies.set("brain-app", cookie_value)
        assert client.get("/app").status_code == 303


def test_cookies_are_secure_when_the_public_url_is_https(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url, base_url="https://brain.example", public_url="https://brain.example") as client:
        page = client.get("/app/signin")
        assert any(h.startswith("__Host-brain-app-signin=") and "secure" in h.lower()
                   for h in page.headers.get_list("set-cookie"))
        done = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": alice.token},
                           headers={"origin": "https://brain.example"})
        assert done.status_code == 303, done.text
        header = next(h for h in done.headers.get_list("set-cookie") if h.startswith("__Host-brain-app="))
        assert "secure" in header.lower() and "httponly" in header.lower()


def test_sign_in_needs_its_form_token_and_a_good_token(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url) as client:
        # No double-submit cookie/field pair: refused, no session.
        refused = client.post("/app/signin", data={"csrf": "made-up", "token": alice.token})
        assert refused.status_code == 403 and "brain-app=" not in " ".join(refused.headers.get_list("set-cookie"))
        page = client.get("/app/signin")
        wrong = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": "bst_wrong"})
        assert wrong.status_code == 401 and "not accepted" in wrong.text and "bst_wrong" not in wrong.text
        page = client.get("/app/signin")
        cross = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": alice.token},
                            headers={"origin": "https://evil.example"})
        assert cross.status_code == 403
        assert client.get("/app").status_code == 303


def test_an_empty_token_asks_for_one_and_takes_no_sign_in_attempt(store: RunningStore) -> None:
    alice = store.add_user("alice")
    # Two attempts a minute from this address: empty submissions must not use them up.
    with app_client(store.url, signin_attempts_per_min=2) as client:
        for empty in ("", "  ", "", ""):
            page = client.get("/app/signin")
            again = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": empty})
            assert again.status_code == 400 and "Enter your token." in again.text, again.text
        page = client.get("/app/signin")
        wrong = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": "bst_wrong"})
        assert wrong.status_code == 401 and "not accepted" in wrong.text
        page = client.get("/app/signin")
        done = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": alice.token})
        assert done.status_code == 303, done.text


def test_every_write_needs_the_csrf_token_and_same_origin(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    memory_id = direct_memorize(store.url, alice.token, brain_id, "The office wifi is called Nimbus.")
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        for data, headers in (({}, {}), ({"csrf": "wrong"}, {}),
                              ({"csrf": csrf}, {"origin": "https://evil.example"}),
                              ({"csrf": csrf}, {"sec-fetch-site": "cross-site"}),
                              ({"csrf": csrf}, {"origin": "null"})):
            refused = client.post(f"/app/memory/{memory_id}/pin", data=data, headers=headers)
            assert refused.status_code == 403, (data, headers)
        for path in ("/app/brain", f"/app/memory/{memory_id}/forget", f"/app/memory/{memory_id}/edit"):
            assert client.post(path, data={"content": "x", "brain": "default"}).status_code == 403
        assert _entry(store, alice.token, brain_id, memory_id).get("pinned") is not True
        done = client.post(f"/app/memory/{memory_id}/pin", data={"csrf": csrf},
                           headers={"origin": "http://127.0.0.1:8788", "sec-fetch-site": "same-origin"})
        assert done.status_code == 303
        assert _entry(store, alice.token, brain_id, memory_id)["pinned"] is True
        # "Origin: null" (a no-referrer policy) passes only when the browser says same-origin itself.
        done = client.post(f"/app/memory/{memory_id}/unpin", data={"csrf": csrf},
                           headers={"origin": "null", "sec-fetch-site": "same-origin"})
        assert done.status_code == 303
        assert _entry(store, alice.token, brain_id, memory_id)["pinned"] is False


def test_read_only_sign_in_sees_no_write_actions_and_is_refused(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    memory_id = direct_memorize(store.url, alice.token, brain_id, "The boiler service is in March.")
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token, access="read")
        page = client.get(f"/app/memory/{memory_id}")
        assert page.status_code == 200 and "Read-only sign-in" in page.text
        for word in (">Pin<", ">Forget<", ">Edit<", "/pin\"", "/forget\""):
            assert word not in page.text
        assert client.get(f"/app/memory/{memory_id}/edit").status_code == 403
        for action in ("pin", "forget", "edit"):
            refused = client.post(f"/app/memory/{memory_id}/{action}", data={"csrf": csrf, "content": "changed"})
            assert refused.status_code == 403 and "read-only" in refused.text
        assert client.post("/app/brain", data={"csrf": csrf, "brain": "default"}).status_code == 403
        entry = _entry(store, alice.token, brain_id, memory_id)
        assert entry is not None and entry.get("pinned") is not True
        # Signing out is not a write: a read-only session can end itself.
        assert client.post("/app/signout", data={"csrf": csrf}).status_code == 303


def test_content_is_sanitised(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    hostile = (
        "Notes about trains\n\n<script>alert('x')</script>\n\n<img src=x onerror=alert(1)>\n\n"
        "[click](javascript:alert(1)) [data](data:text/html;base64,PHNjcmlwdD4=)\n\n"
        "![tracker](https://tracker.example/pixel.png)\n\n<a href=\"https://ok.example\" onclick=\"x()\">raw</a>\n\n"
        "**bold** and [a real link](https://example.org/page)"
    )
    memory_id = direct_memorize(store.url, alice.token, brain_id, hostile)
    with app_client(store.url) as client:
        sign_in(client, alice.token)
        for page in (client.get(f"/app/memory/{memory_id}"), client.get("/app/search?query=trains")):
            assert page.status_code == 200
            html = page.text
            assert "<script" not in html and "<img" not in html
            # Raw HTML stays visible text; no element carries an event handler or a script URL.
            assert re.search(r"<[a-z][^>]*\son\w+=", html) is None
            assert 'href="javascript:' not in html and 'href="data:' not in html
            assert "<strong>bold</strong>" in html
            # The remote image is never loaded: it becomes a link naming it.
            assert "[image: tracker]" in html
        memory_page = client.get(f"/app/memory/{memory_id}").text
        assert 'href="https://example.org/page" rel="noopener noreferrer nofollow"' in memory_page


def test_history_lists_snapshots_shows_what_changed_and_restores(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    first = direct_memorize(store.url, alice.token, brain_id, "First note.")
    second = direct_memorize(store.url, alice.token, brain_id, "Second note.")
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token, access="read")
        page = client.get("/app/history")
        assert page.status_code == 200 and "What changed" in page.text and "Restore..." not in page.text
        refused = client.post("/app/history/restore", data={"csrf": csrf, "version": "x"})
        assert refused.status_code == 403
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        page = client.get("/app/history")
        versions = re.findall(rf"/app/history/diff\?version=([^\"&]+)&amp;brain={brain_id}\"", page.text)
        assert versions and "files" in page.text
        # The newest snapshot is the brain before the second note: that note was added since.
        changed = client.get(f"/app/history/diff?version={versions[0]}")
        assert changed.status_code == 200
        assert "Added since then: 1" in changed.text and f"/app/memory/{second}" in changed.text
        assert "Gone since then" not in changed.text
        assert client.get("/app/history/diff?version=19990101T000000.000000000").status_code == 404
        confirm = client.get(f"/app/history?confirm={versions[0]}")
        assert "Restore this snapshot" in confirm.text
        unknown = client.post("/app/history/restore", data={"csrf": csrf, "version": "19990101T000000.000000000"})
        assert unknown.status_code == 409
        assert {first, second} <= set(download_brain(store.url, alice.token, brain_id)[0]
                                      .read_json("index.json")["memories"])
        done = client.post("/app/history/restore", data={"csrf": csrf, "version": versions[0]})
        assert done.status_code == 303
        # The web app serves the restored brain at once; the store has it too.
        assert second not in download_brain(store.url, alice.token, brain_id)[0].read_json("index.json")["memories"]
        assert client.get(f"/app/memory/{second}").status_code == 404


def _device_writes(store: RunningStore, token: str, brain_id: str, memories: list[dict]) -> list[str]:
    """A command-line device writes memories (with types and tags) and pushes the archive."""
    brain, checksum = download_brain(store.url, token, brain_id) if _has_archive(store, token, brain_id) else (Brain(), None)
    ids = [connector_memorize(**memory).apply(brain, datetime.now(UTC))["stored"][0]["id"] for memory in memories]
    condition = {"If-Match": f'"{checksum}"'} if checksum else {"If-None-Match": "*"}
    assert upload_raw(store.url, token, brain_id, pack_archive(brain), condition).status_code == 200
    return ids


def _has_archive(store: RunningStore, token: str, brain_id: str) -> bool:
    return bool(brains_of(store.url, token)[0].get("checksum"))


def test_search_filters_and_browsing(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    decision, preference, old = _device_writes(store, alice.token, brain_id, [
        {"content": "We chose Postgres for the invoices service.", "type": "decision", "tags": ["work", "db"]},
        {"content": "Alice prefers Postgres over MySQL for side projects.", "type": "preference", "tags": ["home"]},
        {"content": "Postgres 9 was the version in use.", "type": "learning", "tags": ["work"],
         "valid_until": "2020-01-01T00:00:00.000Z"},
    ])
    with app_client(store.url) as client:
        sign_in(client, alice.token)

        def found(**params: str) -> list[str]:
            page = client.get("/app/search", params=params)
            assert page.status_code == 200, page.text
            return re.findall(r'href="/app/memory/(mem_[0-9a-f_]+)"', page.text)

        assert set(found(query="postgres")) == {decision, preference, old}
        assert found(query="postgres", type="decision") == [decision]
        assert set(found(query="postgres", tag="work")) == {decision, old}
        # Remember as of a date: what was valid then (the old fact had not expired in 2019).
        assert old in found(query="postgres version", as_of="2019-06-01")
        # Filters without a query: a browse list, newest first.
        assert found(tag="home") == [preference]
        # "Remember as of" without a query lists what was valid then, as it does with one: the old
        # fact expired in 2020, so it is in 2019's list and not in 2021's.
        assert old in found(as_of="2019-06-01")
        assert set(found(as_of="2021-06-01")) == {decision, preference}
        assert set(found(tag="work", as_of="2021-06-01")) == {decision}
        page = client.get("/app/search", params={"query": "postgres"})
        assert "relevance" in page.text and page.text.count('class="muted score"') == 3
        # A date that is none is said in the page's language, with or without a query, and nothing is listed.
        for params in ({"query": "postgres", "as_of": "yesterday"}, {"as_of": "yesterday"}):
            refused = client.get("/app/search", params=params)
            assert refused.status_code == 400, refused.text
            assert "“<bdi>yesterday</bdi>” is not a date: write it as 2026-03-01" in refused.text
            assert not re.findall(r'href="/app/memory/(mem_[0-9a-f_]+)"', refused.text)
        client.cookies.set("brain_lang", "zh-Hans")  # on the client: httpx deprecates per-request cookies
        chinese = client.get("/app/search", params={"as_of": "昨天"})
        client.cookies.delete("brain_lang")
        assert chinese.status_code == 400 and "不是日期" in chinese.text, chinese.text


def test_forgetting_a_salient_memory_asks_first_and_edit_errors_change_nothing(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain = Brain()
    stored = Memorize.from_request({"title": "Passport number", "type": "learning", "path": "personal/",
                                    "content": "Kept in the safe.", "salience": 0.9, "origin": "user"}).apply(
        brain, datetime.now(UTC))["stored"][0]
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain), {"If-None-Match": "*"}).status_code == 200
    memory_id = stored["id"]
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        asked = client.post(f"/app/memory/{memory_id}/forget", data={"csrf": csrf})
        assert asked.status_code == 409 and "protected" in asked.text and "Forget anyway" in asked.text
        assert memory_id in _live(store, alice.token, brain_id)
        bad_edit = client.post(f"/app/memory/{memory_id}/edit", data={"csrf": csrf, "content": "  ", "type": "learning"})
        assert bad_edit.status_code == 409 and "must not be empty" in bad_edit.text
        wrong_type = client.post(f"/app/memory/{memory_id}/edit", data={"csrf": csrf, "content": "x", "type": "nope"})
        assert wrong_type.status_code == 409
        assert set(_live(store, alice.token, brain_id)) == {memory_id}
        done = client.post(f"/app/memory/{memory_id}/forget", data={"csrf": csrf, "force": "1"})
        assert done.status_code == 303
        assert memory_id not in _live(store, alice.token, brain_id)
        assert client.post(f"/app/memory/{memory_id}/nonsense", data={"csrf": csrf}).status_code == 404


def test_editing_a_pinned_memory_moves_the_pin_to_the_new_version(store: RunningStore) -> None:
    """The pin stayed on the old, superseded version: session start served the text before the edit."""
    alice = store.add_user("alice-pin")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain = Brain()
    old_id = Memorize.from_request({"title": "Review rule", "type": "preference", "path": "rules/", "origin": "user",
                                    "content": "Reviews need one approval.", "pinned": True,
                                    "pin_scope": "project:web", "pin_priority": 3}).apply(
        brain, datetime.now(UTC))["stored"][0]["id"]
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain), {"If-None-Match": "*"}).status_code == 200
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        edited = client.post(f"/app/memory/{old_id}/edit", data={
            "csrf": csrf, "title": "Review rule", "content": "Reviews need two approvals.", "type": "preference"})
        assert edited.status_code == 303
    after, _ = download_brain(store.url, alice.token, brain_id)
    entries = after.read_json("index.json")["memories"]
    (new_id,) = [memory_id for memory_id in entries if memory_id != old_id]
    assert entries[old_id]["superseded_by"] == new_id and not entries[old_id].get("pinned")
    assert (entries[new_id]["pinned"], entries[new_id]["pin_scope"], entries[new_id]["pin_priority"]) == \
           (True, "project:web", 3)
    assert [pin["id"] for pin in after.read_json("pinned.json")["pins"]] == [new_id]


def _live(store: RunningStore, token: str, brain_id: str) -> dict:
    return download_brain(store.url, token, brain_id)[0].read_json("index.json")["memories"]


def test_a_hybrid_hit_of_a_chinese_or_japanese_query_says_what_found_it(store: RunningStore) -> None:
    """The exact engine reads ASCII words only, so every hit of a Chinese or Japanese query has
    relevance 0: its explanation names the query's words the memory holds (what the word channel
    matched), or says its meaning alone found it; it said "relevance 0"."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain, ids = make_brain()
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain)).status_code == 200
    with app_client(store.url, recall_mode="hybrid") as client:
        sign_in(client, alice.token)

        def explained(query: str, lang: str = "en") -> dict[str, str]:
            page = client.get("/app/search", params={"query": query, "lang": lang})
            assert page.status_code == 200
            return dict(re.findall(r'<h3><a href="/app/memory/(mem_[0-9a-f_]+)">.*?<p class="muted score">(.*?)</p>',
                                   page.text, re.S))

        found = explained("疫苗")
        assert "words of the query in it: 疫苗," in found[ids["猫的疫苗"]], found
        assert all("relevance 0," not in line for line in found.values()), found
        found = explained("海辺 散歩")
        assert "words of the query in it: 海辺, 散歩," in found[ids["週末の予定"]], found
        # Japanese for the Chinese memory's vaccination: no word (bigram) in common, found by meaning.
        found = explained("猫の予防接種")
        assert "no word of the query in it: found by its meaning," in found[ids["猫的疫苗"]], found
        # Translated where shown.
        assert "含まれる検索語 疫苗" in explained("疫苗", "ja")[ids["猫的疫苗"]]
        # A query the exact engine reads keeps its relevance.
        found = explained("postgresql")
        assert re.search(r"Score [\d.]+: relevance (1|0\.\d+),", found[ids["Database choice"]]), found


def test_development_mode_signs_in_the_local_user_without_a_token(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url, dev=True, dev_store_token=alice.token) as client:
        page = client.get("/app/signin")
        assert "Development mode" in page.text and 'name="token"' not in page.text
        done = client.post("/app/signin", data={"csrf": csrf_of(page.text), "access": "write"})
        assert done.status_code == 303
        home = client.get("/app")
        assert home.status_code == 200 and "default" in home.text


def test_search_recall_modes_find_other_languages_only_in_hybrid(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain, ids = make_brain()
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain)).status_code == 200
    cat = ids["猫的疫苗"]
    with app_client(store.url, recall_mode="exact") as client:  # a server set to exact
        sign_in(client, alice.token)

        def search(**params: str) -> tuple[int, str, list[str]]:
            page = client.get("/app/search", params=params)
            return page.status_code, page.text, re.findall(r'href="/app/memory/(mem_[0-9a-f_]+)"', page.text)

        # The control is labelled, lists both modes and shows the server's default as chosen.
        status, html, found = search(query="疫苗")
        assert status == 200 and found == []
        # Exact mode cannot read Chinese: the page says so and links the same search in hybrid mode.
        assert 'id="exact-cannot-read"' in html and "cannot search Chinese or Japanese text" in html
        assert 'href="/app/search?query=%E7%96%AB%E8%8B%97&amp;mode=hybrid"' in html
        assert 'id="no-good-match"' not in html
        assert 'id="exact-cannot-read"' not in search(query="saxophone", mode="exact")[1]
        assert '<label for="f-mode">Recall mode</label>' in html
        assert '<option value="exact" selected>Exact words</option>' in html
        assert '<option value="hybrid">Meaning and other languages (hybrid)</option>' in html
        assert search(query="疫苗", mode="exact")[2] == []
        # Hybrid finds the Chinese memory; the mode stays chosen and the score names its meaning similarity.
        status, html, found = search(query="疫苗", mode="hybrid")
        assert status == 200 and found and found[0] == cat
        assert '<option value="hybrid" selected>' in html and "meaning similarity 0." in html
        # Japanese ("walk by the sea") too, only in hybrid.
        weekend = ids["週末の予定"]
        assert weekend not in search(query="海辺 散歩", mode="exact")[2]
        assert search(query="海辺 散歩", mode="hybrid")[2][0] == weekend
        # Exact hits explain no similarity.
        assert "meaning similarity" not in search(query="postgresql", mode="exact")[1]
        # An unknown mode: a clear 400 that searches nothing and offers the default again.
        status, html, found = search(query="疫苗", mode="fuzzy<b>")
        assert status == 400 and found == [] and "Unknown recall mode" in html and "fuzzy" not in html
        assert '<option value="exact" selected>' in html
    with app_client(store.url) as client:  # the default mode is hybrid
        sign_in(client, alice.token)
        page = client.get("/app/search", params={"query": "疫苗"})
        assert page.status_code == 200 and '<option value="hybrid" selected>' in page.text
        assert re.findall(r'href="/app/memory/(mem_[0-9a-f_]+)"', page.text)[0] == cat
        assert 'id="no-good-match"' not in page.text
        # A topic the brain never mentions: no results, and the page says no memory matches well.
        for absent in ("saxophone lessons", "サックスの練習"):
            page = client.get("/app/search", params={"query": absent})
            assert page.status_code == 200 and "0 results" in page.text
            assert re.findall(r'href="/app/memory/(mem_[0-9a-f_]+)"', page.text) == []
            assert 'id="no-good-match"' in page.text and "No memory matches well." in page.text
