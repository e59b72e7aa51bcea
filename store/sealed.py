"""Encryption at rest as the store uses it: which key seals, which keys may open.

Wraps ``store.storage.sealing`` (streaming AES-256-GCM with a per-user HKDF key and
associated data binding user, brain and checksum). New blobs are sealed with the
current master key; blobs sealed under a previous key (``STORE_ENCRYPTION_PREVIOUS_KEYS``)
still open, so ``brain-store rekey`` can run while the server serves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, BinaryIO

from store.settings import StoreSettings
from store.storage.base import BlobMissing, StorageBackend

log = logging.getLogger("store")

CHUNK = 1024 * 1024
# Start of a sealed blob (store.storage.sealing.MAGIC); kept here so encryption-off stores
# need not import the crypto stack to recognise one.
SEALED_MAGIC = b"BSTSEAL\x00"
HEADER_SIZE = 37  # store.storage.sealing.HEADER_SIZE: magic, version, chunk size, key id, salt
# Archives the start-up check looks at: enough to catch a store started on sealed data without
# its key, few enough that it costs a handful of reads even on a large bucket.
SAMPLED_ARCHIVES = 8

NO_KEY = "STORE_ENCRYPTION_KEY is not set"
WRONG_KEY = "no configured key (STORE_ENCRYPTION_KEY, STORE_ENCRYPTION_PREVIOUS_KEYS) is the one that sealed them"


class SealedFileRefused(Exception):
    """A stored blob is not sealed (or not openable) although it must be; never serve it."""


class SealedKeyUnknown(SealedFileRefused):
    """A sealed blob was sealed with a key this process is not configured with (a settings
    problem, not damage): ``reason`` says which (``NO_KEY`` or ``WRONG_KEY``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KeyDoesNotFit(RuntimeError):
    """The stored archives are sealed and the configured keys cannot open them; the store
    must not start (it would answer every download with an error)."""


class ArchiveSealer:
    """Seal new blobs with the current key; open blobs sealed with the current or a previous key."""

    def __init__(self, master_key: bytes, previous_keys: tuple[bytes, ...] = ()) -> None:
        from store.storage import sealing  # imported only when encryption is on

        self._sealing = sealing
        self._masters = (master_key, *previous_keys)
        self._user_keys: dict[tuple[int, str], bytes] = {}

    def _key(self, index: int, user_id: str) -> bytes:
        cached = self._user_keys.get((index, user_id))
        if cached is None:
            cached = self._sealing.derive_user_key(self._masters[index], user_id)
            if len(self._user_keys) > 10_000:
                self._user_keys.clear()
            self._user_keys[(index, user_id)] = cached
        return cached

    def writer(self, out: BinaryIO, user_id: str, brain_id: str) -> Any:
        """A writer with ``.write(chunk)`` and ``.close(checksum)`` sealing into ``out``."""
        return self._sealing.SealWriter(out, self._key(0, user_id), user_id, brain_id)

    def is_sealed(self, first_bytes: bytes) -> bool:
        """True when a file starting with ``first_bytes`` is in the sealed format."""
        return bool(self._sealing.is_sealed(first_bytes))

    def knows_key(self, header: bytes, user_id: str) -> bool:
        """False when ``header`` (a blob's first ``HEADER_SIZE`` bytes) is sealed with a key id
        none of the configured keys has for ``user_id``; True otherwise (a plain or truncated
        header is for the integrity check to refuse)."""
        stored = self._sealing.read_key_id(header)
        return stored is None or any(self._sealing.key_id(key) == stored for key in self.user_keys(user_id))

    def open(self, f: BinaryIO, user_id: str, brain_id: str, checksum: str) -> Iterator[bytes]:
        """Plaintext chunks of a sealed blob; raises ``SealedFileRefused`` before yielding anything
        when it is not sealed, no accepted key opens it (``SealedKeyUnknown``), or the binding
        does not match."""
        head = f.read(HEADER_SIZE)
        if not self.is_sealed(head):
            raise SealedFileRefused("stored archive is not sealed")
        if not self.knows_key(head, user_id):
            raise SealedKeyUnknown(WRONG_KEY)
        f.seek(0)
        keys = self.user_keys(user_id)
        stream = self._sealing.open_sealed(f, keys, user_id, brain_id, checksum)
        try:
            first = next(stream, None)
        except self._sealing.SealError as exc:
            raise SealedFileRefused(f"stored archive cannot be opened ({exc})") from None
        return _chain(first, stream)

    def user_keys(self, user_id: str) -> list[bytes]:
        """Per-user keys for every accepted master key (current first)."""
        return [self._key(i, user_id) for i in range(len(self._masters))]


def _chain(first: bytes | None, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def check_keys_fit(settings: StoreSettings, backend: StorageBackend, sample: int = SAMPLED_ARCHIVES) -> None:
    """Before serving: raise ``KeyDoesNotFit`` (one line naming the variable) when one of the
    first ``sample`` stored archives is sealed and no configured key opens it, or is plain while
    a key is set (a store with a key serves only sealed archives: encryption was turned on
    without sealing them first). Without this the store would say ready and then refuse every
    download."""
    sealer = ArchiveSealer(settings.encryption_key, settings.previous_keys) if settings.encryption_key else None
    for user_id, head in _archive_heads(backend, sample):
        if not head.startswith(SEALED_MAGIC):
            if sealer is not None:
                raise KeyDoesNotFit(
                    "the stored archives are not encrypted at rest and STORE_ENCRYPTION_KEY is set (a store "
                    "with a key serves only sealed archives): stop, seal them with `brain-store rekey "
                    "--new-key <key>` run without STORE_ENCRYPTION_KEY, then start the store with it"
                )
            continue
        if sealer is None or not sealer.knows_key(head, user_id):
            raise KeyDoesNotFit(
                f"the stored archives are encrypted at rest and {NO_KEY if sealer is None else WRONG_KEY}: "
                "start the store with STORE_ENCRYPTION_KEY set to the key that sealed them"
            )


def _archive_heads(backend: StorageBackend, limit: int) -> Iterator[tuple[str, bytes]]:
    """(user id, first ``HEADER_SIZE`` bytes) of up to ``limit`` stored archives, current and snapshots."""
    seen = 0
    for user_id in backend.iter_users():
        try:
            metas = backend.list_brains(user_id)
        except Exception as exc:  # noqa: BLE001 - a sample: what cannot be read is refused per request, as before
            log.warning("key check: skipping the brains of user %s: %s", user_id, exc)
            continue
        for meta in metas:
            for checksum in sorted(meta.blobs()):
                try:
                    with backend.open_blob(user_id, meta.id, checksum) as blob:
                        head = blob.read(HEADER_SIZE)
                except BlobMissing:
                    continue  # replaced meanwhile
                except Exception as exc:  # noqa: BLE001 - as above: a damaged blob must not stop the store
                    log.warning("key check: skipping brain %s archive %s: %s", meta.id, checksum, exc)
                    continue
                yield user_id, head
                seen += 1
                if seen >= limit:
                    return
