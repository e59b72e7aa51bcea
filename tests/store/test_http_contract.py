"""Part A of the store contract against a real `brain-store serve` process."""

from __future__ import annotations

import hashlib
import uuid

import httpx

from tests.store.conftest import Store, brain_files, make_archive, upload


def test_health_needs_no_auth_and_lists_capabilities(store: Store) -> None:
    r = httpx.get(store.url + "/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["contract"] == "1.1"
    assert {"static-token", "conditional-sync"} <= set(body["capabilities"])
    assert httpx.get(store.url + "/health/live").status_code == 200
    assert httpx.get(store.url + "/health/ready").status_code == 200


def test_openapi_served_verbatim_or_404(store: Store) -> None:
    from store.context import OPENAPI_PATH

    r = httpx.get(store.url + "/openapi.yaml")
    if OPENAPI_PATH.is_file():
        assert r.status_code == 200 and r.content == OPENAPI_PATH.read_bytes()
    else:
        assert r.status_code == 404
    # Litestar's own schema endpoints are off
    assert httpx.get(store.url + "/schema").status_code == 404


def test_auth_required_everywhere_but_health(store: Store) -> None:
    bid = str(uuid.uuid4())
    for method, path in [
        ("GET", "/auth/me"),
        ("GET", "/api/brains"),
        ("POST", "/api/brains"),
        ("GET", f"/api/brains/{bid}"),
        ("DELETE", f"/api/brains/{bid}"),
        ("GET", f"/api/brains/{bid}/sync"),
        ("PUT", f"/api/brains/{bid}/sync"),
        ("GET", f"/api/brains/{bid}/versions"),
        ("POST", f"/api/brains/{bid}/versions/x/restore"),
    ]:
        for auth in (None, "Bearer nope", "Basic abc", "Bearer " + "x" * 20000, "Bearer bst_" + "A" * 43):
            headers = {"Authorization": auth} if auth else {}
            r = httpx.request(method, store.url + path, headers=headers)
            assert r.status_code == 401, (method, path, auth, r.status_code)
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert "error" in r.json()


def test_me_and_records(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    me = client.get("/auth/me").json()
    assert me["user"]["email"] == f"alice+{me['user']['name']}@example.com" and isinstance(me["user"]["id"], str)
    assert me["storage_used"] == 0
    brains = client.get("/api/brains").json()
    assert isinstance(brains, list) and brains[0]["id"] == bid
    rec = client.get(f"/api/brains/{bid}").json()
    assert rec["checksum"] is None and rec["last_synced_at"] is None
    assert rec["size_bytes"] == 0 and rec["file_count"] == 0 and rec["name"] == "default"
    r = client.post("/api/brains", json={"name": "work"})
    assert r.status_code == 201 and r.json()["name"] == "work"
    r2 = client.post("/api/brains")
    assert r2.status_code == 201 and r2.json()["name"] == "default"
    names = [b["name"] for b in client.get("/api/brains").json()]
    assert names == ["default", "work", "default"]  # oldest first
    # uppercase ids are accepted
    assert client.get(f"/api/brains/{bid.upper()}").json()["id"] == bid


def test_bad_input_gets_4xx_json(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    for path in ["/api/brains/not-a-uuid", "/api/brains/%zz", "/api/brains/..%2F..%2Fusers.json",
                 f"/api/brains/{uuid.uuid4()}"]:
        r = client.get(path)
        assert r.status_code in (400, 404), path
        assert "error" in r.json()
    assert client.get("/api/brains/%zz/sync").status_code == 400
    assert client.get(f"/api/brains/{bid}/sync?version=%E0%A4%A").status_code == 400
    for body in [b"{", b"[1,2]", b'{"name": 5}', b'"x"']:
        r = client.post("/api/brains", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "error" in r.json(), body
    assert client.get("/no/such/route").json() == {"error": "not found"}


def test_upload_download_roundtrip_and_headers(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    assert client.get(f"/api/brains/{bid}/sync").status_code == 404
    archive = make_archive(brain_files(3), dirs=("memories",))
    checksum = hashlib.sha256(archive).hexdigest()
    r = upload(client, bid, archive)
    assert r.status_code == 200
    assert r.json() == {"size_bytes": len(archive), "file_count": 3, "checksum": checksum}
    assert r.headers["etag"] == f'"{checksum}"'
    d = client.get(f"/api/brains/{bid}/sync")
    assert d.status_code == 200 and d.content == archive
    assert d.headers["content-type"] == "application/gzip"
    assert d.headers["etag"] == f'"{checksum}"' and d.headers["x-checksum"] == checksum
    h = client.head(f"/api/brains/{bid}/sync")
    assert h.status_code == 200 and h.content == b"" and h.headers["etag"] == f'"{checksum}"'
    assert int(h.headers["content-length"]) == len(archive)
    for inm in (f'"{checksum}"', "*", f'W/"{checksum}"', f'"other", "{checksum}"'):
        n = client.get(f"/api/brains/{bid}/sync", headers={"If-None-Match": inm})
        assert n.status_code == 304 and n.content == b"" and n.headers["etag"] == f'"{checksum}"'
    assert client.get(f"/api/brains/{bid}/sync", headers={"If-None-Match": '"other"'}).status_code == 200
    rec = client.get(f"/api/brains/{bid}").json()
    assert rec["checksum"] == checksum and rec["file_count"] == 3 and rec["size_bytes"] == len(archive)
    assert rec["last_synced_at"].endswith("Z")
    assert client.get("/auth/me").json()["storage_used"] == len(archive)


def test_big_upload_streams(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    import os

    archive = make_archive({"big.bin": os.urandom(3 * 1024 * 1024), **brain_files(2)})
    r = upload(client, bid, archive)
    assert r.status_code == 200 and r.json()["file_count"] == 3
    assert client.get(f"/api/brains/{bid}/sync").content == archive


def test_upload_refusals_change_nothing(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    good = make_archive(brain_files(6))
    assert upload(client, bid, good).status_code == 200
    before = client.get(f"/api/brains/{bid}").json()
    url = f"/api/brains/{bid}/sync"
    cases = [
        client.put(url, files={"other": ("brain", good)}),  # filename "brain" is not the field
        client.put(url, files=[("brain", ("a", good)), ("brain", ("b", good))]),
        client.put(url, content=good, headers={"content-type": "application/gzip"}),
        client.put(url, content=b"--x\r\n", headers={"content-type": "multipart/form-data"}),
        upload(client, bid, b"not gzip at all"),
        upload(client, bid, good[:-20]),
        upload(client, bid, good + b"junk"),
        client.put(url, content=b"--b\r\nContent-Disposition: form-data; name=\"brain\"\r\n\r\nabc",
                   headers={"content-type": "multipart/form-data; boundary=b"}),
    ]
    for r in cases:
        assert r.status_code == 400, r.text
        assert "error" in r.json()
    # empty-push guard
    empty = make_archive({}, dirs=("memories",))
    r = upload(client, bid, empty)
    assert r.status_code == 409 and "error" in r.json()
    assert client.get(f"/api/brains/{bid}").json() == before
    assert upload(client, bid, empty, params={"force": "true"}).status_code == 200
    assert client.get(f"/api/brains/{bid}").json()["file_count"] == 0


def test_conditional_uploads(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    a, b, c = (make_archive(brain_files(2, t)) for t in "abc")
    ca = hashlib.sha256(a).hexdigest()
    # If-Match: * needs an archive; If-None-Match: * needs none
    r = upload(client, bid, a, {"If-Match": "*"})
    assert r.status_code == 412 and r.json()["current_checksum"] is None and "error" in r.json()
    assert upload(client, bid, a, {"If-None-Match": "*"}).status_code == 200
    r = upload(client, bid, b, {"If-None-Match": "*"})
    assert r.status_code == 412 and r.json()["current_checksum"] == ca
    # weak tags never match If-Match
    r = upload(client, bid, b, {"If-Match": f'W/"{ca}"'})
    assert r.status_code == 412 and r.json()["current_checksum"] == ca
    assert upload(client, bid, b, {"If-Match": '"0000"'}).status_code == 412
    r = upload(client, bid, b, {"If-Match": f'"{ca}"'})
    assert r.status_code == 200
    cb = r.json()["checksum"]
    assert upload(client, bid, c, {"If-Match": f'"{ca}"'}).status_code == 412
    assert upload(client, bid, c, {"If-Match": "*"}).status_code == 200
    assert client.get(f"/api/brains/{bid}/sync").content == c
    assert cb != ca


def test_snapshots_versions_restore(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    archives = [make_archive(brain_files(2, f"v{i}")) for i in range(8)]
    sums = [hashlib.sha256(a).hexdigest() for a in archives]
    for a in archives:
        assert upload(client, bid, a).status_code == 200
        assert upload(client, bid, a).status_code == 200  # identical: no new snapshot
    listing = client.get(f"/api/brains/{bid}/versions").json()
    assert listing["total"] == 5 == len(listing["versions"])  # default retention
    names = [v["version"] for v in listing["versions"]]
    assert names == sorted(names, reverse=True)  # newest first, newest sorts last
    assert [v["checksum"] for v in listing["versions"]] == sums[2:7][::-1]
    assert all(v["size"] > 0 and v["date"].endswith("Z") for v in listing["versions"])
    # snapshot download with ETag, X-Checksum and If-None-Match
    newest = listing["versions"][0]
    d = client.get(f"/api/brains/{bid}/sync", params={"version": newest["version"]})
    assert d.status_code == 200 and d.content == archives[6]
    assert d.headers["etag"] == f'"{sums[6]}"' and d.headers["x-checksum"] == sums[6]
    n = client.get(f"/api/brains/{bid}/sync", params={"version": newest["version"]},
                   headers={"If-None-Match": f'"{sums[6]}"'})
    assert n.status_code == 304
    for bad in ["../meta.json", "..%2F..%2Fusers.json", "../../users.json", "x", "20990101T000000.000000Z", ""]:
        r = client.get(f"/api/brains/{bid}/sync", params={"version": bad})
        assert r.status_code in (400, 404), bad
    # restore: current becomes a snapshot, ETag returned, If-Match honoured
    oldest = listing["versions"][-1]["version"]
    r = client.post(f"/api/brains/{bid}/versions/{oldest}/restore", headers={"If-Match": '"nope"'})
    assert r.status_code == 412 and r.json()["current_checksum"] == sums[7]
    r = client.post(f"/api/brains/{bid}/versions/{oldest}/restore", headers={"If-Match": f'"{sums[7]}"'})
    assert r.status_code == 200 and r.json()["restored_version"] == oldest
    assert r.headers["etag"] == f'"{sums[2]}"'
    assert client.get(f"/api/brains/{bid}/sync").content == archives[2]
    after = client.get(f"/api/brains/{bid}/versions").json()["versions"]
    assert after[0]["checksum"] == sums[7]
    assert client.post(f"/api/brains/{bid}/versions/20000101T000000.000000Z/restore").status_code == 404
    assert client.post(f"/api/brains/{bid}/versions/..%2Fmeta.json/restore").status_code in (400, 404)


def test_isolation_between_users(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    from store.auth.users import UserRegistry

    _, token = UserRegistry(store.data).add(f"bob-{uuid.uuid4().hex[:8]}")
    bob = store.client(token)
    assert upload(client, bid, make_archive(brain_files(1))).status_code == 200
    for method, path in [("GET", f"/api/brains/{bid}"), ("GET", f"/api/brains/{bid}/sync"),
                         ("GET", f"/api/brains/{bid}/versions"), ("DELETE", f"/api/brains/{bid}")]:
        r = bob.request(method, path)
        assert r.status_code == 404, (method, path)
    assert upload(bob, bid, make_archive(brain_files(1))).status_code == 404
    assert client.get(f"/api/brains/{bid}/sync").status_code == 200


def test_delete(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, bid = alice
    assert upload(client, bid, make_archive(brain_files(1))).status_code == 200
    assert upload(client, bid, make_archive(brain_files(2))).status_code == 200
    r = client.delete(f"/api/brains/{bid}")
    assert r.status_code in (200, 204)
    assert client.get(f"/api/brains/{bid}").status_code == 404
    assert client.get(f"/api/brains/{bid}/sync").status_code == 404
    assert client.get(f"/api/brains/{bid}/versions").status_code == 404
    assert client.delete(f"/api/brains/{bid}").status_code == 404
    assert client.get("/auth/me").json()["storage_used"] == 0


def test_brain_limit(store: Store, alice: tuple[httpx.Client, str]) -> None:
    client, _ = alice
    statuses = [client.post("/api/brains", json={"name": f"b{i}"}).status_code for i in range(10)]
    assert statuses == [201] * 9 + [403]
