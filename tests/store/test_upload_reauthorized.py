"""An upload authorised at its start is authorised again at commit (issue 24, item 4).

Real store with two workers; archives sent slowly (about 2 KB/s for about four seconds) while
the key is revoked or the member unshared. The commit is refused as the route would refuse
it then (401 for a dead key, 404 for a former member), nothing is committed, and the audit
log records the refusal; uploads by members are audited.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.store.conftest import Store, add_user, cli, make_archive, start_store

BOUNDARY = "slowboundary7d1c"
PIECE = 512
PAUSE = 0.25  # 512 bytes every quarter second: 2 KB/s


def _body(archive: bytes) -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"brain\"; filename=\"b.tar.gz\"\r\n"
            f"Content-Type: application/gzip\r\n\r\n").encode() + archive + f"\r\n--{BOUNDARY}--\r\n".encode()


def _slowly(body: bytes) -> Iterator[bytes]:
    for start in range(0, len(body), PIECE):  # bounded: len(body) / PIECE pieces
        yield body[start:start + PIECE]
        time.sleep(PAUSE)


def _slow_upload(store: Store, token: str, brain: str, archive: bytes, meanwhile: Callable[[], None]) -> httpx.Response:
    """Send ``archive`` slowly; ``meanwhile`` runs one second after the upload started."""
    body = _body(archive)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
               "Content-Length": str(len(body))}
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=store.url, timeout=30) as client:
        started = time.monotonic()
        sent = pool.submit(client.put, f"/api/brains/{brain}/sync", content=_slowly(body), headers=headers)
        time.sleep(1.0)
        meanwhile()
        response = sent.result(timeout=30)
        assert time.monotonic() - started > 3.0  # the body really was still arriving
        return response


def _archive(tag: str) -> bytes:
    # hardly compressible, so the body is ~8 KB: about four seconds at 2 KB/s
    return make_archive({f"memories/{tag}.md": base64.b64encode(os.urandom(8000))}, dirs=("memories",))


def test_revoked_key_and_unshared_member_cannot_commit(tmp_path: Path) -> None:
    with start_store(tmp_path, workers=2) as store:
        data = store.data
        alice_token = add_user(data, "alice")
        alice = store.client(alice_token)
        eddie_token = add_user(data, "eddie")
        brain = alice.get("/api/brains").json()[0]["id"]
        cli("share", brain, "--with", "eddie", "--role", "editor", data=data)
        assert store.client(eddie_token).put(f"/api/brains/{brain}/sync",
                                              files={"brain": ("b.tar.gz", _archive("first"))}).status_code == 200
        before = alice.get(f"/api/brains/{brain}").json()["checksum"]
        key = cli("key", "create", "--user", "alice", "--brain", brain, "--scope", "write",
                  data=data).stdout.strip().splitlines()[-1]

        revoked = _slow_upload(store, key, brain, _archive("by-key"),
                               lambda: cli("key", "revoke", key[:12], data=data))
        assert revoked.status_code == 401, revoked.text
        unshared = _slow_upload(store, eddie_token, brain, _archive("by-eddie"),
                                lambda: cli("unshare", brain, "--with", "eddie", data=data))
        assert unshared.status_code == 404, unshared.text

        # nothing was committed, as every worker tells (each request on a new connection)
        for answer in store.on_every_worker("GET", f"/api/brains/{brain}", alice_token):
            record = answer.json()
            assert record["checksum"] == before and record["snapshot_count"] == 0
        events = alice.get(f"/api/brains/{brain}/audit").json()["events"]
        uploads = [(e["action"], e["actor_name"], e.get("key"), e.get("status")) for e in events
                   if e["action"].startswith("upload")]
        assert uploads == [("upload", "eddie", None, None), ("upload_refused", "alice", key[:12], 401),
                           ("upload_refused", "eddie", None, 404)]


def test_uploads_through_an_agent_key_are_audited_on_an_unshared_brain(tmp_path: Path) -> None:
    with start_store(tmp_path) as store:
        data = store.data
        alice = store.client(add_user(data, "alice"))
        brain = alice.get("/api/brains").json()[0]["id"]
        key = cli("key", "create", "--user", "alice", "--brain", brain, "--scope", "write",
                  data=data).stdout.strip().splitlines()[-1]
        r = store.client(key).put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", _archive("k"))})
        assert r.status_code == 200
        events = alice.get(f"/api/brains/{brain}/audit").json()["events"]
        assert [(e["action"], e.get("key")) for e in events if e["action"] == "upload"] == [("upload", key[:12])]
