"""Sharing on S3 (moto and SeaweedFS), two replicas on one bucket: the permission matrix's key
rows hold on both replicas, and a share, role change or revocation made on one replica (or by
the CLI) applies on every replica within one second; the audit log is kept in the bucket."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.s3.servers import S3Service, wait_for_token
from tests.s3.test_replicas import two_replicas
from tests.store.conftest import make_archive
from tests.support.processes import console_script
from tests.support.waiting import seconds_until

ARCHIVE = make_archive({"memories/a.md": b"---\ntitle: a\n---\nshared\n"}, dirs=("memories",))
FIRST = make_archive({"memories/a.md": b"---\ntitle: a\n---\nfirst\n"}, dirs=("memories",))
PROPAGATION_LIMIT = 1.0  # seconds: the bound for a revocation or role change

CALLERS = ["alice", "olga", "eddie", "vera", "otto", "key-read", "key-write", "key-revoked"]
# action -> expected status per caller (in CALLERS order); the same rows as tests/store/test_sharing.py
MATRIX: dict[str, list[int]] = {
    #              alice olga eddie vera otto  kr   kw  krev
    "download":   [200, 200, 200, 200, 404, 200, 200, 401],
    "upload":     [200, 200, 200, 403, 404, 403, 200, 401],
    "restore":    [200, 200, 403, 403, 404, 403, 403, 401],
    "members":    [200, 200, 200, 200, 404, 200, 200, 401],
    "set_member": [200, 200, 403, 403, 404, 403, 403, 401],
}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _seconds_until(check: Callable[[], bool], limit: float = 5.0) -> float:
    return seconds_until(check, limit, 0.02, "not effective within the limit")


def _do(url: str, token: str, brain: str, action: str, owner: str) -> int:
    with httpx.Client(base_url=url, headers=_auth(token), timeout=30) as c:
        if action == "download":
            return c.get(f"/api/brains/{brain}/sync").status_code
        if action == "upload":
            return c.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tgz", ARCHIVE)}).status_code
        if action == "restore":
            name = httpx.get(f"{url}/api/brains/{brain}/versions", headers=_auth(owner),
                             timeout=30).json()["versions"][0]["version"]
            return c.post(f"/api/brains/{brain}/versions/{name}/restore").status_code
        if action == "members":
            return c.get(f"/api/brains/{brain}/members").status_code
        if action == "set_member":
            return c.put(f"/api/brains/{brain}/members", json={"user": "pia", "role": "viewer"}).status_code
    raise AssertionError(action)


def _role(url: str, token: str, brain: str) -> str | None:
    reply = httpx.get(url + "/api/brains", headers=_auth(token), timeout=30)
    assert reply.status_code == 200, reply.text
    listed = reply.json()
    return next((b["role"] for b in listed if b["id"] == brain), None)


def test_sharing_matrix_and_propagation_on_two_replicas(s3: S3Service, tmp_path: Path) -> None:
    # no rate limits: the propagation checks ask a replica every 20 ms
    with two_replicas(s3, tmp_path, STORE_RATE_LIMITS="off") as (a, b, env):
        users = {name: a.add_user(name) for name in ("alice", "olga", "eddie", "vera", "otto", "pia")}
        for url in (a.url, b.url):
            for token in users.values():
                wait_for_token(url, token)
        assert "sharing" in httpx.get(b.url + "/health").json()["capabilities"]
        alice = users["alice"]
        brain = httpx.get(a.url + "/api/brains", headers=_auth(alice)).json()[0]["id"]
        sync, members = f"/api/brains/{brain}/sync", f"/api/brains/{brain}/members"
        for body in (FIRST, ARCHIVE):  # the second upload keeps the first as a version to restore
            assert httpx.put(a.url + sync, headers=_auth(alice), files={"brain": ("b.tgz", body)}).status_code == 200

        for user, role in (("olga", "owner"), ("eddie", "editor"), ("vera", "viewer")):
            assert httpx.put(a.url + members, headers=_auth(alice), json={"user": user, "role": role}).status_code == 200
        tokens = dict(users)
        for name, scope in (("key-read", "read"), ("key-write", "write"), ("key-revoked", "write")):
            made = httpx.post(a.url + "/api/keys", headers=_auth(alice), json={"brains": [brain], "scope": scope})
            assert made.status_code == 201
            tokens[name] = made.json()["key"]
        assert httpx.delete(f"{a.url}/api/keys/{tokens['key-revoked'][:12]}", headers=_auth(alice)).status_code == 204
        # A key made after the revocation: once replica b takes it, b has read the revocation too (a
        # revoked key's 401 alone would also pass while b has not yet seen the new keys at all).
        marker = httpx.post(a.url + "/api/keys", headers=_auth(alice), json={"brains": [brain], "scope": "read"})
        assert marker.status_code == 201
        _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(marker.json()["key"])).status_code == 200
                       and httpx.get(b.url + sync, headers=_auth(tokens["key-revoked"])).status_code == 401
                       and httpx.get(b.url + sync, headers=_auth(tokens["vera"])).status_code == 200)

        # the matrix's key rows, on each replica
        for action, row in MATRIX.items():
            want = dict(zip(CALLERS, row, strict=True))
            got = {who: [_do(url, tokens[who], brain, action, alice) for url in (a.url, b.url)] for who in CALLERS}
            assert got == {who: [status, status] for who, status in want.items()}, action
        listed = httpx.get(b.url + "/api/brains", headers=_auth(tokens["vera"])).json()
        assert {(x["id"], x["role"], x["owner"]) for x in listed if x["id"] == brain} == {(brain, "viewer", "alice")}

        # propagation: changes made on replica a, seen on replica b (three rounds)
        timings: dict[str, list[float]] = {"revocation": [], "role change": [], "share": []}
        for _ in range(3):
            key = httpx.post(a.url + "/api/keys", headers=_auth(alice), json={"brains": [brain], "scope": "read"})
            key_token = key.json()["key"]
            _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(key_token)).status_code == 200)
            assert httpx.delete(f"{a.url}/api/keys/{key_token[:12]}", headers=_auth(alice)).status_code == 204
            timings["revocation"].append(
                _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(key_token)).status_code == 401))
            for role in ("viewer", "editor"):
                assert httpx.put(a.url + members, headers=_auth(alice),
                                 json={"user": "eddie", "role": role}).status_code == 200
                timings["role change"].append(
                    _seconds_until(lambda: _role(b.url, tokens["eddie"], brain) == role))
            assert httpx.delete(f"{a.url}{members}/pia", headers=_auth(alice)).status_code in (200, 204)
            _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(tokens["pia"])).status_code == 404)
            assert httpx.put(a.url + members, headers=_auth(alice),
                             json={"user": "pia", "role": "viewer"}).status_code == 200
            timings["share"].append(
                _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(tokens["pia"])).status_code == 200))

        # the operator's CLI writes the same object; both replicas see it
        done = subprocess.run([console_script("brain-store"), "unshare", brain, "--with", "vera",
                               "--data", str(tmp_path / "cli")], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        timings["cli removal"] = [_seconds_until(
            lambda: httpx.get(b.url + sync, headers=_auth(tokens["vera"])).status_code == 404
            and httpx.get(a.url + sync, headers=_auth(tokens["vera"])).status_code == 404)]

        events = httpx.get(f"{b.url}/api/brains/{brain}/audit", headers=_auth(alice)).json()["events"]
        actions = [e["action"] for e in events]
        assert {"member_set", "key_created", "key_revoked", "member_removed", "upload", "restore"} <= set(actions)
        assert events[-1]["action"] == "member_removed" and events[-1]["actor"] == "operator"
        assert all(t not in str(events) for n, t in tokens.items() if n.startswith("key-"))
        assert httpx.get(f"{b.url}/api/brains/{brain}/audit", headers=_auth(tokens["eddie"])).status_code == 403
    print(f"{s3.name}: " + ", ".join(f"{k} max {max(v):.2f} s (n={len(v)})" for k, v in timings.items()))
    worst = max(max(v) for v in timings.values())
    # bounded by STORE_S3_SHARING_POLL_MS (250 ms by default) plus one conditional GET and the check
    assert worst < PROPAGATION_LIMIT, timings


def test_editor_cannot_destroy_a_shared_brain_on_s3(s3: S3Service, tmp_path: Path) -> None:
    """Issue 24 item 5 on S3: the owner's last version outlives an editor's junk and forced empty
    uploads (through the other replica) and restores (tests/store/test_owner_recovers.py)."""
    from tests.store.test_owner_recovers import editor_trashes_owner_restores

    with two_replicas(s3, tmp_path, STORE_RATE_LIMITS="off") as (a, b, _):
        alice, eddie = a.add_user("alice"), a.add_user("eddie")
        for url in (a.url, b.url):
            for token in (alice, eddie):
                wait_for_token(url, token)
        with httpx.Client(base_url=a.url, headers=_auth(alice), timeout=30) as owner, \
                httpx.Client(base_url=b.url, headers=_auth(eddie), timeout=30) as editor:
            brain = owner.get("/api/brains").json()[0]["id"]
            assert owner.put(f"/api/brains/{brain}/members", json={"user": "eddie", "role": "editor"}).status_code == 200
            _seconds_until(lambda: _role(b.url, eddie, brain) == "editor")
            editor_trashes_owner_restores(owner, editor, brain)
