"""A form writes to the brain its page was made for, whatever brain is in use when it is sent.

The brain in use is the account's: its MCP connections (brain_use) and other tabs switch it.
Each test renders a page, switches the brain in use between that request and the form's
(as another client would), and checks where the write landed, at a real store.

A page shown for a brain other than the one in use (`?brain=<id>`: a brain shared with the
person, or another of theirs) keeps to it: its links open that brain's pages, its forms write
there, and a brain the person cannot reach is refused, never replaced by the brain in use.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import httpx
import pytest

from ..conftest import RunningStore, auth, brains_of, direct_memorize, download_brain, shared_store
from ..review_support import flag_pairs_at_store, statuses_at_store
from ..test_e2e_mental import models_at_store
from ..test_e2e_sharing import share
from .conftest import app_client, sign_in
from .test_mental_http import model_at_store

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(120)


def two_brains(store: RunningStore, name: str) -> tuple[Any, str, str]:
    """A user with their own first brain (one memory in it) and a second brain `work`: (user, own id, work id)."""
    user = store.add_user(name)
    own = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, own, "The bins go out on Monday evenings.")
    work = httpx.post(f"{store.url}/api/brains", headers=auth(user.token), json={"name": "work"}, timeout=30).json()
    direct_memorize(store.url, user.token, work["id"], "Standup is at 9:30.")
    return user, own, work["id"]


def titles(store: RunningStore, token: str, brain_id: str) -> dict[str, dict[str, Any]]:
    """The memories of one brain at the store, by title."""
    brain, _ = download_brain(store.url, token, brain_id)
    return {entry["title"]: {**entry, "id": memory_id}
            for memory_id, entry in brain.read_json("index.json")["memories"].items()}


def form_brain(html: str) -> str:
    """The brain a page's form was made for (its hidden field)."""
    match = re.search(r'name="for_brain" value="([^"]+)"', html)
    assert match, "the form names no brain"
    return match.group(1)


def switch(client: Any, csrf: str, brain_id: str) -> None:
    """Switch the account's brain in use, as an assistant's brain_use or another tab does."""
    assert client.post("/app/brain", data={"csrf": csrf, "brain": brain_id}).status_code == 303


def test_a_new_memory_is_saved_in_the_brain_its_page_was_shown_for(store: RunningStore) -> None:
    alice, own, work = two_brains(store, "alice")
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        page = client.get("/app/new")
        assert page.status_code == 200 and form_brain(page.text) == own
        switch(client, csrf, work)  # between the page and the Save
        saved = client.post("/app/new", data={"csrf": csrf, "for_brain": form_brain(page.text), "title": "Passport",
                                              "content": "The passport is in the desk drawer.", "type": "learning",
                                              "tags": ""})
        assert saved.status_code == 303, saved.text
        # The memory's page (the link names the brain) shows it, though another brain is in use.
        assert f"brain={own}" in saved.headers["location"]
        shown = client.get(saved.headers["location"])
        assert shown.status_code == 200 and "The passport is in the desk drawer." in shown.text
        assert form_brain(shown.text) == own  # its buttons act on that brain too
    assert set(titles(store, alice.token, own)) == {"The bins go out on Monday evenings.", "Passport"}
    assert set(titles(store, alice.token, work)) == {"Standup is at 9:30."}


def test_an_edit_is_saved_in_the_brain_its_page_was_shown_for(store: RunningStore) -> None:
    bob, own, work = two_brains(store, "bob")
    memory_id = next(iter(titles(store, bob.token, own).values()))["id"]
    with app_client(store.url) as client:
        csrf = sign_in(client, bob.token)
        page = client.get(f"/app/memory/{memory_id}/edit")
        assert page.status_code == 200 and form_brain(page.text) == own
        switch(client, csrf, work)
        saved = client.post(f"/app/memory/{memory_id}/edit", data={
            "csrf": csrf, "for_brain": form_brain(page.text), "title": "Bins",
            "content": "The bins go out on Tuesday evenings now.", "type": "learning", "tags": ""})
        assert saved.status_code == 303, saved.text
    mine = titles(store, bob.token, own)
    assert mine["Bins"]["id"] != memory_id and mine["The bins go out on Monday evenings."]["superseded_by"]
    assert set(titles(store, bob.token, work)) == {"Standup is at 9:30."}


def test_a_form_for_a_brain_deleted_meanwhile_is_refused_and_saves_nowhere(store: RunningStore) -> None:
    carol, own, work = two_brains(store, "carol")
    with app_client(store.url) as client:
        csrf = sign_in(client, carol.token)
        switch(client, csrf, work)
        page = client.get("/app/new")
        assert form_brain(page.text) == work
        switch(client, csrf, own)
        deleted = httpx.delete(f"{store.url}/api/brains/{work}", headers=auth(carol.token), timeout=30)
        assert deleted.status_code in (200, 204), deleted.text
        refused = client.post("/app/new", data={"csrf": csrf, "for_brain": work, "title": "Lost",
                                                "content": "This must not land anywhere.", "type": "learning",
                                                "tags": ""})
        # The connector still lists the brain (its list is kept a while): the store refuses the push.
        assert refused.status_code == 400 and "the brain &#39;work&#39; was deleted" in refused.text, refused.text
        assert "This must not land anywhere." in refused.text  # the text comes back as typed
        # A link naming that brain says so too (not another brain's memory, not a 500).
        gone = client.get(f"/app/new?brain={work}")
        assert gone.status_code == 503 and "is gone, or no longer shared with you" in gone.text
    assert set(titles(store, carol.token, own)) == {"The bins go out on Monday evenings."}


def test_a_merge_is_saved_in_the_brain_the_review_page_was_shown_for(store: RunningStore) -> None:
    dora, own, work = two_brains(store, "dora")
    ((new, old),) = flag_pairs_at_store(store.url, dora.token, own, [
        ("The standup is at 9:30.", "We moved the standup to 10:00.", "update")])
    with app_client(store.url) as client:
        csrf = sign_in(client, dora.token)
        page = client.get("/app/review")
        assert page.status_code == 200 and "1 pair waiting" in page.text and form_brain(page.text) == own
        switch(client, csrf, work)
        merged = client.post("/app/review", data={
            "csrf": csrf, "for_brain": form_brain(page.text), "new": new, "old": old, "decision": "merge",
            "title": "Standup", "content": "The standup is at 10:00.", "type": "decision", "tags": ""})
        assert merged.status_code == 303 and f"brain={own}" in merged.headers["location"], merged.text
    _, statuses = statuses_at_store(store.url, dora.token, own)
    assert statuses[(new, old)] != "pending"
    mine = titles(store, dora.token, own)
    assert "Standup" in mine and mine["Standup"]["id"] not in (new, old)
    assert set(titles(store, dora.token, work)) == {"Standup is at 9:30."}


# ----- the links and forms of a page shown for a brain other than the one in use ------------------


def with_shared_team(store: RunningStore, name: str) -> tuple[Any, str, str, Any]:
    """A user whose brain in use is their own first brain (one memory in it), and a brain `team`
    (one memory in it) another user owns and shares with them as an editor: (user, own id, team
    id, the owner)."""
    owner = store.add_user(f"{name}-owner")
    user = store.add_user(name)
    own = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, own, "The bins go out on Monday evenings.")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(owner.token), json={"name": "team"}, timeout=30).json()
    share(store, team["id"], user, "editor")
    direct_memorize(store.url, owner.token, team["id"], "Standup is at 9:30.")
    return user, own, team["id"], owner


def main_links(html: str, under: str) -> list[str]:
    """The links of a page's main part to pages under ``under`` (e.g. "/app/memory/"), as followed."""
    main = html[html.index("<main"):html.index("</main>")]
    return [unescape(href) for href in re.findall(rf'href="({re.escape(under)}[^"]*)"', main)]


def test_the_links_inside_a_memory_page_open_memories_of_the_brain_it_was_shown_for(store: RunningStore) -> None:
    erin, own, team, olga = with_shared_team(store, "erin")
    standup = titles(store, olga.token, team)["Standup is at 9:30."]["id"]
    room = direct_memorize(store.url, olga.token, team, "The team room is on floor 2.")
    with app_client(store.url) as client:
        csrf = sign_in(client, erin.token)
        # Edited from a page of the shared brain into another memory's text: the new memory's page
        # links the one it replaces ("Validity and history", the linked memories) and the one it repeats.
        page = client.get(f"/app/memory/{room}/edit?brain={team}")
        assert page.status_code == 200 and form_brain(page.text) == team
        saved = client.post(f"/app/memory/{room}/edit", data={
            "csrf": csrf, "for_brain": team, "title": "Standup", "content": "Standup is at 9:30.",
            "type": "learning", "tags": ""})
        assert saved.status_code == 303 and f"brain={team}" in saved.headers["location"], saved.text
        shown = client.get(saved.headers["location"])
        assert shown.status_code == 200 and "Similar memories already in the brain" in shown.text
        links = main_links(shown.text, "/app/memory/")
        assert {room, standup} <= {link.split("/app/memory/")[1].split("?")[0] for link in links}, links
        for link in links:
            # Each opens that brain's memory, though another brain is in use (erin's own has none of them).
            assert link.endswith(f"?brain={team}"), link
            assert client.get(link).status_code == 200, link
        old = client.get(f"/app/memory/{room}?brain={team}")
        assert "An old version, kept as history" in old.text
        # Its "Replaced by" link stays in the brain too.
        assert any(link.endswith(f"?brain={team}") for link in main_links(old.text, "/app/memory/"))
        # Forgotten from its page, restored from that brain's archive page.
        forgot = client.post(f"/app/memory/{standup}/forget", data={"csrf": csrf, "for_brain": team})
        assert forgot.status_code == 303 and f"brain={team}" in forgot.headers["location"], forgot.text
        archive = client.get(f"/app/archive?brain={team}")
        assert main_links(archive.text, "/app/memory/") == [f"/app/memory/{standup}?brain={team}"]
        assert form_brain(archive.text) == team
        restored = client.post(f"/app/memory/{standup}/restore", data={"csrf": csrf, "for_brain": team})
        assert restored.status_code == 303 and f"brain={team}" in restored.headers["location"], restored.text
        # The brain in use is still erin's own: a page naming no brain is for it.
        assert form_brain(client.get("/app/new").text) == own
    assert "Standup is at 9:30." in titles(store, olga.token, team)
    assert set(titles(store, erin.token, own)) == {"The bins go out on Monday evenings."}


def test_the_mental_model_pages_of_a_shared_brain_read_and_write_that_brain(store: RunningStore) -> None:
    frank, own, team, oscar = with_shared_team(store, "frank")
    model_id, cited = model_at_store(store, oscar.token, team)
    with app_client(store.url) as client:
        csrf = sign_in(client, frank.token)
        listing = client.get(f"/app/mental?brain={team}")
        assert listing.status_code == 200 and form_brain(listing.text) == team  # the New mental model form
        [opened] = [link for link in main_links(listing.text, "/app/mental/") if model_id in link]
        assert opened == f"/app/mental/{model_id}?brain={team}"
        page = client.get(opened)
        assert page.status_code == 200 and "<strong>platform</strong>" in page.text
        assert form_brain(page.text) == team  # its Delete (and Refresh) forms
        assert main_links(page.text, "/app/mental") == [f"/app/mental?brain={team}"]  # "All mental models"
        [memory_link] = main_links(page.text, "/app/memory/")
        assert memory_link == f"/app/memory/{cited}?brain={team}" and client.get(memory_link).status_code == 200

        # Refresh, without a model on this server: refused on the model's own page, nothing written.
        refused = client.post(f"/app/mental/{model_id}/refresh", data={"csrf": csrf, "for_brain": team})
        assert refused.status_code == 409 and "Ask your assistant to refresh it" in refused.text, refused.text
        assert form_brain(refused.text) == team

        created = client.post("/app/mental", data={"csrf": csrf, "for_brain": team, "name": "Rituals",
                                                   "question": "Which rituals does the team keep?"})
        assert created.status_code == 303 and f"brain={team}" in created.headers["location"], created.text
        assert client.get(created.headers["location"]).status_code == 200
        deleted = client.post(f"/app/mental/{model_id}/delete", data={"csrf": csrf, "for_brain": team})
        assert deleted.status_code == 303, deleted.text
        assert deleted.headers["location"] == f"/app/mental?done=deleted&brain={team}"
    assert [model["name"] for model in models_at_store(store, oscar.token, team)] == ["Rituals"]
    assert models_at_store(store, frank.token, own) == []


def test_a_mental_model_form_for_a_brain_out_of_reach_is_refused_and_writes_nowhere(store: RunningStore) -> None:
    gina, own, team, _ = with_shared_team(store, "gina")
    stranger = store.add_user("stranger")
    foreign = brains_of(store.url, stranger.token)[0]["id"]
    direct_memorize(store.url, stranger.token, foreign, "Not gina's.")
    model_id, _ = model_at_store(store, stranger.token, foreign)
    with app_client(store.url) as client:
        csrf = sign_in(client, gina.token)
        for page in (f"/app/mental?brain={foreign}", f"/app/mental/{model_id}?brain={foreign}",
                     f"/app/history?brain={foreign}", f"/app/think?brain={foreign}"):
            gone = client.get(page)
            assert gone.status_code == 503 and "is gone, or no longer shared with you" in gone.text, page
        for path, form in (("/app/mental", {"name": "Mine now", "question": "Whose brain is this?"}),
                           (f"/app/mental/{model_id}/delete", {}), (f"/app/mental/{model_id}/refresh", {}),
                           ("/app/think/reflect", {"question": "What is in it?"}),
                           ("/app/think/extract", {"text": "Notes to save somewhere."})):
            refused = client.post(path, data={"csrf": csrf, "for_brain": foreign, **form})
            assert refused.status_code == 409 and "is gone, or no longer shared with you" in refused.text, path
        restore = client.post("/app/history/restore", data={"csrf": csrf, "for_brain": foreign, "version": "x"})
        assert restore.status_code == 409 and "is gone, or no longer shared with you" in restore.text
    assert [model["id"] for model in models_at_store(store, stranger.token, foreign)] == [model_id]
    assert models_at_store(store, gina.token, own) == [] and models_at_store(store, gina.token, team) == []
    assert set(titles(store, gina.token, own)) == {"The bins go out on Monday evenings."}


def test_a_snapshot_restored_from_another_brains_history_page_restores_that_brain(store: RunningStore) -> None:
    hana, own, work = two_brains(store, "hana")
    later = direct_memorize(store.url, hana.token, work, "The retro is on Fridays.")  # the 2nd upload: a snapshot
    own_before = titles(store, hana.token, own)
    with app_client(store.url) as client:
        csrf = sign_in(client, hana.token)  # her first brain is in use
        history = client.get(f"/app/history?brain={work}")
        assert history.status_code == 200 and "History of <bdi>work</bdi>" in history.text, history.text
        confirms = [link for link in main_links(history.text, "/app/history?confirm=")]
        assert confirms and all(link.endswith(f"&brain={work}") for link in confirms), confirms
        for link in main_links(history.text, "/app/history/"):  # What it changed, What changed
            assert link.endswith(f"&brain={work}") and client.get(link).status_code == 200, link
        confirm = client.get(confirms[0])
        assert "Restore this snapshot" in confirm.text and form_brain(confirm.text) == work
        diff = main_links(confirm.text, "/app/history/diff")[0]  # "See what would change", above the table
        version = re.search(r'name="version" value="([^"]+)"', confirm.text).group(1)
        assert diff == f"/app/history/diff?version={version}&brain={work}"
        changed = client.get(diff)
        assert "Added since then: 1" in changed.text
        assert main_links(changed.text, "/app/memory/") == [f"/app/memory/{later}?brain={work}"]
        assert main_links(changed.text, "/app/history")[0] == f"/app/history?brain={work}"  # Back to the history
        done = client.post("/app/history/restore", data={"csrf": csrf, "for_brain": work, "version": version})
        assert done.status_code == 303 and done.headers["location"] == f"/app/history?done=snapshot&brain={work}"
        assert "Snapshot restored" in client.get(done.headers["location"]).text
        # Served at once from the restored brain; the brain in use is still her first one.
        assert client.get(f"/app/memory/{later}?brain={work}").status_code == 404
        assert form_brain(client.get("/app/new").text) == own
    assert set(titles(store, hana.token, work)) == {"Standup is at 9:30."}
    assert titles(store, hana.token, own) == own_before
