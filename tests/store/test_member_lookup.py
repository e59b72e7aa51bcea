"""The members API finds a user as the rest of the store does (`UserRegistry.lookup`): a user id
in any case, a name or id with spaces around it. Both were a 404 "no such user"."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from tests.store.conftest import add_user, start_store


@pytest.mark.parametrize("spelled", ["id-upper", "id-padded", "name-padded"])
def test_a_member_named_by_an_upper_case_id_or_with_spaces_around_is_found(tmp_path: Path, spelled: str) -> None:
    with start_store(tmp_path) as store:
        owner = add_user(store.data, "alice", "alice@example.org")
        guest = add_user(store.data, "bob", "bob@example.org")
        with store.client(owner) as alice, store.client(guest) as bob:
            brain = alice.post("/api/brains", json={"name": "shared"}).json()["id"]
            bob_id = bob.get("/auth/me").json()["user"]["id"]
            assert bob_id == bob_id.lower()  # ids are written in lower case
            who = {"id-upper": bob_id.upper(), "id-padded": f"  {bob_id}\t", "name-padded": " bob "}[spelled]
            answer = alice.put(f"/api/brains/{brain}/members", json={"user": who, "role": "viewer"})
            assert answer.status_code == 200, answer.text
            assert {m["name"]: m["role"] for m in answer.json()["members"]} == {"alice": "owner", "bob": "viewer"}
            assert bob.get(f"/api/brains/{brain}").status_code == 200
            # taken off again by the same spelling
            assert alice.delete(f"/api/brains/{brain}/members/{quote(who)}").status_code == 204
            assert bob.get(f"/api/brains/{brain}").status_code == 404
            # another user's name in a different case is still no user (names are case-sensitive)
            assert alice.put(f"/api/brains/{brain}/members", json={"user": "BOB", "role": "viewer"}).status_code == 404
