"""Hybrid indexes kept sealed on the replica's disk (connector/workcopy/indexdisk.py)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import msgspec
import numpy as np

from connector.engine.recall.exact import recall
from connector.engine.recall.hybrid import HybridIndex, hybrid_recall, query_signals
from connector.engine.recall.hybridpack import FORMAT, pack, unpack
from connector.engine.recall.index import BrainIndex
from connector.workcopy.indexdisk import IndexDisk
from connector.workcopy.vectors import VectorStore
from tests.engine.hybrid_support import MEMORIES, NOW, CountingEmbedder, make_brain

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
CACHE_KEY = "brain_a\n" + "ab" * 32


def _built() -> tuple[object, BrainIndex, HybridIndex, VectorStore]:
    brain, _ = make_brain([*MEMORIES, {"title": "DNS", "content": "Lower TTLs before a cutover.", "tags": ["dns"]}])
    index = BrainIndex.build(brain)
    store = VectorStore(CountingEmbedder({"PostgreSQL": 3, "database": 3}))
    hybrid = HybridIndex.build(brain, index, store)
    hybrid.hubness([0, 2])  # some hubness known: kept too
    return brain, index, hybrid, store


def _same(one: HybridIndex, other: HybridIndex, brain: object, index: BrainIndex, store: VectorStore) -> None:
    assert other.ids == one.ids and other.hashes == one.hashes and other.newer == one.newer
    assert other.hubness_known == one.hubness_known
    assert np.array_equal(other.vectors.codes, one.vectors.codes)
    assert np.array_equal(other.vectors.scales, one.vectors.scales)
    for query in ("postgres database", "kubernetse clustr", "疫苗", "Jurgen Muller", "鎌倉 散歩", "time to live"):
        exact = recall(brain, query, top=50, now=NOW, index=index)  # type: ignore[arg-type]
        a = query_signals(query, exact, index=index, hybrid=one, embed_query=store.embed_query)
        b = query_signals(query, exact, index=index, hybrid=other, embed_query=store.embed_query)
        for name in ("semantic", "words", "near_words", "fuzzy", "exact"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (query, name)
        assert hybrid_recall(brain, query, index=index, hybrid=one, embed_query=store.embed_query, now=NOW) == \
            hybrid_recall(brain, query, index=index, hybrid=other, embed_query=store.embed_query, now=NOW)  # type: ignore[arg-type]


def test_a_packed_index_answers_as_the_built_one() -> None:
    brain, index, hybrid, store = _built()
    restored = unpack(pack(hybrid, store.model_id), index, store.model_id)
    assert restored is not None
    _same(hybrid, restored, brain, index, store)


def test_a_packed_index_fits_only_its_own_memories_and_model() -> None:
    brain, index, hybrid, store = _built()
    data = pack(hybrid, store.model_id)
    assert unpack(data, index, "another-model") is None
    other_brain, _ = make_brain([{"title": "Only one", "content": "A brain of one memory."}])
    assert unpack(data, BrainIndex.build(other_brain), store.model_id) is None
    for damaged in (data[:-7], data[: len(data) // 2], b"", b"\x00" * 64, data.replace(b"format", b"formax")):
        assert unpack(damaged, index, store.model_id) is None


def test_an_index_of_an_older_format_is_rebuilt() -> None:
    # Format 4 kept BM25's weights, which a read-back index no longer holds (computed per term).
    brain, index, hybrid, store = _built()
    document = msgspec.msgpack.decode(pack(hybrid, store.model_id))
    assert document["format"] == FORMAT == 5
    document["format"] = FORMAT - 1
    assert unpack(msgspec.msgpack.encode(document), index, store.model_id) is None


def test_kept_on_disk_sealed_and_read_back_by_a_new_process_object(tmp_path: Path) -> None:
    brain, index, hybrid, store = _built()
    directory = tmp_path / "index-cache"
    IndexDisk(directory, KEY).save(CACHE_KEY, hybrid, store.model_id)
    files = list(directory.iterdir())
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
    assert directory.stat().st_mode & 0o777 == 0o700
    # Sealed: no memory text, and the name says nothing of the brain or its checksum.
    sealed = files[0].read_bytes()
    assert b"PostgreSQL" not in sealed and "疫苗".encode() not in sealed and b"postgresql" not in sealed
    assert "brain_a" not in files[0].name and "abab" not in files[0].name
    restarted = IndexDisk(directory, KEY)  # as after a restart: nothing in memory
    found = restarted.load(CACHE_KEY, index, store.model_id)
    assert found is not None
    _same(hybrid, found, brain, index, store)


def test_a_corrupt_entry_is_ignored_and_rebuilt(tmp_path: Path) -> None:
    _, index, hybrid, store = _built()
    disk = IndexDisk(tmp_path, KEY)
    disk.save(CACHE_KEY, hybrid, store.model_id)
    (path,) = tmp_path.iterdir()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert disk.load(CACHE_KEY, index, store.model_id) is None
    assert not path.exists()  # removed: the next save writes it anew
    path.write_bytes(b"truncated")
    assert disk.load(CACHE_KEY, index, store.model_id) is None
    disk.save(CACHE_KEY, hybrid, store.model_id)
    assert disk.load(CACHE_KEY, index, store.model_id) is not None


def test_another_state_key_or_cache_key_does_not_open(tmp_path: Path) -> None:
    _, index, hybrid, store = _built()
    IndexDisk(tmp_path, KEY).save(CACHE_KEY, hybrid, store.model_id)
    assert IndexDisk(tmp_path, OTHER_KEY).load(CACHE_KEY, index, store.model_id) is None
    IndexDisk(tmp_path, KEY).save(CACHE_KEY, hybrid, store.model_id)
    (path,) = tmp_path.iterdir()
    # A file renamed to stand for another brain or version does not open as that one.
    other = IndexDisk(tmp_path, KEY)._name("brain_b\n" + "cd" * 32)
    path.rename(other)
    assert IndexDisk(tmp_path, KEY).load("brain_b\n" + "cd" * 32, index, store.model_id) is None
    assert IndexDisk(tmp_path, KEY).load(CACHE_KEY, index, store.model_id) is None


def test_saves_wait_and_keep_only_a_brain_newest_version(tmp_path: Path) -> None:
    _, index, hybrid, store = _built()
    disk = IndexDisk(tmp_path, KEY)
    disk.save_later("brain_a\n", "brain_a\n" + "01" * 32, hybrid, store.model_id, delay_s=60)
    disk.save_later("brain_a\n", CACHE_KEY, hybrid, store.model_id, delay_s=60)
    assert list(tmp_path.iterdir()) == []
    disk.flush()
    assert [path.name for path in tmp_path.iterdir()] == [disk._name(CACHE_KEY).name]


def test_a_save_waits_until_the_brain_is_quiet_with_one_timer(tmp_path: Path) -> None:
    _, index, hybrid, store = _built()
    disk = IndexDisk(tmp_path, KEY)
    # The newer version comes while the timer waits. Held by the test (re-entrant: save_later takes
    # it too), the lock keeps a timer that fires early, the test's thread being late on a loaded
    # machine, from saving the first version before the second is recorded: it then finds the second.
    disk._lock = threading.RLock()  # type: ignore[assignment]
    newest = "brain_a\n" + "02" * 32
    with disk._lock:
        disk.save_later("brain_a\n", "brain_a\n" + "01" * 32, hybrid, store.model_id, delay_s=0.6)
        (timer,) = disk._timers.values()
        time.sleep(0.3)
        disk.save_later("brain_a\n", newest, hybrid, store.model_id, delay_s=0.6)
        due = time.monotonic() + 0.6
        assert list(disk._timers.values()) == [timer]  # pushed back, not one more thread per version
    timer.join(5)  # fires at 0.6 s, finds the newer version and waits for it
    if time.monotonic() < due - 0.1:
        assert list(tmp_path.iterdir()) == []
    deadline = time.monotonic() + 10
    while not disk._name(newest).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [path.name for path in tmp_path.iterdir()] == [disk._name(newest).name]
    assert disk.load(newest, index, store.model_id) is not None
    assert disk._timers == {} and disk._pending == {}


def test_the_size_budget_drops_the_least_recently_used(tmp_path: Path) -> None:
    _, index, hybrid, store = _built()
    size = len(pack(hybrid, store.model_id)) + 28
    disk = IndexDisk(tmp_path, KEY, max_bytes=2 * size)
    keys = [f"brain_a\n{n:064x}" for n in range(3)]
    disk.save(keys[0], hybrid, store.model_id)
    disk.save(keys[1], hybrid, store.model_id)
    os.utime(disk._name(keys[1]), (time.time() - 100, time.time() - 100))  # the older one now
    disk.save(keys[2], hybrid, store.model_id)
    assert not disk._name(keys[1]).exists()
    assert disk._name(keys[0]).exists() and disk._name(keys[2]).exists()
