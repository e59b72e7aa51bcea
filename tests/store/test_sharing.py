"""Shared brains and agent keys over HTTP against a real store with two workers.

The permission matrix: every brain route x every kind of caller (creator, second owner,
editor, viewer, outsider, agent keys of each scope, a key for another brain, an expired
key, a revoked key) -> the status the permission table (store/auth/permissions.py) says.
Then: revocation and role removal take effect within a second on every worker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.store.conftest import Store, add_user, brain_files, cli, make_archive, start_store

ARCHIVE = make_archive(brain_files(6, "shared"), dirs=("memories",))
OTHER = make_archive(brain_files(6, "other"), dirs=("memories",))


@dataclass
class World:
    store: Store
    brain: str  # created by "alice", shared with the others
    spare: str  # alice's second brain, not shared
    tokens: dict[str, str]  # caller -> bearer token

    def client(self, who: str) -> httpx.Client:
        return self.store.client(self.tokens[who])


def _last_line(result: object) -> str:
    return result.stdout.strip().splitlines()[-1]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("sharing")
    with start_store(tmp, workers=2, env={"STORE_SNAPSHOTS": "100"}) as store:
        data = store.data
        tokens = {name: add_user(data, name, f"{name}@example.org") for name in
                  ("alice", "olga", "eddie", "vera", "otto", "pia")}
        alice = store.client(tokens["alice"])
        brain = alice.get("/api/brains").json()[0]["id"]
        spare = alice.post("/api/brains", json={"name": "spare"}).json()["id"]
        assert alice.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", OTHER)}).status_code == 200
        assert alice.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", ARCHIVE)}).status_code == 200
        cli("share", brain, "--with", "olga", "--role", "owner", data=data)
        cli("share", brain, "--with", "eddie@example.org", "--role", "editor", data=data)
        cli("share", brain, "--with", "vera", "--role", "viewer", data=data)

        def key(user: str, scope: str, on: str = brain, *extra: str) -> str:
            return _last_line(cli("key", "create", "--user", user, "--brain", on, "--scope", scope, *extra, data=data))

        tokens["key-read"] = key("alice", "read", brain, "--label", "reader")
        tokens["key-write"] = key("alice", "write")
        tokens["editor-key-write"] = key("eddie", "write")
        tokens["viewer-key-write"] = key("vera", "write")
        tokens["key-other-brain"] = key("alice", "write", spare)
        tokens["key-revoked"] = key("alice", "write")
        prefix = tokens["key-revoked"][:12]
        cli("key", "revoke", prefix, data=data)
        # an expired key: written with an expiry already past (the CLI only takes future ones)
        from store.sharing.registry import SharingRegistry

        registry = SharingRegistry(data)
        alice_id = alice.get("/auth/me").json()["user"]["id"]
        tokens["key-expired"] = registry.create_key(alice_id, [brain], "write",
                                                    expires_at="2020-01-01T00:00:00.000000Z")[1]
        yield World(store, brain, spare, tokens)


CALLERS = ["alice", "olga", "eddie", "vera", "otto", "key-read", "key-write", "editor-key-write",
           "viewer-key-write", "key-other-brain", "key-expired", "key-revoked"]

# action -> expected status per caller (in CALLERS order)
MATRIX: dict[str, list[int]] = {
    #              alice olga eddie vera otto  kr   kw  ekw  vkw  kob  kexp krev
    "record":     [200, 200, 200, 200, 404, 200, 200, 200, 200, 404, 401, 401],
    "download":   [200, 200, 200, 200, 404, 200, 200, 200, 200, 404, 401, 401],
    "head":       [200, 200, 200, 200, 404, 200, 200, 200, 200, 404, 401, 401],
    "versions":   [200, 200, 200, 200, 404, 200, 200, 200, 200, 404, 401, 401],
    "upload":     [200, 200, 200, 403, 404, 403, 200, 200, 403, 404, 401, 401],
    "restore":    [200, 200, 403, 403, 404, 403, 403, 403, 403, 404, 401, 401],
    # the owners' delete (alice, olga) runs last, in test_owner_deletes_shared_brain_last
    "members":    [200, 200, 200, 200, 404, 200, 200, 200, 200, 404, 401, 401],
    "set_member": [200, 200, 403, 403, 404, 403, 403, 403, 403, 404, 401, 401],
    "audit":      [200, 200, 403, 403, 404, 403, 403, 403, 403, 404, 401, 401],
    "keys":       [200, 200, 200, 200, 200, 403, 403, 403, 403, 403, 401, 401],
    "delete":     [0, 0, 403, 403, 404, 403, 403, 403, 403, 404, 401, 401],
}


def _do(world: World, who: str, action: str) -> int:
    b = world.brain
    with world.client(who) as c:
        if action == "record":
            return c.get(f"/api/brains/{b}").status_code
        if action == "download":
            return c.get(f"/api/brains/{b}/sync").status_code
        if action == "head":
            return c.head(f"/api/brains/{b}/sync").status_code
        if action == "versions":
            return c.get(f"/api/brains/{b}/versions").status_code
        if action == "upload":
            return c.put(f"/api/brains/{b}/sync", files={"brain": ("b.tar.gz", ARCHIVE)}).status_code
        if action == "restore":
            with world.client("alice") as owner:
                name = owner.get(f"/api/brains/{b}/versions").json()["versions"][0]["version"]
            return c.post(f"/api/brains/{b}/versions/{name}/restore").status_code
        if action == "members":
            return c.get(f"/api/brains/{b}/members").status_code
        if action == "set_member":
            return c.put(f"/api/brains/{b}/members", json={"user": "pia", "role": "viewer"}).status_code
        if action == "audit":
            return c.get(f"/api/brains/{b}/audit").status_code
        if action == "keys":
            return c.get("/api/keys").status_code
        if action == "delete":
            return c.delete(f"/api/brains/{b}").status_code
    raise AssertionError(action)


@pytest.mark.parametrize("action", list(MATRIX))
def test_permission_matrix(world: World, action: str) -> None:
    """Each caller gets exactly the status the permission table gives (twice: both workers)."""
    expected = dict(zip(CALLERS, MATRIX[action], strict=True))
    got = {who: [_do(world, who, action) for _ in range(2)] for who, status in expected.items() if status}
    want = {who: [status, status] for who, status in expected.items() if status}
    assert got == want


def test_listing_shows_shared_brains_with_role_and_owner(world: World) -> None:
    """Members see the brain with their role and the creator's name; a key sees only its brains."""
    def listing(who: str) -> dict[str, tuple[str, str]]:
        with world.client(who) as c:
            r = c.get("/api/brains")
            assert r.status_code == 200
            return {b["id"]: (b["role"], b["owner"]) for b in r.json()}

    assert listing("alice") == {world.brain: ("owner", "alice"), world.spare: ("owner", "alice")}
    assert listing("eddie")[world.brain] == ("editor", "alice")
    assert listing("vera")[world.brain] == ("viewer", "alice")
    assert listing("olga")[world.brain] == ("owner", "alice")
    assert world.brain not in listing("otto")
    # A key's listing shows the role it acts with: its user's, capped by its scope.
    assert listing("key-read") == {world.brain: ("viewer", "alice")}
    assert listing("key-other-brain") == {world.spare: ("editor", "alice")}
    assert listing("viewer-key-write") == {world.brain: ("viewer", "alice")}


def test_keys_cannot_create_brains(world: World) -> None:
    with world.client("key-write") as c:
        assert c.post("/api/brains", json={"name": "x"}).status_code == 403


def test_members_keys_and_audit_over_http(world: World) -> None:
    """Owners manage members; users make, list and revoke their own keys; owners read the audit."""
    b = world.brain
    with world.client("alice") as alice, world.client("eddie") as eddie, world.client("otto") as otto:
        # What the matrix may or may not have done first on this worker: pia a viewer, a restore.
        assert alice.put(f"/api/brains/{b}/members", json={"user": "pia", "role": "viewer"}).status_code == 200
        name = alice.get(f"/api/brains/{b}/versions").json()["versions"][0]["version"]
        assert alice.post(f"/api/brains/{b}/versions/{name}/restore").status_code == 200
        members = alice.put(f"/api/brains/{b}/members", json={"user": "otto@example.org", "role": "viewer"})
        assert members.status_code == 200
        assert {m["name"]: m["role"] for m in members.json()["members"]} == {
            "alice": "owner", "olga": "owner", "eddie": "editor", "vera": "viewer", "otto": "viewer", "pia": "viewer"}
        assert members.json()["members"][0]["name"] == "alice"  # the creator first
        assert otto.get(f"/api/brains/{b}/sync").status_code == 200
        assert alice.put(f"/api/brains/{b}/members", json={"user": "otto", "role": "boss"}).status_code == 400
        assert alice.put(f"/api/brains/{b}/members", json={"user": "nobody", "role": "viewer"}).status_code == 404
        assert alice.put(f"/api/brains/{b}/members", json={"user": "alice", "role": "viewer"}).status_code == 409
        assert alice.delete(f"/api/brains/{b}/members/alice").status_code == 409  # the creator stays owner
        assert eddie.delete(f"/api/brains/{b}/members/otto").status_code == 403
        assert otto.delete(f"/api/brains/{b}/members/otto").status_code == 204  # leaving
        assert otto.get(f"/api/brains/{b}/sync").status_code == 404
        assert alice.delete(f"/api/brains/{b}/members/pia").status_code == 204
        assert alice.delete(f"/api/brains/{b}/members/pia").status_code == 404

        # keys: made for brains the caller has a role on, shown once, listed by prefix, revoked at once
        assert otto.post("/api/keys", json={"brains": [b], "scope": "read"}).status_code == 404
        assert eddie.post("/api/keys", json={"brains": [b], "scope": "admin"}).status_code == 400
        assert eddie.post("/api/keys", json={"brains": [b], "scope": "read", "expires": "soon"}).status_code == 400
        made = eddie.post("/api/keys", json={"brains": [b], "scope": "write", "label": "ci", "expires": "1d"})
        assert made.status_code == 201
        key = made.json()["key"]
        assert key.startswith("bsk_") and made.json()["prefix"] == key[:12] and made.json()["expires_at"]
        listed = eddie.get("/api/keys").json()["keys"]
        assert [(k["label"], k["scope"]) for k in listed if k["prefix"] == key[:12]] == [("ci", "write")]
        assert {k["prefix"] for k in listed} == {key[:12], world.tokens["editor-key-write"][:12]}  # his only
        assert all("key" not in k for k in listed)
        with world.store.client(key) as agent:
            r = agent.put(f"/api/brains/{b}/sync", files={"brain": ("b.tar.gz", OTHER)})
            assert r.status_code == 200
            assert agent.post("/api/keys", json={"brains": [b], "scope": "read"}).status_code == 403
            assert alice.delete(f"/api/keys/{key[:12]}").status_code == 404  # not alice's key
            assert eddie.delete(f"/api/keys/{key[:12]}").status_code == 204
            assert agent.get(f"/api/brains/{b}/sync").status_code == 401

        events = alice.get(f"/api/brains/{b}/audit").json()["events"]
    actions = [(e["action"], e.get("actor_name")) for e in events]
    assert ("member_set", "alice") in actions and ("member_removed", "otto") in actions
    assert ("key_created", "eddie") in actions and ("key_revoked", "eddie") in actions
    upload = [e for e in events if e["action"] == "upload" and e.get("key") == key[:12]]
    assert len(upload) == 1 and upload[0]["actor_name"] == "eddie"
    assert any(e["action"] == "restore" for e in events)
    assert all(key not in str(e) for e in events)  # never the key itself


def test_audit_cli_reads_the_same_log(world: World) -> None:
    out = cli("audit", world.brain, data=world.store.data).stdout
    assert '"action": "member_set"' in out and '"actor": "operator"' in out


def _until(check, limit: float = 5.0) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``check()`` holds on 10 requests in a row (both workers), bounded."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if all(check() for _ in range(10)):
            return time.monotonic() - start
        time.sleep(0.01)
    raise AssertionError("not effective within the limit")


def test_revocation_and_role_removal_take_effect_within_a_second(world: World, tmp_path: Path) -> None:
    """A revoked key and a removed member are refused on every worker within one second."""
    data = world.store.data
    token = _last_line(cli("key", "create", "--user", "vera", "--brain", world.brain, "--scope", "read", data=data))
    with world.store.client(token) as c:
        assert c.get(f"/api/brains/{world.brain}/sync").status_code == 200
        cli("key", "revoke", token[:12], data=data)
        revoked = _until(lambda: c.get(f"/api/brains/{world.brain}/sync").status_code == 401)
    key = _last_line(cli("key", "create", "--user", "vera", "--brain", world.brain, "--scope", "read", data=data))
    with world.client("vera") as member, world.store.client(key) as agent:
        cli("unshare", world.brain, "--with", "vera", data=data)
        removed = _until(lambda: member.get(f"/api/brains/{world.brain}").status_code == 404
                         and agent.get(f"/api/brains/{world.brain}/sync").status_code == 404)
    cli("share", world.brain, "--with", "vera", "--role", "viewer", data=data)
    print(f"revocation effective after {revoked * 1000:.1f} ms, role removal after {removed * 1000:.1f} ms")
    assert revoked < 1.0 and removed < 1.0


def test_owner_deletes_shared_brain_last(world: World) -> None:
    """Only an owner deletes; afterwards members no longer see it (runs last: it removes the brain)."""
    with world.client("key-write") as key:
        assert key.delete(f"/api/brains/{world.brain}").status_code == 403
    with world.client("olga") as owner:
        assert owner.delete(f"/api/brains/{world.brain}").status_code == 204
    with world.client("eddie") as editor:
        assert editor.get(f"/api/brains/{world.brain}").status_code == 404
        assert world.brain not in {b["id"] for b in editor.get("/api/brains").json()}
