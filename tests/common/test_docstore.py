"""The conditional document store (common.docstore) on a directory, moto and SeaweedFS.

Every backend passes the same tests: the interface's semantics, bad keys refused with nothing
written, and racers (threads in one process, and separate processes) on create, replace, take
and update: exactly one winner, exactly one taker, no lost update.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.docstore import UNCHANGED, DirectoryStore, DocumentStoreError, open_document_store
from common.docstore.s3 import S3Store
from tests.support.docstores import Backend
from tests.s3.servers import CREDENTIALS, S3Service

ROOT = Path(__file__).resolve().parents[2]


# -- semantics -------------------------------------------------------------------------------


def test_create_get_replace_put_delete(backend: Backend) -> None:
    store = backend.store
    assert store.get("a/b.json") is None
    v1 = store.create("a/b.json", b"one")
    assert v1 is not None
    assert store.create("a/b.json", b"two") is None  # exists: nothing written
    doc = store.get("a/b.json")
    assert doc is not None and doc.data == b"one" and doc.version == v1
    v2 = store.replace("a/b.json", b"two", v1)
    assert v2 is not None and v2 != v1
    assert store.replace("a/b.json", b"stale", v1) is None  # stale version: refused
    assert store.get("a/b.json").data == b"two"  # type: ignore[union-attr]
    assert store.replace("missing", b"x", v2) is None
    v3 = store.put("a/b.json", b"two")  # same bytes, still a new version on a directory
    assert store.get("a/b.json").version == v3  # type: ignore[union-attr]
    assert store.put("fresh", b"new") and store.get("fresh").data == b"new"  # type: ignore[union-attr]
    assert store.delete("a/b.json") is True
    assert store.delete("a/b.json") is False
    assert store.get("a/b.json") is None


def test_get_if_changed_answers_unchanged_until_a_write(backend: Backend) -> None:
    store, other = backend.store, backend.reopen()
    assert store.get_if_changed("doc", None) is None
    version = store.create("doc", b"v1")
    assert version is not None
    assert store.get_if_changed("doc", version) == UNCHANGED
    first = store.get_if_changed("doc", None)
    assert first != UNCHANGED and first is not None and first.data == b"v1"
    other.put("doc", b"v2")  # another replica writes
    changed = store.get_if_changed("doc", version)
    assert changed not in (None, UNCHANGED)
    assert changed.data == b"v2"  # type: ignore[union-attr]
    assert store.get_if_changed("doc", changed.version) == UNCHANGED  # type: ignore[union-attr]
    other.delete("doc")
    assert store.get_if_changed("doc", changed.version) is None  # type: ignore[union-attr]


def test_take_reads_and_removes_once(backend: Backend) -> None:
    store = backend.store
    assert store.take("codes/c1") is None
    store.create("codes/c1", b"secret")
    doc = store.take("codes/c1")
    assert doc is not None and doc.data == b"secret"
    assert store.take("codes/c1") is None
    assert store.get("codes/c1") is None
    assert store.list() == []  # no marker or lock left behind
    store.create("codes/c1", b"again")  # the same key can be created and taken again
    assert store.take("codes/c1").data == b"again"  # type: ignore[union-attr]


def test_list_returns_sorted_keys_under_a_prefix(backend: Backend) -> None:
    store = backend.store
    for key in ("b/2", "a/1", "b/1", "b-top", "c/d/e"):
        store.put(key, b"x")
    assert store.list() == ["a/1", "b-top", "b/1", "b/2", "c/d/e"]
    assert store.list("b/") == ["b/1", "b/2"]
    assert store.list("b") == ["b-top", "b/1", "b/2"]
    assert store.list("c/d/") == ["c/d/e"]
    assert store.list("nothing/") == []


def test_update_creates_changes_and_leaves(backend: Backend) -> None:
    store = backend.store
    assert store.update("n", lambda data: b"1" if data is None else None) == b"1"
    assert store.update("n", lambda data: str(int(data or b"0") + 1).encode()) == b"2"
    before = store.get("n")
    assert store.update("n", lambda data: None) == b"2"  # None: leave it as it is
    assert store.get("n") == before

    def boom(data: bytes | None) -> bytes:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.update("n", boom)
    assert store.get("n") == before  # nothing written
    assert store.update("absent", lambda data: None) is None
    assert store.get("absent") is None


BAD_KEYS = ["", "/abs", "a/../b", "..", "a//b", "a/", ".hidden", "a/.b", "sp ace", "ü", "a\\b", "x" * 1001]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_raise_value_error_and_write_nothing(backend: Backend, key: str) -> None:
    store = backend.store
    calls: list[Callable[[], Any]] = [
        lambda: store.get(key), lambda: store.get_if_changed(key, "v"), lambda: store.create(key, b"x"),
        lambda: store.replace(key, b"x", "v"), lambda: store.put(key, b"x"), lambda: store.delete(key),
        lambda: store.take(key), lambda: store.update(key, lambda data: b"x"),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()
    assert store.list() == []
    if isinstance(store, DirectoryStore):
        assert not store.root.exists()  # not even the directory was made


@pytest.mark.parametrize("prefix", ["/a", "../", "a/../", ".x", "a b"])
def test_bad_prefixes_raise_value_error(backend: Backend, prefix: str) -> None:
    with pytest.raises(ValueError):
        backend.store.list(prefix)


# -- racers ---------------------------------------------------------------------------------

RACERS = 8


def _race(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` in ``n`` threads released together; their results in order."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = work(i)
        except BaseException as exc:  # collected: a failing racer fails the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return results


def test_threads_racing_create_replace_take_have_one_winner(backend: Backend) -> None:
    stores = [backend.reopen() for _ in range(RACERS)]
    created = _race(RACERS, lambda i: stores[i].create("race/create", f"{i}".encode()))
    winners = [i for i, version in enumerate(created) if version is not None]
    assert len(winners) == 1
    assert backend.store.get("race/create").data == f"{winners[0]}".encode()  # type: ignore[union-attr]

    version = backend.store.put("race/replace", b"start")
    replaced = _race(RACERS, lambda i: stores[i].replace("race/replace", f"{i}".encode(), version))
    winners = [i for i, v in enumerate(replaced) if v is not None]
    assert len(winners) == 1
    assert backend.store.get("race/replace").data == f"{winners[0]}".encode()  # type: ignore[union-attr]

    for round_ in range(3):
        backend.store.create(f"race/take{round_}", b"code")
        taken = _race(RACERS, lambda i: stores[i].take(f"race/take{round_}"))
        assert [doc.data for doc in taken if doc is not None] == [b"code"]
    assert backend.store.list("race/take") == []


def test_threads_racing_update_lose_no_increment(backend: Backend) -> None:
    stores = [backend.reopen() for _ in range(RACERS)]
    per_racer = 5

    def bump(i: int) -> list[int]:
        return [int(stores[i].update("counter", lambda d: str(int(d or b"0") + 1).encode(), attempts=200) or b"0")
                for _ in range(per_racer)]

    seen = [n for results in _race(RACERS, bump) for n in results]
    assert backend.store.get("counter").data == str(RACERS * per_racer).encode()  # type: ignore[union-attr]
    assert sorted(seen) == list(range(1, RACERS * per_racer + 1))  # every increment saw its own value


def _processes(backend: Backend, op: str, key: str, n: int, repeat: int = 1, *extra: str) -> list[list[Any]]:
    """``n`` racer processes (tests/common/docstore_racer.py) doing ``op`` on ``key``; their results."""
    env = {**os.environ, **CREDENTIALS, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.common.docstore_racer", backend.location, backend.endpoint, op,
                          key, str(repeat), *extra],
                         cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         bufsize=0)
        for _ in range(n)
    ]
    # All import and open the store first (each says so), then all start together.
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n", proc.communicate(timeout=60)[1].decode()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err.decode()
        results.append(json.loads(out))
    return results


@pytest.mark.slow
def test_processes_racing_have_one_winner_one_taker_and_no_lost_update(backend: Backend) -> None:
    n = 4
    created = _processes(backend, "create", "p/create", n)
    assert sum(result == [True] for result in created) == 1

    version = backend.store.put("p/replace", b"start")
    replaced = _processes(backend, "replace", "p/replace", n, 1, version)
    assert sum(result == [True] for result in replaced) == 1
    assert backend.store.get("p/replace").data == b"replaced"  # type: ignore[union-attr]

    backend.store.create("p/take", b"code")
    taken = _processes(backend, "take", "p/take", n)
    assert sorted(taken, key=str) == [["code"]] + [[None]] * (n - 1)

    per_process = 5
    updated = _processes(backend, "update", "p/counter", n, per_process)
    assert backend.store.get("p/counter").data == str(n * per_process).encode()  # type: ignore[union-attr]
    assert sorted(v for result in updated for v in result) == list(range(1, n * per_process + 1))


# -- errors ----------------------------------------------------------------------------------


def test_unreachable_s3_raises_document_store_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.processes import free_port

    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    from common.s3client import make_client

    store = S3Store(make_client(f"http://127.0.0.1:{free_port()}", timeout=0.5), "bucket", "p")
    assert store.where == "s3://bucket/p/"
    for call in (lambda: store.get("k"), lambda: store.create("k", b"x"), lambda: store.list()):
        with pytest.raises(DocumentStoreError) as info:
            call()
        assert "testsecret" not in str(info.value)


def test_missing_bucket_raises_document_store_error(moto: S3Service, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    store = open_document_store("s3://no-such-bucket-here/x", s3_endpoint_url=moto.endpoint)
    with pytest.raises(DocumentStoreError):
        store.get("k")
    with pytest.raises(DocumentStoreError):
        store.create("k", b"x")


def test_open_document_store_chooses_the_backend(tmp_path: Path) -> None:
    assert isinstance(open_document_store(tmp_path / "d"), DirectoryStore)
    assert isinstance(open_document_store(str(tmp_path / "e")), DirectoryStore)
    s3 = open_document_store("s3://bucket/some/prefix", s3_endpoint_url="http://127.0.0.1:9")
    assert isinstance(s3, S3Store) and s3.where == "s3://bucket/some/prefix/"
    with pytest.raises(ValueError):
        open_document_store("s3:///prefix")


# -- the directory backend ---------------------------------------------------------------------


def test_directory_files_are_private_and_leave_no_bookkeeping(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "state", fsync=True)
    assert store.get("a") is None and store.list() == [] and store.take("a") is None
    assert not (tmp_path / "state").exists()  # reading leaves no trace
    store.create("sub/deeper/doc.json", b"{}")
    for directory in ("state", "state/sub", "state/sub/deeper"):
        assert stat.S_IMODE((tmp_path / directory).stat().st_mode) == 0o700
    store.delete("sub/deeper/doc.json")
    store.create("sub/doc.json", b"{}")
    assert stat.S_IMODE((tmp_path / "state" / "sub" / "doc.json").stat().st_mode) == 0o600
    store.update("sub/doc.json", lambda data: b"{1}")
    store.create("sub/code", b"c")
    store.take("sub/code")
    store.delete("sub/doc.json")
    # locks and temporaries gone (an emptied directory stays)
    assert [p for p in (tmp_path / "state").rglob("*") if not p.is_dir()] == []


def test_directory_notices_a_file_changed_from_outside(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, fsync=False)
    version = store.put("users.json", b'{"users": []}')
    (tmp_path / "users.json").write_bytes(b"garbage!!!!!!")  # in place, same inode
    changed = store.get_if_changed("users.json", version)
    assert changed not in (None, UNCHANGED) and changed.data == b"garbage!!!!!!"  # type: ignore[union-attr]
    # a settled, untouched file is answered from one stat
    time.sleep(0.06)
    assert store.get_if_changed("users.json", changed.version) == UNCHANGED  # type: ignore[union-attr]


def test_directory_list_skips_temporaries_and_foreign_names(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, fsync=False)
    store.put("a", b"1")
    (tmp_path / ".a.123.tmp").write_bytes(b"crash leftover")
    (tmp_path / "with space").write_bytes(b"not ours")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "b").write_bytes(b"x")
    assert store.list() == ["a"]


def test_directory_that_cannot_be_written_raises_document_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(DocumentStoreError):
        DirectoryStore(tmp_path / "file" / "below").put("a", b"x")
    store = DirectoryStore(tmp_path / "ok", fsync=False)
    store.put("a", b"1")
    with pytest.raises(DocumentStoreError):
        store.put("a/b", b"2")  # "a" is a document, not a directory
    assert store.get("a").data == b"1"  # type: ignore[union-attr]
