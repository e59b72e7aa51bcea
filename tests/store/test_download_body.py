"""Download bodies on local disk: small blobs read once then sent from memory, large ones mapped."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from store.service import BrainService, SmallBlobCache
from store.settings import StoreSettings
from store.storage.local import SMALL_BLOB, LocalBackend
from tests.store.conftest import make_archive
from tests.store.test_service import USER, make_service, put


def body_of(service: BrainService, brain_id: str, version: str | None = None) -> bytes:
    dl = service.open_download(USER, brain_id, version)
    try:
        assert dl.body is not None and dl.chunks is None
        return bytes(dl.body)
    finally:
        dl.close()


def test_small_archive_is_read_once_and_follows_new_uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service = make_service(tmp_path)
    brain = service.create(USER)
    a = make_archive({"memories/a.md": b"first"})
    b = make_archive({"memories/b.md": b"second"})
    put(service, brain.id, a)
    assert body_of(service, brain.id) == a
    opened: list[str] = []
    real_open = service.backend.open_blob

    def counting_open(*args: Any) -> Any:
        opened.append(args[2])
        return real_open(*args)

    monkeypatch.setattr(service.backend, "open_blob", counting_open)
    assert body_of(service, brain.id) == a and opened == []  # from memory
    put(service, brain.id, b)
    assert body_of(service, brain.id) == b and len(opened) == 1  # the metadata names a new checksum
    version = service.versions(USER, brain.id)[0].name
    assert body_of(service, brain.id, version) == a and len(opened) == 1  # the snapshot's bytes are known


def test_large_archive_is_sent_from_a_mapping(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    brain = service.create(USER)
    rng = random.Random(5)
    big = make_archive({f"memories/m{i}.md": rng.randbytes(100_000) for i in range(4)})
    assert len(big) > SMALL_BLOB
    put(service, brain.id, big)
    dl = service.open_download(USER, brain.id, None)
    assert isinstance(dl.body, memoryview) and dl.body.readonly
    assert bytes(dl.body) == big
    dl.close()


def test_small_blob_cache_is_bounded() -> None:
    cache = SmallBlobCache()
    piece = bytes(SmallBlobCache.MAX_BYTES // 8)
    for i in range(20):
        cache.put(("u", "b", str(i)), piece)
    assert cache.get(("u", "b", "0")) is None and cache.get(("u", "b", "19")) is piece
    assert sum(cache.get(("u", "b", str(i))) is not None for i in range(20)) == 8
    cache.put(("u", "b", "huge"), bytes(SmallBlobCache.MAX_BYTES // 8 + 1))
    assert cache.get(("u", "b", "huge")) is None


@pytest.mark.parametrize("size", [2_000, SMALL_BLOB + 50_000])
def test_sealed_blob_without_a_key_is_refused_not_sent(tmp_path: Path, size: int) -> None:
    """A store restarted without its encryption key must not send sealed bytes as the archive."""
    from store.errors import ServiceError

    sealed = BrainService(
        StoreSettings.from_env({"STORE_ENCRYPTION_KEY": "ab" * 32}, data_dir=tmp_path / "data", fsync=False),
        LocalBackend(tmp_path / "data", fsync=False),
    )
    brain = sealed.create(USER)
    rng = random.Random(size)
    put(sealed, brain.id, make_archive({"memories/a.md": rng.randbytes(size)}))
    keyless = make_service(tmp_path)
    with pytest.raises(ServiceError) as info:
        keyless.open_download(USER, brain.id, None)
    assert info.value.status == 503 and info.value.extra == {"code": "encryption_key_unavailable"}
