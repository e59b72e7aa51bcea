"""The Think page and the Mental models page's create over HTTP against a real store: without a model the
pages say what thinking needs, show the evidence pack and offer nothing that can only fail; with the
operator's model (the scripted model server, a real connector process) a person reflects with citations,
extracts from pasted text (external origin, held for review, all or nothing) and creates and refreshes
mental models. Refusals change nothing."""

from __future__ import annotations

import json
import re
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from connector.engine.tending.mental import MENTAL_FILE

from tests.connector.test_e2e_mental import models_at_store
from tests.connector.test_e2e_thinking import answer, fake_model, requests_of
from tests.connector.test_e2e_tools import connector

from ..conftest import RunningStore, auth, brains_of, direct_memorize, download_brain, memory_ids
from ..test_e2e_sharing import share
from .conftest import app_client, csrf_of, sign_in, signed_in_browser

pytestmark = pytest.mark.timeout(180)

NOTES = "Meeting notes: we agreed releases go out on Tuesdays; Alice asked for small PRs."
TWO_FACTS = {"memories": [
    {"title": "Release day", "type": "decision", "content": "Releases go out on Tuesdays.", "tags": ["release"]},
    {"title": "Review style", "type": "preference", "content": "Alice wants small PRs.", "tags": []},
]}


def store_state(store: RunningStore, token: str, brain_id: str) -> tuple[set[str], object]:
    brain, _ = download_brain(store.url, token, brain_id)
    return memory_ids(brain), brain.read_json(MENTAL_FILE)


def test_without_a_model_the_pages_say_what_thinking_needs_and_show_the_evidence(store: RunningStore) -> None:
    alice, bob = store.add_user("alice"), store.add_user("bob")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    deploys = direct_memorize(store.url, alice.token, brain_id, "Deploys: the billing service ships on Thursdays")
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        page = client.get("/app/think")
        assert page.status_code == 200 and "What thinking needs" in page.text
        assert "CONNECTOR_MODEL_URL" in page.text and "docs/thinking.md" in page.text
        # Nothing that can only fail: no extract form, the reflect button only shows the evidence.
        assert "/think/extract" not in page.text and ">Reflect<" not in page.text and ">Show the evidence<" in page.text
        # The pages speak the person's language: what thinking needs, in Chinese and Japanese.
        chinese = client.get("/app/think", headers={"Accept-Language": "zh-CN"}).text
        assert "此服务器没有可用于思考的模型" in chinese and ">显示证据<" in chinese and "CONNECTOR_MODEL_URL" in chinese
        japanese = client.get("/app/mental", headers={"Accept-Language": "ja"}).text
        assert "このサーバーには考えるためのモデルがない" in japanese and ">新しいメンタルモデル<" in japanese
        evidence = client.post("/app/think/reflect", data={"csrf": csrf, "question": "When does billing ship?"})
        assert evidence.status_code == 200 and f'/app/memory/{deploys}?brain={brain_id}"' in evidence.text
        assert ">Evidence<" in evidence.text and ">Answer<" not in evidence.text
        assert client.post("/app/think/reflect", data={"csrf": csrf, "question": "  "}).status_code == 400

        before = store_state(store, alice.token, brain_id)
        refused = client.post("/app/think/extract", data={"csrf": csrf, "text": NOTES})
        assert refused.status_code == 409 and "CONNECTOR_MODEL_URL" in refused.text
        assert store_state(store, alice.token, brain_id) == before

        # A model can still be created (an assistant refreshes it); its page offers no Refresh.
        created = client.post("/app/mental", data={"csrf": csrf, "name": "Deploys", "question": "When do we deploy?"})
        assert created.status_code == 303 and "done=created" in created.headers["location"]
        [model] = models_at_store(store, alice.token, brain_id)
        assert (model["name"], model["question"], model.get("text") or "") == ("Deploys", "When do we deploy?", "")
        page = client.get(created.headers["location"])
        assert page.status_code == 200 and "Mental model created" in page.text
        assert ">Refresh<" not in page.text and "CONNECTOR_MODEL_URL" in page.text and ">Delete<" in page.text
        # Bad input: the form comes back with the reason, nothing written.
        before = store_state(store, alice.token, brain_id)
        bad = client.post("/app/mental", data={"csrf": csrf, "name": "", "question": "Why?"})
        assert bad.status_code == 400 and 'class="error"' in bad.text and 'value="Why?"' in bad.text
        assert client.post("/app/mental", data={"name": "X", "question": "Y?"}).status_code == 403  # no CSRF token
        assert store_state(store, alice.token, brain_id) == before

    with app_client(store.url) as client:  # a read-only sign-in reads and sees the evidence, never writes
        csrf = sign_in(client, alice.token, access="read")
        assert 'action="/app/mental"' not in client.get("/app/mental").text
        assert client.post("/app/think/reflect", data={"csrf": csrf, "question": "billing"}).status_code == 200
        assert client.post("/app/mental", data={"csrf": csrf, "name": "X", "question": "Y?"}).status_code == 403
        assert client.post("/app/think/extract", data={"csrf": csrf, "text": NOTES}).status_code == 403
    assert store_state(store, alice.token, brain_id) == before

    share(store, brain_id, bob, "viewer")
    with app_client(store.url) as client:  # a viewer of the brain: the brain's role forbids, whatever the sign-in
        csrf = sign_in(client, bob.token)
        assert client.post("/app/brain", data={"csrf": csrf, "brain": brain_id}).status_code == 303
        assert 'action="/app/mental"' not in client.get("/app/mental").text
        refused = client.post("/app/mental", data={"csrf": csrf, "name": "X", "question": "Y?"})
        assert refused.status_code == 400 and "viewer" in refused.text
    assert store_state(store, alice.token, brain_id) == before


def test_with_the_operators_model_a_person_reflects_extracts_creates_and_refreshes(
        store: RunningStore, tmp_path: Path) -> None:
    alice, bob = store.add_user("alice"), store.add_user("bob")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    deploys = direct_memorize(store.url, alice.token, brain_id, "Deploys: the billing service ships on Thursdays")
    with fake_model(tmp_path) as (model_url, script, log):
        env = {"CONNECTOR_MODEL_URL": model_url, "CONNECTOR_MODEL": "fake-llm", "CONNECTOR_REPULL_TTL_MS": "1"}
        with connector(tmp_path / "c", store, env=env) as server, \
                closing(signed_in_browser(server.base_url, alice.token, "127.0.0.1")) as http:
            page = http.get("/app/think")
            csrf = csrf_of(page.text)
            assert "What thinking needs" not in page.text and ">Reflect<" in page.text
            assert "/think/extract" in page.text

            # ----- reflect: the model's answer with its citations linked; an id outside the evidence is dropped.
            answer(script, {"content": f"Billing ships on **Thursdays** [{deploys}] [mem_notreal00000]."})
            reflected = http.post("/app/think/reflect", data={"csrf": csrf, "question": "When does billing ship?"})
            assert reflected.status_code == 200 and "<strong>Thursdays</strong>" in reflected.text
            assert f'/app/memory/{deploys}?brain={brain_id}"' in reflected.text and "fake-llm" in reflected.text
            assert "mem_notreal00000" in reflected.text and "were removed" in reflected.text
            assert "When does billing ship?" in requests_of(log)[-1]["body"]["messages"][1]["content"]

            # ----- extract: one write of every candidate, external origin, held for approval.
            before = memory_ids(download_brain(store.url, alice.token, brain_id)[0])
            answer(script, {"content": json.dumps(TWO_FACTS)})
            extracted = http.post("/app/think/extract", data={"csrf": csrf, "text": NOTES, "title": "Team sync"})
            assert extracted.status_code == 200 and "Saved memories: 2" in extracted.text
            assert "Waiting for your approval: 2" in extracted.text
            brain, _ = download_brain(store.url, alice.token, brain_id)
            entries = brain.read_json("index.json")["memories"]
            saved = memory_ids(brain) - before
            assert {entries[memory_id]["title"] for memory_id in saved} == {"Release day", "Review style"}
            for memory_id in saved:
                assert f'/app/memory/{memory_id}?brain={brain_id}"' in extracted.text
                assert entries[memory_id]["origin"] == "external" and entries[memory_id]["quarantined"]
                assert "source:team-sync" in entries[memory_id]["tags"]

            # All or nothing: a candidate holding a credential, or an answer that is not JSON, saves none.
            written = memory_ids(download_brain(store.url, alice.token, brain_id)[0])
            for bad in ({"content": json.dumps({"memories": [
                            TWO_FACTS["memories"][0],
                            {"title": "Key", "type": "fact", "content": "AWS key AKIAIOSFODNN7EXAMPLE", "tags": []}]})},
                        {"content": "not json at all"}):
                answer(script, bad)
                refused = http.post("/app/think/extract", data={"csrf": csrf, "text": "Other notes", "title": ""})
                assert refused.status_code == 409, refused.text
                assert "nothing was written" in refused.text.lower(), refused.text[refused.text.find('role="alert"'):][:400]
                assert ">Other notes</textarea>" in refused.text
                assert memory_ids(download_brain(store.url, alice.token, brain_id)[0]) == written

            answer(script, {"content": json.dumps({"memories": []})})
            empty = http.post("/app/think/extract", data={"csrf": csrf, "text": "Small talk about the weather."})
            assert empty.status_code == 200 and "Nothing was saved" in empty.text
            assert "found nothing worth keeping" in empty.text
            assert memory_ids(download_brain(store.url, alice.token, brain_id)[0]) == written

            # ----- create a mental model, then refresh it with the model.
            created = http.post("/app/mental", data={"csrf": csrf, "name": "Release rhythm",
                                                     "question": "When do things ship?"})
            assert created.status_code == 303
            [model] = models_at_store(store, alice.token, brain_id)
            page = http.get(created.headers["location"])
            assert ">Refresh<" in page.text and "CONNECTOR_MODEL_URL" not in page.text
            answer(script, {"content": f"Billing ships on Thursdays [{deploys}]."})
            refreshed = http.post(f"/app/mental/{model['id']}/refresh", data={"csrf": csrf})
            assert refreshed.status_code == 303 and "done=refreshed" in refreshed.headers["location"]
            [model] = models_at_store(store, alice.token, brain_id)
            assert model["cited"] == [deploys] and "Thursdays" in model["text"]

        share(store, brain_id, bob, "viewer")
        with connector(tmp_path / "v", store, env=env) as server, \
                closing(signed_in_browser(server.base_url, bob.token, "127.0.0.1")) as http:
            csrf = csrf_of(http.get("/app").text)
            assert http.post("/app/brain", data={"csrf": csrf, "brain": brain_id}).status_code == 303
            page = http.get("/app/think")
            assert "/think/extract" not in page.text and "You are a viewer of this brain" in page.text
            served = len(requests_of(log))
            refused = http.post("/app/think/extract", data={"csrf": csrf, "text": NOTES})
            assert refused.status_code == 409 and "viewer" in refused.text
            assert len(requests_of(log)) == served  # refused before the model was asked
        assert memory_ids(download_brain(store.url, alice.token, brain_id)[0]) == written


def test_an_extraction_is_saved_in_the_brain_the_think_page_was_shown_for(store: RunningStore, tmp_path: Path) -> None:
    """The brain in use changes between the Think page and its Extract (another tab, an assistant's
    brain_use): what the model picked out is saved in the brain the page was shown for."""
    carol = store.add_user("carol")
    own = brains_of(store.url, carol.token)[0]["id"]
    direct_memorize(store.url, carol.token, own, "The cat is fed at seven.")
    work = httpx.post(f"{store.url}/api/brains", headers=auth(carol.token), json={"name": "work"}, timeout=30).json()
    direct_memorize(store.url, carol.token, work["id"], "Standup is at 9:30.")
    with fake_model(tmp_path) as (model_url, script, _log):
        env = {"CONNECTOR_MODEL_URL": model_url, "CONNECTOR_MODEL": "fake-llm"}
        with connector(tmp_path / "c", store, env=env) as server, \
                closing(signed_in_browser(server.base_url, carol.token, "127.0.0.1")) as http:
            page = http.get("/app/think")
            csrf = csrf_of(page.text)
            shown_for = re.search(r'name="for_brain" value="([^"]+)"', page.text)
            assert shown_for and shown_for.group(1) == own, "the extract form names no brain"
            assert http.post("/app/brain", data={"csrf": csrf, "brain": work["id"]}).status_code == 303
            answer(script, {"content": json.dumps(TWO_FACTS)})
            extracted = http.post("/app/think/extract", data={"csrf": csrf, "for_brain": shown_for.group(1),
                                                              "text": NOTES, "title": "Team sync"})
            assert extracted.status_code == 200 and "Saved memories: 2" in extracted.text, extracted.text
    titles = {brain: {entry["title"] for entry in download_brain(store.url, carol.token, brain)[0]
                      .read_json("index.json")["memories"].values()} for brain in (own, work["id"])}
    assert titles[own] == {"The cat is fed at seven.", "Release day", "Review style"}
    assert titles[work["id"]] == {"Standup is at 9:30."}


def test_reflect_and_refresh_from_a_shared_brains_pages_use_that_brain(store: RunningStore, tmp_path: Path) -> None:
    """A person whose brain in use is their own reflects on, and refreshes a mental model of, a brain
    another user shares with them, from its pages (``?brain=<id>``): the model reads that brain's
    memories and the refreshed model is written there; their own brain is untouched."""
    owner, dana = store.add_user("team-owner"), store.add_user("dana")
    own = brains_of(store.url, dana.token)[0]["id"]
    direct_memorize(store.url, dana.token, own, "The cat is fed at seven.")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(owner.token), json={"name": "team"}, timeout=30).json()["id"]
    share(store, team, dana, "editor")
    deploys = direct_memorize(store.url, owner.token, team, "Deploys: the billing service ships on Thursdays")
    own_before = store_state(store, dana.token, own)
    with fake_model(tmp_path) as (model_url, script, _log):
        env = {"CONNECTOR_MODEL_URL": model_url, "CONNECTOR_MODEL": "fake-llm", "CONNECTOR_REPULL_TTL_MS": "1"}
        with connector(tmp_path / "c", store, env=env) as server, \
                closing(signed_in_browser(server.base_url, dana.token, "127.0.0.1")) as http:
            page = http.get(f"/app/think?brain={team}")
            csrf = csrf_of(page.text)
            shown_for = re.findall(r'name="for_brain" value="([^"]+)"', page.text)
            assert shown_for == [team, team], "the Reflect and Extract forms name the brain"
            answer(script, {"content": f"Billing ships on **Thursdays** [{deploys}]."})
            reflected = http.post("/app/think/reflect", data={"csrf": csrf, "for_brain": team,
                                                              "question": "When does billing ship?"})
            # The team's memory was the evidence: cited, and linked in the team brain.
            assert reflected.status_code == 200 and "<strong>Thursdays</strong>" in reflected.text, reflected.text
            assert f'/app/memory/{deploys}?brain={team}"' in reflected.text
            assert re.findall(r'name="for_brain" value="([^"]+)"', reflected.text) == [team, team]

            created = http.post("/app/mental", data={"csrf": csrf, "for_brain": team, "name": "Release rhythm",
                                                     "question": "When do things ship?"})
            assert created.status_code == 303 and f"brain={team}" in created.headers["location"], created.text
            [model] = models_at_store(store, owner.token, team)
            model_page = http.get(created.headers["location"])
            assert re.search(rf'/mental/{model["id"]}/refresh">\s*<input type="hidden" name="csrf" value="[^"]+">\s*'
                             rf'<input type="hidden" name="for_brain" value="{team}">', model_page.text)
            answer(script, {"content": f"Billing ships on Thursdays [{deploys}]."})
            refreshed = http.post(f"/app/mental/{model['id']}/refresh", data={"csrf": csrf, "for_brain": team})
            assert refreshed.status_code == 303, refreshed.text
            assert refreshed.headers["location"] == f"/app/mental/{model['id']}?done=refreshed&brain={team}"
    [model] = models_at_store(store, owner.token, team)
    assert model["cited"] == [deploys] and "Thursdays" in model["text"]
    assert store_state(store, dana.token, own) == own_before
