"""A form writes to the brain its page was made for, whatever brain is in use when it is sent.

The brain in use is the account's: its MCP connections (brain_use) and other tabs switch it.
Each test renders a page, switches the brain in use between that request and the form's
(as another client would), and checks where the write landed, at a real store.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from ..conftest import RunningStore, auth, brains_of, direct_memorize, download_brain, shared_store
from ..review_support import flag_pairs_at_store, statuses_at_store
from .conftest import app_client, sign_in

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
