"""Removing and adopting users against a real store with two workers (issue 24, items 3 and 11).

`user adopt` hands over the removed user's own brains only: their agent keys stay revoked
and their memberships in other users' brains stay gone. A removed creator's shared brain
is listed by `user orphans` with its members and how the operator manages it.
"""

from __future__ import annotations

from pathlib import Path

from tests.store.conftest import add_user, brain_files, cli, make_archive, start_store

ARCHIVE = make_archive(brain_files(3, "frank"), dirs=("memories",))


def test_adopt_hands_over_own_brains_only(tmp_path: Path) -> None:
    with start_store(tmp_path, workers=2) as store:
        data = store.data
        alice_token = add_user(data, "alice", "alice@example.org")
        frank_token = add_user(data, "frank", "frank@example.org")
        alice, frank = store.client(alice_token), store.client(frank_token)
        alice_brain = alice.get("/api/brains").json()[0]["id"]
        frank_brain = frank.get("/api/brains").json()[0]["id"]
        frank_id = frank.get("/auth/me").json()["user"]["id"]
        cli("share", alice_brain, "--with", "frank", "--role", "editor", data=data)
        cli("share", frank_brain, "--with", "alice", "--role", "viewer", data=data)
        own_key = cli("key", "create", "--user", "frank", "--brain", frank_brain, "--scope", "write",
                      data=data).stdout.strip().splitlines()[-1]
        alice_key = cli("key", "create", "--user", "frank", "--brain", alice_brain, "--scope", "write",
                        data=data).stdout.strip().splitlines()[-1]
        assert store.client(alice_key).get(f"/api/brains/{alice_brain}").status_code == 200

        cli("user", "remove", "frank", data=data)
        orphans = cli("user", "orphans", data=data).stdout
        assert frank_brain in orphans
        assert "shared with alice (viewer)" in orphans and f"brain-store share|unshare {frank_brain}" in orphans

        grace_token = cli("user", "adopt", frank_id, "grace", data=data).stdout.strip().splitlines()[-1]
        grace = store.client(grace_token)
        # every worker answers alike (each request on a new connection, until each worker answered)
        for key in (own_key, alice_key, frank_token):
            assert {r.status_code for r in store.on_every_worker("GET", "/api/brains", key)} == {401}
        for listed in store.on_every_worker("GET", "/api/brains", grace_token):
            assert {b["id"]: b["role"] for b in listed.json()} == {frank_brain: "owner"}
        assert {r.status_code for r in store.on_every_worker("GET", f"/api/brains/{alice_brain}", grace_token)} == {404}
        for members in store.on_every_worker("GET", f"/api/brains/{alice_brain}/members", alice_token):
            assert [m["name"] for m in members.json()["members"] if m["role"] != "owner"] == []
        r = grace.put(f"/api/brains/{alice_brain}/sync", files={"brain": ("b.tar.gz", ARCHIVE)})
        assert r.status_code == 404
        # the adopted brain keeps its own members: alice still sees frank's (now grace's) brain
        assert alice.get(f"/api/brains/{frank_brain}").json()["owner"] == "grace"
