"""OnceDocs and SealedDocs on a state directory: what replicas share through it, file by file."""

from __future__ import annotations

import secrets
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common.docstore import DirectoryStore
from connector.state.memory import MemoryStore
from connector.state.once import OnceDocs
from connector.state.sealed import SealedDocs, record_name
from connector.state.sealing import SecretBox


def _files(directory: Path) -> list[Path]:
    return [path for path in directory.iterdir() if not path.name.startswith(".")]


def test_a_claim_is_granted_once_across_processes_sharing_the_directory(tmp_path: Path) -> None:
    first, second = OnceDocs(DirectoryStore(tmp_path), "once"), OnceDocs(DirectoryStore(tmp_path), "once")
    with ThreadPoolExecutor(8) as pool:
        granted = list(pool.map(lambda marker: marker.claim("code abc"), [first, second] * 8))
    assert granted.count(True) == 1
    assert first.claim("code other") and not second.claim("code other")
    names = [path.name for path in _files(tmp_path / "once")]
    assert len(names) == 2 and all("abc" not in name and len(name) == 64 for name in names)
    assert all((tmp_path / "once" / name).stat().st_mode & 0o777 == 0o600 for name in names)
    assert (tmp_path / "once").stat().st_mode & 0o777 == 0o700


def test_old_markers_are_pruned(tmp_path: Path) -> None:
    # The clock starts within the first pruning interval, so the first claim starts no pass:
    # one started then could still be running at the second claim, which would start none.
    now = [10.0]
    markers = OnceDocs(DirectoryStore(tmp_path), "once", keep_s=600, clock=lambda: now[0], prune_every_s=30)
    assert markers.claim("code old")
    now[0] += 601
    assert markers.claim("code new")  # starts a pruning pass in the background
    deadline = time.monotonic() + 10
    while len(_files(tmp_path / "once")) > 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_files(tmp_path / "once")) == 1 and not markers.claim("code new")
    assert OnceDocs(MemoryStore(), "once").claim("a")


def test_sealed_records_are_shared_taken_once_and_bound_to_their_name(tmp_path: Path) -> None:
    box = SecretBox(secrets.token_bytes(32))
    a = SealedDocs(DirectoryStore(tmp_path), "records", box, "kind", ttl_s=60, capacity=100)
    b = SealedDocs(DirectoryStore(tmp_path), "records", box, "kind", ttl_s=60, capacity=100)
    a.put("cookie-1", {"who": "alice"}, time.time() + 60)
    a.put("cookie-2", {"who": "bob"}, time.time() + 60)
    assert b.get("cookie-1") == {"who": "alice"}
    # Another key, another kind, or a file copied over another's name: nothing opens.
    assert SealedDocs(DirectoryStore(tmp_path), "records", SecretBox(secrets.token_bytes(32)), "kind", ttl_s=60,
                      capacity=100).get("cookie-1") is None
    assert SealedDocs(DirectoryStore(tmp_path), "records", box, "other", ttl_s=60,
                      capacity=100).get("cookie-1") is None
    files = {path.name: path for path in _files(tmp_path / "records")}
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in files.values())
    shutil.copy(files[record_name("kind", "cookie-1")], files[record_name("kind", "cookie-2")])
    assert b.get("cookie-2") is None

    with ThreadPoolExecutor(8) as pool:
        taken = list(pool.map(lambda store: store.take("cookie-1"), [a, b] * 8))
    assert [record for record in taken if record is not None] == [{"who": "alice"}]
    assert a.get("cookie-1") is None and not a.delete("cookie-1")


def test_sealed_records_expire_and_stay_bounded(tmp_path: Path) -> None:
    now = [1_000_000.0]
    box = SecretBox(secrets.token_bytes(32))
    for docs in (DirectoryStore(tmp_path), MemoryStore()):
        records = SealedDocs(docs, "records", box, "kind", ttl_s=60, capacity=3, clock=lambda: now[0],
                             prune_every_s=1e9)
        records.put("short", {"n": 0}, now[0] + 5)
        now[0] += 6
        assert records.get("short") is None and len(records) == 0  # read after expiry: gone
        for number in range(10):
            records.put(f"k{number}", {"n": number}, now[0] + 60)
            now[0] += 1
        # pruned (in the background) whenever this process wrote ``capacity`` records
        deadline = time.monotonic() + 10
        while len(records) > 2 * 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(records) <= 2 * 3 and records.get("k9") == {"n": 9} and records.take("k9") == {"n": 9}
