"""Operator surface and process behaviour against real `brain-store serve` processes."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from store.storage import sealing
from tests.store.conftest import add_user, brain_files, cli, make_archive, start_store, upload
from tests.support.processes import console_script


def _first_brain(client: httpx.Client) -> str:
    return client.get("/api/brains").json()[0]["id"]


def test_user_cli_applies_without_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice", "alice@example.com")
    assert token.startswith("bst_") and len(token) == 47
    assert oct((data / "users.json").stat().st_mode & 0o777) == "0o600"
    with start_store(tmp_path, data=data) as store:
        client = store.client(token)
        brains = client.get("/api/brains").json()
        assert [b["name"] for b in brains] == ["default"]
        # added while running
        bob = add_user(data, "bob")
        assert store.client(bob).get("/auth/me").status_code == 200
        listing = cli("user", "list", data=data).stdout
        assert "alice" in listing and "bob" in listing and token not in listing
        # rotate: old token dies at once
        new = cli("user", "rotate", "alice", data=data).stdout.strip().splitlines()[-1]
        assert client.get("/auth/me").status_code == 401
        assert store.client(new).get("/auth/me").json()["user"]["email"] == "alice@example.com"
        # remove --purge
        bid = _first_brain(store.client(bob))
        assert upload(store.client(bob), bid, make_archive(brain_files(1))).status_code == 200
        cli("user", "remove", "bob", "--purge", data=data)
        assert store.client(bob).get("/auth/me").status_code == 401
        assert not any((data / "brains").glob(f"*/{bid}"))
        # a corrupt users file: the server keeps the last good copy and logs loudly
        (data / "users.json").write_text("{ nope")
        assert store.client(new).get("/auth/me").status_code == 200
        assert "corrupt" in store.server.log()


def test_cli_errors_are_clean(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()  # a missing data directory is its own error (tests/store/test_user_cli.py)
    r = subprocess.run([console_script("brain-store"), "user", "rotate", "ghost", "--data", str(data)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "ghost" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([console_script("brain-store"), "serve", "--data", str(data)], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "STORE_PORT": "nope"})
    assert r.returncode != 0 and "STORE_PORT" in r.stderr and "Traceback" not in r.stderr
    key = subprocess.run([console_script("brain-store"), "keygen"], capture_output=True, text=True, timeout=60)
    assert len(key.stdout.strip()) == 64 and bytes.fromhex(key.stdout.strip())


def test_size_limit_with_and_without_content_length(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice")
    with start_store(tmp_path, data=data, env={"STORE_MAX_UPLOAD_MB": "1"}) as store:
        client = store.client(token)
        bid = _first_brain(client)
        small = make_archive(brain_files(2))
        assert upload(client, bid, small).status_code == 200
        big = make_archive({"x.bin": os.urandom(1536 * 1024)})
        r = upload(client, bid, big)
        assert r.status_code == 413 and "error" in r.json()
        boundary = "bnd"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"brain\"; filename=\"b\"\r\n\r\n").encode()
        body += big + f"\r\n--{boundary}--\r\n".encode()

        def chunks():  # no Content-Length: chunked transfer encoding
            for i in range(0, len(body), 65536):
                yield body[i : i + 65536]

        r = client.put(f"/api/brains/{bid}/sync", content=chunks(),
                       headers={"content-type": f"multipart/form-data; boundary={boundary}"})
        assert r.status_code == 413
        assert client.get(f"/api/brains/{bid}/sync").content == small
        assert os.listdir(data / "tmp") == []


def test_workers_race_exactly_one_if_match_winner(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice")
    with start_store(tmp_path, data=data, workers=2) as store:
        client = store.client(token)
        bid = _first_brain(client)
        base = upload(client, bid, make_archive(brain_files(1))).json()["checksum"]
        for round_ in range(5):
            archives = [make_archive(brain_files(2, f"r{round_}w{i}")) for i in range(8)]

            def push(archive: bytes, base: str = base) -> httpx.Response:
                with store.client(token) as c:
                    return upload(c, bid, archive, {"If-Match": f'"{base}"'})

            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                results = list(pool.map(push, archives))
            winners = [r for r in results if r.status_code == 200]
            assert len(winners) == 1, [r.status_code for r in results]
            assert sorted(r.status_code for r in results) == [200] + [412] * 7
            base = winners[0].json()["checksum"]
            d = client.get(f"/api/brains/{bid}/sync")
            assert d.headers["x-checksum"] == base == hashlib.sha256(d.content).hexdigest()


def test_delete_racing_uploads_never_500(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice")
    with start_store(tmp_path, data=data, workers=2) as store:
        client = store.client(token)
        for _ in range(3):
            bid = client.post("/api/brains", json={"name": "tmp"}).json()["id"]

            def push(i: int, bid: str = bid) -> int:
                with store.client(token) as c:
                    return upload(c, bid, make_archive(brain_files(2, str(i)))).status_code

            with concurrent.futures.ThreadPoolExecutor(6) as pool:
                futures = [pool.submit(push, i) for i in range(5)]
                deleted = client.delete(f"/api/brains/{bid}").status_code
                statuses = [f.result() for f in futures]
            assert deleted in (200, 204, 404)
            assert set(statuses) <= {200, 404}, statuses
            assert client.get(f"/api/brains/{bid}/sync").status_code == 404


def test_encryption_on_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice")
    key = "cd" * 32
    with start_store(tmp_path, data=data, env={"STORE_ENCRYPTION_KEY": key}) as store:
        client = store.client(token)
        bid = _first_brain(client)
        archive = make_archive(brain_files(4))
        checksum = hashlib.sha256(archive).hexdigest()
        r = upload(client, bid, archive)
        assert r.json() == {"size_bytes": len(archive), "file_count": 4, "checksum": checksum}
        blob = next((data / "brains").glob(f"*/{bid}/blobs/{checksum}"))
        assert sealing.is_sealed(blob.read_bytes())
        d = client.get(f"/api/brains/{bid}/sync")
        assert d.content == archive and d.headers["x-checksum"] == checksum
        assert int(d.headers["content-length"]) == len(archive)
        assert client.get("/auth/me").json()["storage_used"] == len(archive)
        blob.write_bytes(archive)  # replaced by an unsealed file
        r = client.get(f"/api/brains/{bid}/sync")
        assert r.status_code == 500 and r.content != archive


def test_rate_limits_and_trusted_proxy(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice")
    env = {
        "STORE_RATE_LIMITS": "on",
        "STORE_RATE_REQUESTS_PER_MIN": "5",
        "STORE_RATE_FAILED_LOGINS_PER_MIN": "3",
        "STORE_TRUST_PROXY": "loopback",
    }
    with start_store(tmp_path, data=data, env=env) as store:
        client = store.client(token)
        statuses = [client.get("/api/brains").status_code for _ in range(7)]
        assert statuses[:5] == [200] * 5 and statuses[5] == 429
        r = client.get("/api/brains")
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        # failed logins are counted per client address (from X-Forwarded-For via a trusted proxy)
        bad = {"Authorization": "Bearer bst_" + "B" * 43}
        ip1 = {"X-Forwarded-For": "203.0.113.7"}
        codes = [httpx.get(store.url + "/auth/me", headers={**bad, **ip1}).status_code for _ in range(5)]
        assert codes[:3] == [401] * 3 and codes[-1] == 429
        other = httpx.get(store.url + "/auth/me", headers={**bad, "X-Forwarded-For": "203.0.113.8"})
        assert other.status_code == 401
        # a spoofed left-most hop does not escape the block: the right-most untrusted hop counts
        spoof = {"X-Forwarded-For": "1.2.3.4, 203.0.113.7"}
        assert httpx.get(store.url + "/auth/me", headers={**bad, **spoof}).status_code == 429


@pytest.mark.parametrize("workers", [1, 2])
def test_graceful_shutdown_finishes_inflight_upload(tmp_path: Path, workers: int) -> None:
    import signal
    import threading
    import time

    data = tmp_path / "data"
    token = add_user(data, "alice")
    archive = make_archive({"x.bin": os.urandom(512 * 1024), **brain_files(3)})
    boundary = "gracefulbnd"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"brain\"; filename=\"b\"\r\n\r\n").encode()
    body += archive + f"\r\n--{boundary}--\r\n".encode()
    started = threading.Event()
    result: dict[str, object] = {}
    with start_store(tmp_path, data=data, workers=workers) as store:
        bid = _first_brain(store.client(token))

        def slow_body():
            step = len(body) // 8 + 1
            for i in range(0, len(body), step):
                yield body[i : i + step]
                started.set()
                time.sleep(0.15)

        def run() -> None:
            try:
                r = store.client(token).put(
                    f"/api/brains/{bid}/sync", content=slow_body(),
                    headers={"content-type": f"multipart/form-data; boundary={boundary}"},
                )
                result["status"] = r.status_code
            except Exception as exc:  # pragma: no cover - reported below
                result["error"] = repr(exc)

        thread = threading.Thread(target=run)
        thread.start()
        assert started.wait(10)
        time.sleep(0.1)
        os.killpg(store.server.process.pid, signal.SIGTERM)
        thread.join(30)
        store.server.process.wait(timeout=30)
    assert result.get("status") == 200, result
    with start_store(tmp_path, data=data) as again:
        assert again.client(token).get(f"/api/brains/{bid}/sync").content == archive


def test_rekey_cli_rolls_keys_under_a_running_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice")
    old = subprocess.run([console_script("brain-store"), "keygen"], capture_output=True, text=True,
                         timeout=60).stdout.strip()
    new = subprocess.run([console_script("brain-store"), "keygen"], capture_output=True, text=True,
                         timeout=60).stdout.strip()
    archives = [make_archive(brain_files(2, str(i))) for i in range(3)]
    with start_store(tmp_path, data=data, env={"STORE_ENCRYPTION_KEY": old}) as store:
        client = store.client(token)
        bid = _first_brain(client)
        for a in archives:
            assert upload(client, bid, a).status_code == 200
    rolling = {"STORE_ENCRYPTION_KEY": new, "STORE_ENCRYPTION_PREVIOUS_KEYS": old}
    with start_store(tmp_path, data=data, env=rolling) as store:
        client = store.client(token)
        assert client.get(f"/api/brains/{bid}/sync").content == archives[-1]
        out = cli("rekey", "--new-key", new, data=data, env={**os.environ, "STORE_ENCRYPTION_KEY": old}).stdout
        assert "re-sealed 3 blob(s)" in out
        assert client.get(f"/api/brains/{bid}/sync").content == archives[-1]
    with start_store(tmp_path, data=data, env={"STORE_ENCRYPTION_KEY": new}) as store:
        client = store.client(token)
        assert client.get(f"/api/brains/{bid}/sync").content == archives[-1]
        versions = client.get(f"/api/brains/{bid}/versions").json()["versions"]
        got = [client.get(f"/api/brains/{bid}/sync", params={"version": v["version"]}).content for v in versions]
        assert got == archives[:-1][::-1]


def test_quota_two_brains_concurrently_with_workers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = add_user(data, "alice")
    env = {"STORE_MAX_USER_MB": "1", "STORE_RATE_LIMITS": "on", "STORE_RATE_UPLOADS_PER_MIN": "6"}
    with start_store(tmp_path, data=data, workers=2, env=env) as store:
        client = store.client(token)
        b1 = _first_brain(client)
        b2 = client.post("/api/brains", json={"name": "two"}).json()["id"]
        a1 = make_archive({"x.bin": os.urandom(600 * 1024)})
        a2 = make_archive({"y.bin": os.urandom(600 * 1024)})

        def push(args: tuple[str, bytes]) -> int:
            with store.client(token) as c:
                return upload(c, *args).status_code

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            statuses = sorted(pool.map(push, [(b1, a1), (b2, a2)]))
        assert statuses == [200, 413]
        assert client.get("/auth/me").json()["storage_used"] <= 1024 * 1024
        # snapshots count: replacing the stored 600 KiB archive would keep it as a snapshot
        winner = b1 if client.get(f"/api/brains/{b1}").json()["checksum"] else b2
        r = upload(client, winner, make_archive({"z.bin": os.urandom(600 * 1024)}))
        assert r.status_code == 413 and "quota" in r.json()["error"]
        # upload rate limit (per worker process): the budget of 6/min runs out
        codes = [upload(client, winner, make_archive(brain_files(1, str(i)))).status_code for i in range(14)]
        assert 429 in codes
        r429 = next(r for r in (upload(client, winner, make_archive(brain_files(1))) for _ in range(20))
                    if r.status_code == 429)
        assert int(r429.headers["retry-after"]) >= 1
