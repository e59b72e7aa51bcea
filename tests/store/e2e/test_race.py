"""Racing writers against `brain-store serve --workers 2` (two processes, one data directory).

- 50 rounds of 16 simultaneous uploads carrying the same If-Match: exactly one 200 per round,
  fifteen 412s, and the live archive is the winner's.
- A read-modify-write counter incremented by 8 clients that retry on 412 loses no increment.
"""

from __future__ import annotations

import hashlib
import os
import io
import tarfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from contract.conformance.archives import brain_archive, make_archive
from tests.contract.harness import Store, running_store

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("store-e2e-race")]

ROUNDS = 50
WRITERS = 16
COUNTER_CLIENTS = 8
INCREMENTS_EACH = 12


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, str]]:
    env = {"STORE_RATE_LIMITS": "off", "STORE_SNAPSHOTS": "2"}
    with running_store(tmp_path_factory.mktemp("race") / "data", env=env, workers=2) as running:
        yield running, running.add_user("racer")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _upload(http: httpx.Client, brain_id: str, archive: bytes, if_match: str | None) -> httpx.Response:
    headers = {"If-Match": f'"{if_match}"'} if if_match else {}
    return http.put(f"/api/brains/{brain_id}/sync", files={"brain": ("b.tar.gz", archive, "application/gzip")}, headers=headers)


def _clients(url: str, token: str, n: int) -> list[httpx.Client]:
    return [httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}) for _ in range(n)]


def test_exactly_one_if_match_writer_wins_each_round(store: tuple[Store, str]) -> None:
    running, token = store
    clients = _clients(running.url, token, WRITERS)
    try:
        brain_id = clients[0].post("/api/brains", json={"name": "race"}).json()["id"]
        seed = brain_archive("race-seed")
        assert _upload(clients[0], brain_id, seed, None).status_code == 200
        base = _sha(seed)
        started = time.monotonic()
        with ThreadPoolExecutor(WRITERS) as pool:
            for round_no in range(ROUNDS):
                archives = [brain_archive(f"race-{round_no}-{i}") for i in range(WRITERS)]
                barrier = threading.Barrier(WRITERS, timeout=30)

                def push(i: int, archives: list[bytes] = archives, barrier: threading.Barrier = barrier, base: str = base) -> int:
                    barrier.wait()
                    return _upload(clients[i], brain_id, archives[i], base).status_code

                statuses = list(pool.map(push, range(WRITERS), timeout=120))
                counts = Counter(statuses)
                assert counts == Counter({200: 1, 412: WRITERS - 1}), f"round {round_no}: {dict(counts)}"
                winner = archives[statuses.index(200)]
                live = clients[0].get(f"/api/brains/{brain_id}/sync")
                assert live.content == winner and live.headers["x-checksum"] == _sha(winner)
                base = _sha(winner)
        assert time.monotonic() - started < 150
    finally:
        for client in clients:
            client.close()


def _counter_archive(value: int, writer: int) -> bytes:
    return make_archive({"counter.txt": str(value).encode(), f"last-writer-{writer}.txt": b"x"})


def _read_counter(archive: bytes) -> int:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        member = tar.extractfile("counter.txt")
        assert member is not None
        return int(member.read())


def test_read_modify_write_counter_loses_no_increment(store: tuple[Store, str]) -> None:
    running, token = store
    clients = _clients(running.url, token, COUNTER_CLIENTS)
    try:
        brain_id = clients[0].post("/api/brains", json={"name": "counter"}).json()["id"]
        assert _upload(clients[0], brain_id, _counter_archive(0, -1), None).status_code == 200
        accepted: list[int] = []
        lock = threading.Lock()

        def worker(i: int) -> int:
            http, conflicts = clients[i], 0
            for _ in range(INCREMENTS_EACH):
                for _attempt in range(500):
                    pulled = http.get(f"/api/brains/{brain_id}/sync")
                    assert pulled.status_code == 200
                    base = pulled.headers["x-checksum"]
                    assert _sha(pulled.content) == base
                    value = _read_counter(pulled.content) + 1
                    resp = _upload(http, brain_id, _counter_archive(value, i), base)
                    if resp.status_code == 200:
                        with lock:
                            accepted.append(value)
                        break
                    assert resp.status_code == 412, resp.text
                    assert resp.json()["current_checksum"] != base
                    conflicts += 1
                else:
                    raise AssertionError("client starved: 500 conflicts for one increment")
            return conflicts

        with ThreadPoolExecutor(COUNTER_CLIENTS) as pool:
            conflicts = sum(pool.map(worker, range(COUNTER_CLIENTS), timeout=150))
        total = COUNTER_CLIENTS * INCREMENTS_EACH
        final = clients[0].get(f"/api/brains/{brain_id}/sync")
        assert _read_counter(final.content) == total
        assert sorted(accepted) == list(range(1, total + 1)), "an increment was lost or applied twice"
        assert conflicts > 0, "the clients never raced; the test proves nothing"
    finally:
        for client in clients:
            client.close()


def test_race_store_data_dir_has_no_leftovers(store: tuple[Store, str]) -> None:
    running, _ = store
    tmp = Path(running.data_dir) / "tmp"
    assert not tmp.exists() or list(tmp.iterdir()) == []


def test_download_etag_always_matches_body_during_writes(store: tuple[Store, str]) -> None:
    """One writer alternates two archives while four readers download: every ETag fits its body."""
    running, token = store
    clients = _clients(running.url, token, 5)
    try:
        brain_id = clients[0].post("/api/brains", json={"name": "etag-consistency"}).json()["id"]
        pair = [make_archive({"memory/a.md": b"A" * 300_000}), make_archive({"memory/b.md": bytes(range(256)) * 1200, "memory/c.md": b"c"})]
        assert _upload(clients[0], brain_id, pair[0], None).status_code == 200
        stop = threading.Event()
        mismatches: list[str] = []
        reads = [0]

        def reader(http: httpx.Client) -> None:
            while not stop.is_set():
                resp = http.get(f"/api/brains/{brain_id}/sync")
                assert resp.status_code == 200
                digest = _sha(resp.content)
                if resp.headers["x-checksum"] != digest or resp.headers["etag"] != f'"{digest}"' or digest not in {_sha(a) for a in pair}:
                    mismatches.append(f"{resp.headers['etag']} vs body {digest}")
                reads[0] += 1

        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(reader, http) for http in clients[1:]]
            for i in range(60):
                assert _upload(clients[0], brain_id, pair[(i + 1) % 2], None).status_code == 200
            stop.set()
            for future in futures:
                future.result(timeout=60)
        assert mismatches == []
        assert reads[0] > 20
    finally:
        for client in clients:
            client.close()


def test_delete_racing_uploads_is_clean(store: tuple[Store, str]) -> None:
    """Uploads racing a DELETE get 200 or 404 (never 5xx); afterwards the brain is gone everywhere."""
    running, token = store
    clients = _clients(running.url, token, 9)
    try:
        for round_no in range(5):
            brain_id = clients[0].post("/api/brains", json={"name": f"doomed-{round_no}"}).json()["id"]
            assert _upload(clients[0], brain_id, brain_archive(f"doomed-{round_no}"), None).status_code == 200
            barrier = threading.Barrier(9, timeout=30)

            def act(i: int, brain_id: str = brain_id, barrier: threading.Barrier = barrier) -> int:
                barrier.wait()
                if i == 0:
                    return clients[0].delete(f"/api/brains/{brain_id}").status_code
                return _upload(clients[i], brain_id, brain_archive(f"late-{i}"), None).status_code

            with ThreadPoolExecutor(9) as pool:
                statuses = list(pool.map(act, range(9), timeout=120))
            assert statuses[0] in (200, 204), statuses
            assert set(statuses[1:]) <= {200, 404}, statuses
            for path in ("", "/sync", "/versions"):
                assert clients[0].get(f"/api/brains/{brain_id}{path}").status_code == 404
            assert brain_id not in [b["id"] for b in clients[0].get("/api/brains").json()]
        tmp = running.data_dir / "tmp"
        assert not tmp.exists() or list(tmp.iterdir()) == []
    finally:
        for client in clients:
            client.close()


def test_quota_holds_under_concurrent_uploads_to_two_brains(tmp_path: Path) -> None:
    """With a 1 MiB quota, 12 concurrent ~300 KB uploads to two brains never store more than 1 MiB."""
    env = {"STORE_RATE_LIMITS": "off", "STORE_MAX_USER_MB": "1", "STORE_SNAPSHOTS": "5"}
    with running_store(tmp_path / "data", env=env, workers=2) as running:
        token = running.add_user("quota")
        clients = _clients(running.url, token, 12)
        try:
            default_id = clients[0].get("/api/brains").json()[0]["id"]
            other_id = clients[0].post("/api/brains", json={"name": "second"}).json()["id"]
            archives = [make_archive({"memory/noise.bin": os.urandom(300_000), "memory/n.md": str(i).encode()}) for i in range(12)]
            barrier = threading.Barrier(12, timeout=30)

            def push(i: int) -> int:
                barrier.wait()
                return _upload(clients[i], default_id if i % 2 else other_id, archives[i], None).status_code

            with ThreadPoolExecutor(12) as pool:
                statuses = list(pool.map(push, range(12), timeout=120))
            assert set(statuses) <= {200, 413}, statuses
            assert 200 in statuses and 413 in statuses, statuses
            used = clients[0].get("/auth/me").json()["storage_used"]
            assert used <= 1024 * 1024, used
            stored = 0
            for brain_id in (default_id, other_id):
                record = clients[0].get(f"/api/brains/{brain_id}").json()
                versions = clients[0].get(f"/api/brains/{brain_id}/versions").json()["versions"]
                stored += (record["size_bytes"] if record["checksum"] else 0) + sum(v.get("size_bytes", 0) for v in versions)
            assert stored <= 1024 * 1024, stored
        finally:
            for client in clients:
                client.close()


def test_brain_limit_holds_under_concurrent_creates(tmp_path: Path) -> None:
    """16 simultaneous creates against two workers with 9 free slots: exactly 9 succeed."""
    env = {"STORE_RATE_LIMITS": "off", "STORE_MAX_BRAINS": "10"}
    with running_store(tmp_path / "data", env=env, workers=2) as running:
        token = running.add_user("creator")  # comes with brain "default": 9 slots left
        clients = _clients(running.url, token, 16)
        try:
            barrier = threading.Barrier(16, timeout=30)

            def create(i: int) -> int:
                barrier.wait()
                return clients[i].post("/api/brains", json={"name": f"c{i}"}).status_code

            with ThreadPoolExecutor(16) as pool:
                statuses = list(pool.map(create, range(16), timeout=120))
            assert Counter(statuses) == Counter({201: 9, 403: 7}), statuses
            assert len(clients[0].get("/api/brains").json()) == 10
        finally:
            for client in clients:
                client.close()

