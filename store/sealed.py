"""Encryption at rest as the store uses it: which key seals, which keys may open.

Wraps ``store.storage.sealing`` (streaming AES-256-GCM with a per-user HKDF key and
associated data binding user, brain and checksum). New blobs are sealed with the
current master key; blobs sealed under a previous key (``STORE_ENCRYPTION_PREVIOUS_KEYS``)
still open, so ``brain-store rekey`` can run while the server serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

CHUNK = 1024 * 1024


class SealedFileRefused(Exception):
    """A stored blob is not sealed (or not openable) although it must be; never serve it."""


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

    def open(self, f: BinaryIO, user_id: str, brain_id: str, checksum: str) -> Iterator[bytes]:
        """Plaintext chunks of a sealed blob; raises ``SealedFileRefused`` before yielding anything
        when it is not sealed, no accepted key opens it, or the binding does not match."""
        head = f.read(len(self._sealing.MAGIC))
        if not self.is_sealed(head):
            raise SealedFileRefused("stored archive is not sealed")
        f.seek(0)
        keys = [self._key(i, user_id) for i in range(len(self._masters))]
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
