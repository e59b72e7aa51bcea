"""BrainService and LocalBackend without a server: commit protocol, locks, quota, recovery."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import threading
from pathlib import Path

import pytest

from store.archive.inspect import InspectLimits
from store.conditional import Preconditions
from store.errors import ServiceError
from store.service import BrainService
from store.settings import StoreSettings
from store.storage import local as local_mod
from store.storage.local import LocalBackend
from store.upload import StagedUpload, UploadSink
from tests.store.conftest import brain_files, make_archive

USER = "11111111-2222-3333-4444-555555555555"
BOUNDARY = "xyzBOUNDARYzyx"


def multipart_body(archive: bytes, name: str = "brain") -> bytes:
    return (
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"b.tgz\"\r\n"
        "Content-Type: application/gzip\r\n\r\n"
    ).encode() + archive + f"\r\n--{BOUNDARY}--\r\n".encode()


def make_service(tmp_path: Path, **overrides: object) -> BrainService:
    settings = StoreSettings.from_env({}, data_dir=tmp_path / "data", fsync=False, **overrides)
    return BrainService(settings, LocalBackend(settings.data_dir, fsync=False))


def stage(service: BrainService, brain_id: str, archive: bytes, user: str = USER) -> StagedUpload:
    blob = service.backend.stage(user, brain_id)
    writer = service.sealer.writer(blob.file, user, brain_id) if service.sealer else None
    sink = UploadSink(BOUNDARY, blob, max_archive=service.upload_room(), inspect_limits=InspectLimits(),
                      writer=writer)
    body = multipart_body(archive)
    for i in range(0, len(body), 7000):  # odd chunk sizes on purpose
        sink.feed(body[i : i + 7000])
    staged = sink.staged(sink.end_body())  # inspected while streaming: no early_inspect
    blob.finish()
    return staged


def put(service: BrainService, brain_id: str, archive: bytes, cond: Preconditions | None = None,
        force: bool = False, user: str = USER):
    return service.commit_upload(user, brain_id, stage(service, brain_id, archive, user),
                                 cond or Preconditions(), force)


def tmp_files(service: BrainService) -> list[str]:
    return os.listdir(service.backend.tmp_root)


def test_upload_commit_layout_and_retention(tmp_path: Path) -> None:
    service = make_service(tmp_path, snapshots=2)
    brain = service.create(USER)
    archives = [make_archive(brain_files(2, str(i))) for i in range(4)]
    for a in archives:
        ref = put(service, brain.id, a)
        assert ref.checksum == hashlib.sha256(a).hexdigest()
        put(service, brain.id, a)  # identical re-upload: no snapshot
    meta = service.get(USER, brain.id)
    assert meta.current is not None and meta.current.checksum == hashlib.sha256(archives[3]).hexdigest()
    assert [s.archive.checksum for s in meta.snapshots] == [hashlib.sha256(a).hexdigest() for a in archives[1:3]]
    blobs = sorted(os.listdir(service.backend.brain_dir(USER, brain.id) / "blobs"))
    assert blobs == sorted(meta.blobs())  # pruned snapshots' blobs are gone
    assert tmp_files(service) == []
    # blobs hold exactly the client's bytes, named by checksum
    for name in blobs:
        data = (service.backend.brain_dir(USER, brain.id) / "blobs" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == name
    meta_path = service.backend.brain_dir(USER, brain.id) / "meta.json"
    assert oct(meta_path.stat().st_mode & 0o777) == "0o600"
    # every directory the store makes is 0700, the user's too (whatever the umask)
    for directory in (service.backend.user_dir(USER), meta_path.parent, meta_path.parent / "blobs"):
        assert oct(directory.stat().st_mode & 0o777) == "0o700", directory


def test_version_names_sort_by_age(tmp_path: Path) -> None:
    service = make_service(tmp_path, snapshots=50)
    brain = service.create(USER)
    for i in range(30):
        put(service, brain.id, make_archive(brain_files(1, str(i))))
    names = [s.name for s in service.get(USER, brain.id).snapshots]
    assert names == sorted(names) and len(set(names)) == 29


def test_disk_full_during_commit_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service = make_service(tmp_path)
    brain = service.create(USER)
    first = make_archive(brain_files(2))
    put(service, brain.id, first)
    before = service.get(USER, brain.id)
    staged = stage(service, brain.id, make_archive(brain_files(3)))

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local_mod, "write_atomic", full)
    with pytest.raises(ServiceError) as info:
        service.commit_upload(USER, brain.id, staged, Preconditions())
    assert info.value.status == 507
    monkeypatch.undo()
    assert service.get(USER, brain.id) == before
    assert sorted(os.listdir(service.backend.brain_dir(USER, brain.id) / "blobs")) == sorted(before.blobs())
    assert tmp_files(service) == []


def test_disk_full_while_staging_is_reported(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    brain = service.create(USER)
    blob = service.backend.stage(USER, brain.id)

    class FullWriter:
        def write(self, data: bytes) -> None:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")

    sink = UploadSink(BOUNDARY, blob, max_archive=10**8, inspect_limits=InspectLimits(), writer=FullWriter())
    with pytest.raises(OSError) as info:
        sink.feed(multipart_body(make_archive(brain_files(1))))
    assert local_mod.is_disk_full(info.value)
    blob.discard()
    assert tmp_files(service) == []


def test_preconditions_and_guard(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    brain = service.create(USER)
    a = make_archive(brain_files(6))
    ca = hashlib.sha256(a).hexdigest()
    with pytest.raises(ServiceError) as info:
        put(service, brain.id, a, Preconditions.from_headers("*", None))
    assert info.value.status == 412 and info.value.extra == {"current_checksum": None}
    put(service, brain.id, a, Preconditions.from_headers(None, "*"))
    with pytest.raises(ServiceError) as info:
        put(service, brain.id, make_archive({}), Preconditions.from_headers(f'"{ca}"', None))
    assert info.value.status == 409
    put(service, brain.id, make_archive({}), Preconditions.from_headers(f'"{ca}"', None), force=True)
    assert tmp_files(service) == []


def test_racing_if_match_writers_one_wins(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    brain = service.create(USER)
    base = put(service, brain.id, make_archive(brain_files(1)))
    staged = [stage(service, brain.id, make_archive(brain_files(2, f"w{i}"))) for i in range(12)]
    cond = Preconditions.from_headers(f'"{base.checksum}"', None)
    results: list[int] = []
    barrier = threading.Barrier(len(staged))

    def run(s: StagedUpload) -> None:
        barrier.wait()
        try:
            service.commit_upload(USER, brain.id, s, cond)
            results.append(200)
        except ServiceError as exc:
            results.append(exc.status)

    threads = [threading.Thread(target=run, args=(s,)) for s in staged]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [200] + [412] * 11
    assert tmp_files(service) == []


def test_quota_counts_snapshots_and_holds_under_concurrency(tmp_path: Path) -> None:
    import os as _os

    big = [make_archive({"x.bin": _os.urandom(400 * 1024), **brain_files(1, str(i))}) for i in range(4)]
    service = make_service(tmp_path, max_user_bytes=1024 * 1024)
    b1 = service.create(USER, "one")
    b2 = service.create(USER, "two")
    put(service, b1.id, big[0])
    # each of these fits alone (400 KiB + 400 KiB) but not both (1.2 MiB > 1 MiB)
    s1, s2 = stage(service, b1.id, big[1]), stage(service, b2.id, big[2])
    results: list[int] = []
    barrier = threading.Barrier(2)

    def run(bid: str, s: StagedUpload) -> None:
        barrier.wait()
        try:
            service.commit_upload(USER, bid, s, Preconditions())
            results.append(200)
        except ServiceError as exc:
            results.append(exc.status)

    threads = [threading.Thread(target=run, args=a) for a in ((b1.id, s1), (b2.id, s2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [200, 413]
    assert service.usage(USER) <= 1024 * 1024
    assert tmp_files(service) == []


def test_delete_racing_commit_is_safe(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    brain = service.create(USER)
    staged = stage(service, brain.id, make_archive(brain_files(1)))
    service.delete(USER, brain.id)
    with pytest.raises(ServiceError) as info:
        service.commit_upload(USER, brain.id, staged, Preconditions())
    assert info.value.status == 404
    assert tmp_files(service) == []


def test_brain_limit_and_names(tmp_path: Path) -> None:
    service = make_service(tmp_path, max_brains=2)
    service.create(USER)
    service.create(USER, "work")
    with pytest.raises(ServiceError) as info:
        service.create(USER, "third")
    assert info.value.status == 403
    with pytest.raises(ServiceError) as info:
        make_service(tmp_path / "x").create(USER, "a/b")
    assert info.value.status == 400


def test_startup_recovery(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    backend = service.backend
    brain = service.create(USER)
    put(service, brain.id, make_archive(brain_files(1)))
    blobs_dir = backend.brain_dir(USER, brain.id) / "blobs"
    (blobs_dir / ("0" * 64)).write_bytes(b"orphan blob")  # renamed in, meta never written
    (backend.brain_dir(USER, brain.id) / ".meta.json.abc.tmp").write_bytes(b"{")
    (backend.tmp_root / "up-dead").write_bytes(b"partial upload")
    (backend.tmp_root / "deleted-x").mkdir()
    half = backend.user_dir(USER) / "99999999-9999-9999-9999-999999999999"
    half.mkdir()
    live = backend.tmp_root / "up-live"
    fd = os.open(live, os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        LocalBackend(backend.root, fsync=False).startup()
        assert os.listdir(backend.tmp_root) == ["up-live"]  # a live upload is left alone
    finally:
        os.close(fd)
    assert sorted(os.listdir(blobs_dir)) == sorted(service.get(USER, brain.id).blobs())
    assert not half.exists()
    assert [p.name for p in backend.brain_dir(USER, brain.id).iterdir()] != []
    assert not list(backend.brain_dir(USER, brain.id).glob(".*.tmp"))


def test_meta_cache_sees_other_process_commits(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    other = BrainService(service.settings, LocalBackend(service.settings.data_dir, fsync=False))
    brain = service.create(USER)
    assert other.get(USER, brain.id).current is None
    put(service, brain.id, make_archive(brain_files(1)))
    assert other.get(USER, brain.id).current is not None
    assert [m.id for m in other.list_brains(USER)] == [brain.id]
    service.create(USER, "second")
    assert len(other.list_brains(USER)) == 2


def test_recently_written_meta_is_not_cached(tmp_path: Path) -> None:
    # Same inode, mtime and size but different content (what inode reuse within one
    # timestamp tick looks like): a just-written file must be read again.
    service = make_service(tmp_path)
    brain = service.create(USER, "aaaa")
    path = service.backend.brain_dir(USER, brain.id) / "meta.json"
    st = path.stat()
    now = __import__("time").time_ns()
    os.utime(path, ns=(now, now))
    assert service.backend.read_meta(USER, brain.id).name == "aaaa"
    path.write_bytes(path.read_bytes().replace(b'"aaaa"', b'"bbbb"'))
    os.utime(path, ns=(now, now))
    assert path.stat().st_ino == st.st_ino
    assert service.backend.read_meta(USER, brain.id).name == "bbbb"


def test_default_brain_created_once_under_concurrency(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    barrier = threading.Barrier(8)

    def run() -> None:
        barrier.wait()
        service.ensure_default(USER)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [m.name for m in service.list_brains(USER)] == ["default"]


def test_damaged_meta_is_isolated_and_never_deleted(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    good = service.create(USER, "good")
    bad = service.create(USER, "bad")
    put(service, bad.id, make_archive(brain_files(1)))
    meta_path = service.backend.brain_dir(USER, bad.id) / "meta.json"
    meta_path.write_bytes(b"{ damaged")
    assert [m.id for m in service.list_brains(USER)] == [good.id]
    for call in (lambda: service.get(USER, bad.id), lambda: put(service, bad.id, make_archive(brain_files(2)))):
        with pytest.raises(ServiceError) as info:
            call()
        assert info.value.status == 500
    LocalBackend(service.backend.root, fsync=False).startup()
    assert meta_path.read_bytes() == b"{ damaged"
    assert len(os.listdir(service.backend.brain_dir(USER, bad.id) / "blobs")) == 1
