"""SIGKILL during uploads: after every restart archives and metadata agree, nothing is lost.

Three uploader threads (one per brain) push distinct archives one after another, while
the main thread kills the whole store process group at random moments and restarts it.
Outcomes are recorded per attempt: acknowledged (200), unknown (connection died) or
refused. After each restart every brain must be self-consistent; at the end its archive
must be the last acknowledged upload or an unknown-outcome attempt made after it, and no
temporary files may remain in the data directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from contract.conformance.archives import make_archive
from tests.contract.harness import add_user, running_store
from tests.support.processes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("store-e2e-crash"), pytest.mark.timeout(600)]

TOTAL_UPLOADS = 200
BRAINS = 3
ENV = {"STORE_RATE_LIMITS": "off", "STORE_SNAPSHOTS": "3"}


@dataclass
class Attempt:
    """One upload: its archive, file count and what the client learned."""

    archive: bytes
    file_count: int
    outcome: str = "pending"  # ok | unknown | refused

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.archive).hexdigest()


@dataclass
class BrainLog:
    """Every upload attempt for one brain, in order."""

    brain_id: str
    attempts: list[Attempt] = field(default_factory=list)

    def allowed_checksums(self) -> set[str | None]:
        """What the live archive may be: the last acknowledged upload or a later unknown one."""
        last_ok = max((i for i, a in enumerate(self.attempts) if a.outcome == "ok"), default=-1)
        allowed: set[str | None] = {self.attempts[last_ok].checksum} if last_ok >= 0 else {None}
        allowed |= {a.checksum for a in self.attempts[last_ok + 1 :] if a.outcome == "unknown"}
        return allowed

    def file_counts(self) -> dict[str, int]:
        return {a.checksum: a.file_count for a in self.attempts}


def random_archive(rng: random.Random, serial: int) -> tuple[bytes, int]:
    """A distinct archive of 1-12 files, some large and incompressible so kills land mid-upload."""
    n = rng.randint(1, 12)
    files = {f"memory/{serial}-{i}.md": f"upload {serial} file {i}\n".encode() for i in range(n - 1)}
    files[f"memory/{serial}-blob.bin"] = rng.randbytes(rng.choice([1_000, 20_000, 200_000, 800_000]))
    return make_archive(files), n


class Budget:
    """Upload attempts left, shared by the uploader threads."""

    def __init__(self, total: int) -> None:
        self.left = total
        self._lock = threading.Lock()

    @property
    def taken(self) -> int:
        """Attempts started so far."""
        return TOTAL_UPLOADS - self.left

    def take(self) -> int | None:
        """A serial number for the next attempt, or None when the budget is spent."""
        with self._lock:
            if self.left <= 0:
                return None
            self.left -= 1
            return TOTAL_UPLOADS - self.left


def uploader(url: str, token: str, log: BrainLog, rng: random.Random, budget: Budget, stop: threading.Event) -> None:
    """Upload to one brain until the server dies (or the budget is spent); record each outcome."""
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
        while not stop.is_set() and (serial := budget.take()) is not None:
            archive, count = random_archive(rng, serial)
            attempt = Attempt(archive, count)
            log.attempts.append(attempt)
            try:
                resp = http.put(f"/api/brains/{log.brain_id}/sync", files={"brain": ("b.tar.gz", archive, "application/gzip")})
            except httpx.HTTPError:
                attempt.outcome = "unknown"
                return
            attempt.outcome = "ok" if resp.status_code == 200 else "refused"
            if resp.status_code != 200:  # only a dying server may fail an upload
                return


def consistent_state(url: str, token: str, log: BrainLog) -> str | None:
    """Check one brain's record against its download; return the live checksum."""
    headers = {"Authorization": f"Bearer {token}"}
    record = httpx.get(f"{url}/api/brains/{log.brain_id}", headers=headers, timeout=30).json()
    resp = httpx.get(f"{url}/api/brains/{log.brain_id}/sync", headers=headers, timeout=30)
    if record["checksum"] is None:
        assert resp.status_code == 404
        return None
    assert resp.status_code == 200
    body_sum = hashlib.sha256(resp.content).hexdigest()
    assert body_sum == record["checksum"] == resp.headers["x-checksum"]
    assert resp.headers["etag"] == f'"{body_sum}"'
    assert record["size_bytes"] == len(resp.content)
    assert record["file_count"] == log.file_counts()[body_sum]
    return body_sum


def snapshots_consistent(url: str, token: str, log: BrainLog) -> None:
    """Every listed snapshot downloads, and its bytes are one of our uploads."""
    headers = {"Authorization": f"Bearer {token}"}
    listing = httpx.get(f"{url}/api/brains/{log.brain_id}/versions", headers=headers, timeout=30).json()
    known = log.file_counts()
    for entry in listing["versions"]:
        resp = httpx.get(f"{url}/api/brains/{log.brain_id}/sync", params={"version": entry["version"]}, headers=headers, timeout=30)
        assert resp.status_code == 200, entry
        digest = hashlib.sha256(resp.content).hexdigest()
        assert digest in known
        if "checksum" in entry:
            assert entry["checksum"] == digest


def leftovers(data_dir: Path) -> list[str]:
    """Temporary or orphaned files under the data directory (S1's layout: tmp/, *.tmp, blobs/)."""
    found = [str(p) for p in (data_dir / "tmp").rglob("*")] if (data_dir / "tmp").exists() else []
    found += [str(p) for p in data_dir.rglob("*.tmp")]
    for meta_path in data_dir.glob("brains/*/*/meta.json"):
        meta = json.loads(meta_path.read_text())
        referenced = {s["archive"]["checksum"] for s in meta.get("snapshots", [])}
        if meta.get("current"):
            referenced.add(meta["current"]["checksum"])
        blobs = {p.name for p in (meta_path.parent / "blobs").glob("*")}
        found += [f"orphan blob {meta_path.parent.name}/{name}" for name in blobs - referenced]
    return found


def test_sigkill_during_uploads_never_corrupts(tmp_path: Path) -> None:
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    token = add_user(data_dir, "crashy")
    port = free_port()
    with running_store(data_dir, env=ENV, port=port) as store:
        headers = {"Authorization": f"Bearer {token}"}
        ids = [httpx.get(store.url + "/api/brains", headers=headers).json()[0]["id"]]
        ids += [httpx.post(store.url + "/api/brains", json={"name": f"b{i}"}, headers=headers).json()["id"] for i in range(BRAINS - 1)]
    logs = [BrainLog(brain_id) for brain_id in ids]
    budget = Budget(TOTAL_UPLOADS)
    kills = 0
    while budget.left > 0:
        assert kills < TOTAL_UPLOADS, "uploads never started"
        with running_store(data_dir, env=ENV, port=port, log_name="crash.log") as store:
            for log in logs:
                consistent_state(store.url, token, log)
            stop = threading.Event()
            # One uploader per brain, so several uploads are in flight when the kill lands.
            threads = [
                threading.Thread(target=uploader, args=(store.url, token, log, random.Random(rng.random()), budget, stop))
                for log in logs
            ]
            for thread in threads:
                thread.start()
            # Kill after a random number of uploads has started, at a random point of the
            # uploads then in flight: the kill moments do not depend on the machine's speed.
            target = min(budget.taken + rng.randint(3, 25), TOTAL_UPLOADS)
            waited = time.monotonic() + 60
            while budget.taken < target and time.monotonic() < waited:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.2))
            store.server.kill()
            kills += 1
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
                assert not thread.is_alive()

    with running_store(data_dir, env=ENV, port=port, log_name="crash.log") as store:
        for log in logs:
            live = consistent_state(store.url, token, log)
            assert live in log.allowed_checksums(), (log.brain_id, [a.outcome for a in log.attempts[-5:]])
            snapshots_consistent(store.url, token, log)
    outcomes = [a.outcome for log in logs for a in log.attempts]
    assert outcomes.count("refused") == 0
    assert outcomes.count("ok") > TOTAL_UPLOADS // 3, (kills, outcomes.count("ok"), outcomes.count("unknown"))
    assert leftovers(data_dir) == []
    print(f"crash test: {kills} kills, {outcomes.count('ok')} acknowledged, {outcomes.count('unknown')} in flight at a kill")
