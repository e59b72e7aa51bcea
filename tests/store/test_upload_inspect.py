"""When and from where an upload's archive is inspected.

A small body (at most WHOLE_BODY, handed over whole) keeps its archive in memory and is
inspected from there once the checksum is known; a larger plain upload on local disk
inspects 64 KiB while streaming and the rest read back from the staged blob; a larger
sealed upload is inspected while it streams (no second decryption). An archive the brain
already stores (same checksum) takes its file count from the metadata instead. Garbage
in a large body is still refused while the body streams.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from store import upload as upload_mod
from store.conditional import Preconditions
from store.errors import ServiceError
from store.service import BrainService
from store.settings import SettingsError, StoreSettings
import store.storage.local as local_mod
from store.storage.local import LocalBackend
from store.upload import EARLY_INSPECT, FEED_BATCH, WHOLE_BODY, BodyReader, receive_upload
from tests.store.conftest import make_archive
from tests.store.unit.tarbuild import member as tarbuild_member
from tests.store.test_service import BOUNDARY, USER, multipart_body

KEY = "ab" * 32


def service_for(tmp_path: Path, encrypted: bool = False) -> BrainService:
    env = {"STORE_ENCRYPTION_KEY": KEY} if encrypted else {}
    settings = StoreSettings.from_env(env, data_dir=tmp_path / "data", fsync=False)
    return BrainService(settings, LocalBackend(settings.data_dir, fsync=False))


def big_archive(seed: int, files: int = 6) -> bytes:
    """Well over EARLY_INSPECT once compressed (random content does not shrink)."""
    rng = random.Random(seed)
    archive = make_archive({f"memories/m{i}.md": rng.randbytes(40_000) for i in range(files)})
    assert len(archive) > 2 * EARLY_INSPECT
    return archive


def upload(service: BrainService, brain_id: str, archive: bytes, *, with_length: bool = True) -> Any:
    body = multipart_body(archive)

    async def run() -> Any:
        pieces = [body[i : i + 50_000] for i in range(0, len(body), 50_000)]

        async def receive() -> dict[str, Any]:
            chunk = pieces.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pieces)}

        length = str(len(body)) if with_length else None
        return await receive_upload(service, BodyReader(receive), BOUNDARY, length, USER, brain_id,
                                    Preconditions(), False)

    return asyncio.run(run())


@pytest.mark.parametrize("files", [6, 60])  # a body kept in memory, and one over WHOLE_BODY
@pytest.mark.parametrize("encrypted", [False, True])
def test_new_archive_is_inspected_to_the_end(tmp_path: Path, encrypted: bool, files: int) -> None:
    service = service_for(tmp_path, encrypted)
    brain = service.create(USER)
    good = big_archive(1, files)
    assert (len(multipart_body(good)) > WHOLE_BODY) == (files == 60)
    stored = upload(service, brain.id, good)
    assert stored.file_count == files and stored.size == len(good)
    # damage the tar inside, far beyond the part inspected while streaming: refused, nothing changes
    import gzip

    tar = bytearray(gzip.decompress(good))
    tar[len(tar) - 2000 : len(tar) - 1024] = b"\x01" * 976  # junk where the end marker's neighbours are
    bad = gzip.compress(bytes(tar), compresslevel=1)
    assert len(bad) > 2 * EARLY_INSPECT
    with pytest.raises(ServiceError) as info:
        upload(service, brain.id, bad)
    assert info.value.status == 400
    assert service.get(USER, brain.id).current == stored
    assert os.listdir(service.backend.tmp_root) == []


def no_reread(*args: Any) -> Any:
    raise AssertionError("the staged blob was read back")


@pytest.mark.parametrize("encrypted", [False, True])
def test_small_body_is_inspected_from_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encrypted: bool) -> None:
    service = service_for(tmp_path, encrypted)
    brain = service.create(USER)
    monkeypatch.setattr(upload_mod, "staged_plaintext", no_reread)
    stored = upload(service, brain.id, big_archive(6, files=6))
    assert stored.file_count == 6 and stored.sealed == encrypted
    with pytest.raises(ServiceError) as info:  # and a bad one is still refused, from memory
        upload(service, brain.id, big_archive(7, files=6)[:-5000])
    assert info.value.status == 400 and service.get(USER, brain.id).current == stored


@pytest.mark.parametrize("again", [False, True])  # a new archive, and one the brain already stores
def test_small_body_is_let_go_before_the_disk_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, again: bool) -> None:
    service = service_for(tmp_path)
    brain = service.create(USER)
    archive = big_archive(9, files=6)
    if again:
        upload(service, brain.id, archive)
    held: dict[str, Any] = {}
    checked, committed = upload_mod._checked, upload_mod._durably_committed

    def spy_checked(service: BrainService, sink: Any, tail: list[bytes], *args: Any) -> Any:
        held.update(sink=sink, tail=tail, pieces=len(tail))
        return checked(service, sink, tail, *args)

    def spy_committed(*args: Any) -> Any:
        # what the upload still references while it waits for fsync and the commit
        held.update(tail_left=list(held["tail"]), kept_left=list(held["sink"].kept))
        return committed(*args)

    monkeypatch.setattr(upload_mod, "_checked", spy_checked)
    monkeypatch.setattr(upload_mod, "_durably_committed", spy_committed)
    stored = upload(service, brain.id, archive)
    assert stored.file_count == 6
    assert held["pieces"] > 1  # the body arrived in several pieces, all handed over at its end
    assert held["tail_left"] == [] and held["kept_left"] == []


@pytest.mark.parametrize("memo_mb", ["64", "0"])
def test_large_plain_body_is_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo_mb: str) -> None:
    """Read back mapped whole (validated against the brain's last archive), or in pieces (memos off)."""
    settings = StoreSettings.from_env({"STORE_VALIDATION_MEMO_MB": memo_mb}, data_dir=tmp_path / "data", fsync=False)
    service = BrainService(settings, LocalBackend(settings.data_dir, fsync=False))
    brain = service.create(USER)
    monkeypatch.setattr(upload_mod, "staged_plaintext", no_reread)
    monkeypatch.setattr(upload_mod, "staged_mapping", no_reread)
    with pytest.raises(AssertionError, match="read back"):
        upload(service, brain.id, big_archive(8, files=60))


def test_garbage_is_refused_while_streaming(tmp_path: Path) -> None:
    service = service_for(tmp_path)
    brain = service.create(USER)
    fed: list[int] = []
    real_feed = upload_mod.UploadSink.feed

    def counting_feed(self: Any, chunk: bytes) -> None:
        fed.append(len(chunk))
        real_feed(self, chunk)

    upload_mod.UploadSink.feed = counting_feed  # type: ignore[method-assign]
    try:
        with pytest.raises(ServiceError) as info:
            upload(service, brain.id, os.urandom(3 * 1024 * 1024))
    finally:
        upload_mod.UploadSink.feed = real_feed  # type: ignore[method-assign]
    assert info.value.status == 400
    assert sum(fed) < 1024 * 1024  # refused on the first batch, not after the whole body
    assert os.listdir(service.backend.tmp_root) == []


def test_large_sealed_upload_is_inspected_while_streaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service = service_for(tmp_path, encrypted=True)
    brain = service.create(USER)
    monkeypatch.setattr(upload_mod, "staged_plaintext", no_reread)
    stored = upload(service, brain.id, big_archive(4, files=60))
    assert stored.file_count == 60 and stored.sealed


@pytest.mark.parametrize(("files", "encrypted"), [(5, False), (5, True), (60, False)])
def test_stored_archive_is_not_inflated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int, encrypted: bool
) -> None:
    service = service_for(tmp_path, encrypted)
    brain = service.create(USER)
    a, b = big_archive(2, files=files), big_archive(3, files=7)
    first_a, first_b = upload(service, brain.id, a), upload(service, brain.id, b)
    assert (first_a.file_count, first_b.file_count) == (files, 7)

    def no_inspection(*args: Any) -> Any:
        raise AssertionError("a stored archive was inspected again")

    monkeypatch.setattr(upload_mod.UploadSink, "inspect_rest", no_inspection)
    monkeypatch.setattr(upload_mod, "inspect_against", no_inspection)  # nor against the brain's last archive
    again = upload(service, brain.id, a)  # a is a snapshot now
    assert again.checksum == first_a.checksum and again.file_count == files
    meta = service.get(USER, brain.id)
    assert meta.current is not None and meta.current.file_count == files
    assert [s.archive.checksum for s in meta.snapshots][-1] == first_b.checksum
    # another brain does not know it: inspected there
    other = service.create(USER, "other")
    with pytest.raises(AssertionError, match="inspected again"):
        upload(service, other.id, a)


@pytest.mark.parametrize("memo_mb", [64, 0])
def test_next_archive_is_validated_against_the_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo_mb: int) -> None:
    """A brain's next archive has its unchanged compressed bytes taken from what validating the last
    one established; a hostile entry added to it is refused all the same, and nothing changes.
    With STORE_VALIDATION_MEMO_MB=0 every archive is inspected whole."""
    from tests.store.unit.test_archive_resume import HOSTILE_MEMBERS, members, packed, segments_of
    from tests.store.unit.tarbuild import END

    settings = StoreSettings.from_env({"STORE_VALIDATION_MEMO_MB": str(memo_mb)}, data_dir=tmp_path / "data",
                                      fsync=False)
    service = BrainService(settings, LocalBackend(settings.data_dir, fsync=False))
    brain = service.create(USER)
    reused: list[int] = []
    real = upload_mod.inspect_against

    def spy(*args: Any) -> Any:
        done = real(*args)
        reused.append(-1 if done is None else done.reused)
        return done

    monkeypatch.setattr(upload_mod, "inspect_against", spy)
    segments = segments_of(members()) + [END]
    first = upload(service, brain.id, packed(segments))
    changed = list(segments)
    changed[20] += tarbuild_member(b"./notes/new.md", b"a new memory")
    second_archive = packed(changed)
    second = upload(service, brain.id, second_archive)
    assert second.file_count == first.file_count + 1
    hostile = list(changed)
    hostile[50] += HOSTILE_MEMBERS["symlink"]
    with pytest.raises(ServiceError) as info:
        upload(service, brain.id, packed(hostile))
    assert info.value.status == 400 and "symbolic links are not allowed" in info.value.message
    assert service.get(USER, brain.id).current == second
    assert os.listdir(service.backend.tmp_root) == []
    if memo_mb:
        assert reused[0] == 0 and reused[1] > 0.8 * len(second_archive) and reused[2] == -1
    else:
        assert reused == []


def test_concurrent_uploads_share_a_bounded_number_of_cpu_threads(tmp_path: Path, monkeypatch: Any) -> None:
    """Eight uploads at once: never more than STORE_UPLOAD_THREADS threads parse, hash and inflate together
    (more only trade GIL hand-overs), and every upload still lands."""
    import threading
    import time

    settings = StoreSettings.from_env({"STORE_UPLOAD_THREADS": "2"}, data_dir=tmp_path / "data", fsync=False)
    service = BrainService(settings, LocalBackend(settings.data_dir, fsync=False))
    users = [str(uuid.UUID(int=i + 1)) for i in range(8)]
    brains = {user: service.create(user).id for user in users}
    busy = 0
    most = 0
    lock = threading.Lock()
    real_feed = upload_mod.UploadSink.feed

    def counting_feed(self: Any, chunk: bytes) -> None:
        nonlocal busy, most
        with lock:
            busy += 1
            most = max(most, busy)
        try:
            time.sleep(0.005)  # hold the slot long enough for the others to pile up
            real_feed(self, chunk)
        finally:
            with lock:
                busy -= 1

    monkeypatch.setattr(upload_mod.UploadSink, "feed", counting_feed)
    archives = {user: big_archive(10 + i, files=12) for i, user in enumerate(users)}

    async def one(user: str) -> Any:
        body = multipart_body(archives[user])
        pieces = [body[i : i + 300_000] for i in range(0, len(body), 300_000)]

        async def receive() -> dict[str, Any]:
            await asyncio.sleep(0.005)  # the network: the loop waits, the feeding thread runs
            chunk = pieces.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pieces)}

        return await receive_upload(service, BodyReader(receive), BOUNDARY, str(len(body)), user, brains[user],
                                    Preconditions(), False)

    async def run() -> list[Any]:
        return await asyncio.gather(*(one(user) for user in users))

    stored = asyncio.run(run())
    assert [s.file_count for s in stored] == [12] * 8
    assert most == 2, most
    for user in users:
        assert service.get(user, brains[user]).current.checksum == stored[users.index(user)].checksum


@pytest.mark.parametrize(("files", "with_length", "whole"), [(20, True, True), (80, True, False), (20, False, False)])
def test_hand_overs_to_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int, with_length: bool,
                                  whole: bool) -> None:
    """A body of at most WHOLE_BODY with a Content-Length is handed over once; others in FEED_BATCH pieces."""
    service = service_for(tmp_path)
    brain = service.create(USER)
    archive = big_archive(5, files=files)
    assert (len(multipart_body(archive)) <= WHOLE_BODY) == (files == 20)
    handed: list[int] = []
    real_feed_all = upload_mod.UploadSink.feed_all

    def counting_feed_all(self: Any, chunks: list[bytes]) -> None:
        handed.append(sum(map(len, chunks)))
        real_feed_all(self, chunks)

    monkeypatch.setattr(upload_mod.UploadSink, "feed_all", counting_feed_all)
    stored = upload(service, brain.id, archive, with_length=with_length)
    assert stored.file_count == files
    assert sum(handed) == len(multipart_body(archive))
    if whole:
        assert len(handed) == 1
    else:
        assert len(handed) > 1 and max(handed) < FEED_BATCH + 50_000  # one receive piece over at most


@pytest.mark.parametrize(
    ("configured", "workers", "cores", "expected"),
    [(3, 1, 2, 3), (0, 1, 2, 2), (0, 2, 2, 1), (0, 2, 8, 2), (0, 1, 1, 1), (0, 4, 2, 1), (1, 1, 16, 1)],
)
def test_upload_threads_share_the_cores_among_workers(
    monkeypatch: pytest.MonkeyPatch, configured: int, workers: int, cores: int, expected: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert upload_mod.upload_threads(configured, workers) == expected


def test_upload_threads_setting() -> None:
    assert StoreSettings.from_env({}).upload_threads == 0
    settings = StoreSettings.from_env({"STORE_UPLOAD_THREADS": "3"})
    assert settings.upload_threads == 3 and StoreSettings.from_env(settings.to_env()) == settings
    with pytest.raises(SettingsError):
        StoreSettings.from_env({"STORE_UPLOAD_THREADS": "-1"})



def test_a_batch_is_fed_while_the_next_is_received(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker parses, hashes and writes one batch while the event loop receives the next one,
    one batch at a time, in order; the archive is stored as sent."""
    service = service_for(tmp_path)
    brain = service.create(USER)
    archive = big_archive(6, files=80)
    body = multipart_body(archive)
    assert len(body) > WHOLE_BODY
    feeds: list[tuple[float, float]] = []
    fed: list[bytes] = []
    pieces = [body[i : i + 50_000] for i in range(0, len(body), 50_000)]
    during: list[int] = []  # per feed: the pieces the loop received while it ran
    feeding, received = threading.Event(), threading.Event()
    waited_in_vain: list[bool] = []
    real_feed_all = upload_mod.UploadSink.feed_all

    def slow_feed_all(self: Any, chunks: list[bytes]) -> None:
        began = time.monotonic()
        during.append(0)
        received.clear()
        feeding.set()
        # A slow disk: this batch is written only once the loop has received more of the body
        # meanwhile (bounded, only while there is more, and given up after one wait in vain: a
        # loop that waited for each feed would receive nothing during any, failing on `during`).
        if pieces and not waited_in_vain:
            if not received.wait(5):
                waited_in_vain.append(True)
        feeding.clear()
        fed.extend(chunks)
        real_feed_all(self, chunks)
        feeds.append((began, time.monotonic()))

    monkeypatch.setattr(upload_mod.UploadSink, "feed_all", slow_feed_all)

    async def run() -> Any:
        async def receive() -> dict[str, Any]:
            await asyncio.sleep(0.005)  # the network: the loop waits, the feeding thread runs
            chunk = pieces.pop(0)
            if feeding.is_set():
                during[-1] += 1
                received.set()
            return {"type": "http.request", "body": chunk, "more_body": bool(pieces)}

        return await receive_upload(service, BodyReader(receive), BOUNDARY, str(len(body)), USER, brain.id,
                                    Preconditions(), False)

    stored = asyncio.run(run())
    assert stored.file_count == 80
    assert b"".join(fed) == body  # every piece once, in order
    assert all(ended <= began for (_, ended), (began, _) in zip(feeds, feeds[1:]))  # one batch at a time
    assert len(feeds) > 10
    assert sum(during) > 0  # some of the body arrived while a batch was being fed


@pytest.mark.parametrize("memo_mb", [64, 0])
def test_the_disk_flush_of_a_next_archive_overlaps_its_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo_mb: int
) -> None:
    """An archive validated against its brain's last one has its staged file flushed beside the
    validation (the commit still fsyncs it after); a first archive, or any with memos off, is
    flushed only once valid, and a refused one is removed all the same."""
    from tests.store.unit.test_archive_resume import HOSTILE_MEMBERS, members, packed, segments_of
    from tests.store.unit.tarbuild import END

    settings = StoreSettings.from_env({"STORE_VALIDATION_MEMO_MB": str(memo_mb)}, data_dir=tmp_path / "data",
                                      fsync=False)  # the commit's own fsyncs off: every fsync seen is an early one
    service = BrainService(settings, LocalBackend(settings.data_dir, fsync=False))
    brain = service.create(USER)
    validating, flushing = threading.Event(), threading.Event()
    flushes: list[bool] = []  # one per early fsync: whether a validation was running then
    real_inspect, real_fsync = upload_mod.inspect_against, os.fsync

    # Each side waits (bounded) for the other to have started, so an overlap is seen whatever
    # the scheduling; code that ran them one after the other would time out and record False.
    def spy(*args: Any) -> Any:
        validating.set()
        try:
            if args[2] is not None:  # against a memo: the flush is expected beside this validation
                flushing.wait(5)
            return real_inspect(*args)
        finally:
            validating.clear()
            flushing.clear()

    def fsync(fd: int) -> None:
        flushing.set()
        flushes.append(validating.wait(5))
        real_fsync(fd)

    monkeypatch.setattr(upload_mod, "inspect_against", spy)
    monkeypatch.setattr(os, "fsync", fsync)
    segments = segments_of(members()) + [END]
    upload(service, brain.id, packed(segments))
    assert flushes == []  # no memo yet: validated whole before any flush
    changed = list(segments)
    changed[20] += tarbuild_member(b"./notes/new.md", b"a new memory")
    second = upload(service, brain.id, packed(changed))
    hostile = list(changed)
    hostile[50] += HOSTILE_MEMBERS["symlink"]
    with pytest.raises(ServiceError) as info:
        upload(service, brain.id, packed(hostile))
    assert info.value.status == 400
    assert service.get(USER, brain.id).current == second
    assert os.listdir(service.backend.tmp_root) == []
    assert flushes == ([True, True] if memo_mb else [])


def test_a_commit_flushes_the_blob_rename_beside_the_metadata_and_commits_after_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With fsync on: the blobs directory is flushed (its rename made durable) while the new
    meta.json's temporary file is written and fsynced; meta.json is renamed into place only
    after both, then its directory is flushed: the same flushes before the commit point."""
    settings = StoreSettings.from_env({}, data_dir=tmp_path / "data", fsync=True)
    service = BrainService(settings, LocalBackend(settings.data_dir, fsync=True))
    brain = service.create(USER)
    events: list[str] = []
    real_fsync_dir, real_write_temporary, real_rename = local_mod.fsync_dir, local_mod.write_temporary, os.rename
    blob_dir_flushing, meta_written = threading.Event(), threading.Event()

    # Each side waits (bounded) for the other, so the overlap is seen whatever the scheduling;
    # code that flushed the blobs and then wrote the metadata would time out and record no overlap.
    def fsync_dir(path: Path) -> None:
        if path.name == "blobs":
            blob_dir_flushing.set()
            meta_written.wait(5)  # a slow disk: the metadata is written meanwhile
            events.append("blobs flushed")
            blob_dir_flushing.clear()
        else:
            events.append(f"{path.name} flushed")
        real_fsync_dir(path)

    def write_temporary(path: Path, data: bytes, **kwargs: Any) -> Any:
        beside = blob_dir_flushing.wait(5)
        events.append(f"{path.name} temporary written" + (" while blobs flush" if beside else ""))
        try:
            return real_write_temporary(path, data, **kwargs)
        finally:
            meta_written.set()

    def rename(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if Path(target).name == "meta.json":
            events.append("meta.json renamed")
        real_rename(source, target, *args, **kwargs)

    monkeypatch.setattr(local_mod, "fsync_dir", fsync_dir)
    monkeypatch.setattr(local_mod, "write_temporary", write_temporary)
    monkeypatch.setattr(local_mod.os, "rename", rename)
    stored = upload(service, brain.id, big_archive(8))
    assert service.get(USER, brain.id).current == stored
    assert events[-4:] == ["meta.json temporary written while blobs flush", "blobs flushed", "meta.json renamed",
                           f"{brain.id} flushed"]
