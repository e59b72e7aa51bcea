"""OnceMarkers and SealedRecords: what replicas share through the state directory, file by file."""

from __future__ import annotations

import os
import secrets
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from connector.state.once import OnceMarkers
from connector.state.sealed import SealedRecords
from connector.state.sealing import SecretBox


def test_a_claim_is_granted_once_across_processes_sharing_the_directory(tmp_path: Path) -> None:
    first, second = OnceMarkers(tmp_path / "once"), OnceMarkers(tmp_path / "once")
    with ThreadPoolExecutor(8) as pool:
        granted = list(pool.map(lambda marker: marker.claim("code abc"), [first, second] * 8))
    assert granted.count(True) == 1
    assert first.claim("code other") and not second.claim("code other")
    names = [path.name for path in (tmp_path / "once").iterdir()]
    assert len(names) == 2 and all("abc" not in name and len(name) == 64 for name in names)
    assert all((tmp_path / "once" / name).stat().st_mode & 0o777 == 0o600 for name in names)


def test_old_markers_are_pruned_and_memory_claims_fail_closed_when_full(tmp_path: Path) -> None:
    now = [1_000_000.0]
    markers = OnceMarkers(tmp_path / "once", keep_s=600, clock=lambda: now[0])
    assert markers.claim("code old")
    old = next((tmp_path / "once").iterdir())
    os.utime(old, (now[0] - 601, now[0] - 601))
    now[0] += 31
    assert markers.claim("code new")
    assert not old.exists() and len(list((tmp_path / "once").iterdir())) == 1

    memory = OnceMarkers(None, capacity=2)
    assert memory.claim("a") and memory.claim("b") and not memory.claim("a")
    assert not memory.claim("c")  # full of live claims: refused, never granted twice


def test_sealed_records_are_shared_taken_once_and_bound_to_their_name(tmp_path: Path) -> None:
    box = SecretBox(secrets.token_bytes(32))
    a = SealedRecords(tmp_path / "records", box, "kind", ttl_s=60, capacity=100)
    b = SealedRecords(tmp_path / "records", box, "kind", ttl_s=60, capacity=100)
    a.put("cookie-1", {"who": "alice"}, time.time() + 60)
    a.put("cookie-2", {"who": "bob"}, time.time() + 60)
    assert b.get("cookie-1") == {"who": "alice"}
    # Another key, another kind, or a file copied over another's name: nothing opens.
    assert SealedRecords(tmp_path / "records", SecretBox(secrets.token_bytes(32)), "kind", ttl_s=60,
                         capacity=100).get("cookie-1") is None
    assert SealedRecords(tmp_path / "records", box, "other", ttl_s=60, capacity=100).get("cookie-1") is None
    files = {path.name: path for path in (tmp_path / "records").iterdir()}
    alice_file = next(name for name in files if a._name("cookie-1") == name)  # noqa: SLF001
    bob_file = next(name for name in files if a._name("cookie-2") == name)  # noqa: SLF001
    shutil.copy(files[alice_file], files[bob_file])
    assert b.get("cookie-2") is None

    with ThreadPoolExecutor(8) as pool:
        taken = list(pool.map(lambda store: store.take("cookie-1"), [a, b] * 8))
    assert [record for record in taken if record is not None] == [{"who": "alice"}]
    assert a.get("cookie-1") is None and not a.delete("cookie-1")


def test_sealed_records_expire_and_stay_bounded(tmp_path: Path) -> None:
    now = [1_000_000.0]
    box = SecretBox(secrets.token_bytes(32))
    records = SealedRecords(tmp_path / "records", box, "kind", ttl_s=60, capacity=3, clock=lambda: now[0])
    records.put("short", {"n": 0}, now[0] + 5)
    now[0] += 6
    assert records.get("short") is None and len(records) == 0  # read after expiry: gone
    for number in range(10):
        records.put(f"k{number}", {"n": number}, now[0] + 60)
        now[0] += 1
    assert len(records) <= 2 * 3  # pruned whenever this process wrote ``capacity`` records
    assert records.get("k9") == {"n": 9}
    memory = SealedRecords(None, box, "kind", ttl_s=60, capacity=3, clock=lambda: now[0])
    for number in range(5):
        memory.put(f"k{number}", {"n": number}, now[0] + 60)
    assert len(memory) == 3 and memory.get("k0") is None and memory.take("k4") == {"n": 4}
