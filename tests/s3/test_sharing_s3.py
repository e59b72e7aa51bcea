"""Sharing on S3: two replicas on one bucket see shares, keys and revocations made on the
other replica (or by the CLI) within about one poll interval; the audit log is kept in the bucket."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.s3.servers import S3Service, wait_for_token
from tests.s3.test_replicas import two_replicas
from tests.store.conftest import make_archive
from tests.support.processes import console_script

ARCHIVE = make_archive({"memories/a.md": b"---\ntitle: a\n---\nshared\n"}, dirs=("memories",))


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _seconds_until(check: Callable[[], bool], limit: float = 5.0) -> float:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < limit, "not effective within the limit"
        time.sleep(0.02)
    return time.monotonic() - start


def test_sharing_across_two_replicas(moto: S3Service, tmp_path: Path) -> None:
    with two_replicas(moto, tmp_path) as (a, b, env):
        alice, bob, otto = a.add_user("alice"), a.add_user("bob"), a.add_user("otto")
        for url in (a.url, b.url):
            for token in (alice, bob, otto):
                wait_for_token(url, token)
        assert "sharing" in httpx.get(b.url + "/health").json()["capabilities"]
        brain = httpx.get(a.url + "/api/brains", headers=_auth(alice)).json()[0]["id"]
        sync = f"/api/brains/{brain}/sync"
        assert httpx.put(a.url + sync, headers=_auth(alice), files={"brain": ("b.tgz", ARCHIVE)}).status_code == 200

        r = httpx.put(f"{a.url}/api/brains/{brain}/members", headers=_auth(alice),
                      json={"user": "bob", "role": "viewer"})
        assert r.status_code == 200
        shared = _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(bob)).status_code == 200)
        assert httpx.put(b.url + sync, headers=_auth(bob), files={"brain": ("b.tgz", ARCHIVE)}).status_code == 403
        assert httpx.get(b.url + sync, headers=_auth(otto)).status_code == 404
        listed = httpx.get(b.url + "/api/brains", headers=_auth(bob)).json()
        assert {(x["id"], x["role"], x["owner"]) for x in listed if x["id"] == brain} == {(brain, "viewer", "alice")}

        made = httpx.post(a.url + "/api/keys", headers=_auth(alice), json={"brains": [brain], "scope": "read"})
        assert made.status_code == 201
        key = made.json()["key"]
        _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(key)).status_code == 200)
        assert httpx.put(b.url + sync, headers=_auth(key), files={"brain": ("b.tgz", ARCHIVE)}).status_code == 403
        assert httpx.delete(f"{a.url}/api/keys/{key[:12]}", headers=_auth(alice)).status_code == 204
        revoked = _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(key)).status_code == 401)

        # the operator's CLI writes the same object
        done = subprocess.run([console_script("brain-store"), "unshare", brain, "--with", "bob",
                               "--data", str(tmp_path / "cli")], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        removed = _seconds_until(lambda: httpx.get(b.url + sync, headers=_auth(bob)).status_code == 404
                                 and httpx.get(a.url + sync, headers=_auth(bob)).status_code == 404)
        events = httpx.get(f"{b.url}/api/brains/{brain}/audit", headers=_auth(alice)).json()["events"]
        assert [e["action"] for e in events] == ["member_set", "key_created", "key_revoked", "member_removed"]
        assert events[-1]["actor"] == "operator" and all(key not in str(e) for e in events)
        assert httpx.get(f"{b.url}/api/brains/{brain}/audit", headers=_auth(bob)).status_code == 404
    print(f"S3 replicas: share seen after {shared:.2f} s, revocation {revoked:.2f} s, role removal {removed:.2f} s")
    # bounded by the poll interval (STORE_S3_USERS_POLL_SECONDS, 1 s here) plus one GET
    assert max(shared, revoked, removed) < 1.5
