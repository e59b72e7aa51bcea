"""Put a complete brain (metadata, current archive, snapshots) into any ``StorageBackend``.

The interface only stores a blob as the *current* archive of a commit, so a brain with
several archives is built in steps: create it empty, then one commit per archive (each
making that archive current and keeping the ones before as placeholder snapshots), and
a last commit writing the real metadata. Nothing here knows about disk or S3.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, BinaryIO

import msgspec

from store.storage.base import ArchiveRef, BrainMeta, Snapshot

# Restores must not be limited by the serving limit on brains per user.
NO_BRAIN_LIMIT = 1 << 30


def archive_refs(meta: BrainMeta) -> dict[str, ArchiveRef]:
    """Each distinct stored archive of ``meta`` by checksum."""
    refs = {s.archive.checksum: s.archive for s in meta.snapshots}
    if meta.current is not None:
        refs[meta.current.checksum] = meta.current
    return refs


def is_partial(meta: BrainMeta) -> bool:
    """True for a brain left half-built by an interrupted build (it still holds placeholder snapshots)."""
    return any(len(s.name) == 20 and s.name.isdigit() for s in meta.snapshots)


def all_sealed(meta: BrainMeta) -> BrainMeta:
    """``meta`` with every archive marked sealed (what a store with a key holds once a copy
    sealed the plain ones on the way in)."""

    def sealed(ref: ArchiveRef) -> ArchiveRef:
        return msgspec.structs.replace(ref, sealed=True)

    return msgspec.structs.replace(
        meta,
        current=sealed(meta.current) if meta.current is not None else None,
        snapshots=tuple(msgspec.structs.replace(s, archive=sealed(s.archive)) for s in meta.snapshots),
    )


class BrainBuilder:
    """Build one brain in a backend: ``add(checksum, write)`` per archive, then ``finish()``."""

    def __init__(self, backend: Any, meta: BrainMeta, *, replace: bool = False) -> None:
        self._backend = backend
        self.meta = meta
        self._refs = archive_refs(meta)
        self._stored: list[ArchiveRef] = []
        if replace:
            backend.delete_brain(meta.user_id, meta.id)
        empty = msgspec.structs.replace(meta, generation=0, current=None, snapshots=())
        if not backend.create_brain(empty, NO_BRAIN_LIMIT):
            raise RuntimeError(f"could not create brain {meta.user_id}/{meta.id}")

    def wants(self, checksum: str) -> bool:
        """True when ``checksum`` is an archive of this brain not stored yet."""
        return checksum in self._refs and all(r.checksum != checksum for r in self._stored)

    def add(self, checksum: str, write: Callable[[BinaryIO], None], ref: ArchiveRef | None = None) -> None:
        """Store one archive: ``write(file)`` streams its stored bytes into a staged blob."""
        ref = ref or self._refs[checksum]
        backend, meta = self._backend, self.meta
        staged = backend.stage(meta.user_id, meta.id)
        try:
            write(staged.file)
            staged.finish()
            with backend.transaction(meta.user_id, meta.id, user_wide=True) as tx:
                # Placeholder snapshots keep every archive stored so far, the new one included, so a
                # brain interrupted after any step is recognised (``is_partial``) and rebuilt.
                held = tuple(
                    Snapshot(name=f"{i:020d}", date=ref.synced_at, archive=r)
                    for i, r in enumerate((*self._stored, ref))
                )
                step = msgspec.structs.replace(meta, current=ref, snapshots=held)
                tx.commit(step, staged)
        finally:
            staged.discard()
        self._stored.append(ref)

    def finish(self, meta: BrainMeta | None = None) -> None:
        """Commit the real metadata (every archive it names must have been added)."""
        final = meta or self.meta
        with self._backend.transaction(final.user_id, final.id, user_wide=True) as tx:
            tx.commit(final, None)
