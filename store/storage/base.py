"""The storage backend interface and the records it keeps.

Model (shared by every backend):

- Each brain has ONE metadata document (``BrainMeta``): the brain record, the current
  archive and the snapshot list. Writing it is the single commit point of every change.
- Archive bytes live in immutable, content-addressed blobs named by their checksum,
  private to the brain. A blob is written completely (and made durable) before any
  metadata names it, so metadata and archives can never disagree after a crash.
- Changes go through ``transaction()``: it yields the current metadata and a
  ``commit()`` that replaces it only if nobody else replaced it in between
  (local disk: OS file locks held for the whole transaction; an object store: a
  conditional write on the metadata object, raising ``CommitConflict`` so the caller
  retries with fresh metadata).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import BinaryIO, NamedTuple, Protocol

import msgspec

log = logging.getLogger("store.storage")


class StorageError(Exception):
    """Base class of storage failures."""


class StorageFull(StorageError):
    """The disk (or quota of the underlying filesystem) is full; nothing was changed."""


class CommitConflict(StorageError):
    """The metadata changed since it was read; re-read and decide again."""


class StorageUnavailable(StorageError):
    """The storage itself cannot be reached (an object store bucket that is gone): a request
    needing it is refused with 503 and retried later; it does not mean a brain is missing."""


class CorruptMeta(StorageError):
    """A brain's metadata document cannot be parsed (outside damage); the brain is unavailable."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where  # the file or s3:// object, for the operator
        self.reason = reason


class DamagedBrain(NamedTuple):
    """A brain whose metadata is there but cannot be used (``StorageBackend.survey_brains``):
    the server leaves it out, and whole-store commands (backup, migrate, rekey) must say so."""

    user_id: str
    brain_id: str
    where: str  # its metadata file or object
    reason: str

    def describe(self) -> str:
        """One phrase naming the brain and what is wrong with it."""
        return f"{self.user_id}/{self.brain_id} (metadata {self.where}: {self.reason})"


def checked_survey(user_id: str, found: Iterable[tuple[str, str, BrainMeta | CorruptMeta]]
                   ) -> tuple[list[BrainMeta], list[DamagedBrain]]:
    """Split what a backend read for each (brain id, where) of ``user_id`` into usable metadata (oldest
    first) and damaged brains: unparsable ones, and ones whose metadata names another brain or
    user (a file copied in place of another: used as it is, it would stand for that brain)."""
    metas: list[BrainMeta] = []
    damaged: list[DamagedBrain] = []
    for brain_id, where, got in found:
        if isinstance(got, CorruptMeta):
            damaged.append(DamagedBrain(user_id, brain_id, got.where, got.reason))
        elif got.id != brain_id or got.user_id != user_id:
            log.critical("brain metadata %s names brain %s/%s, not this one; the brain is unavailable until it is "
                         "repaired", where, got.user_id, got.id)
            damaged.append(DamagedBrain(user_id, brain_id, where, f"it names brain {got.user_id}/{got.id}"))
        else:
            metas.append(got)
    metas.sort(key=lambda m: (m.created_at, m.id))
    damaged.sort(key=lambda d: d.brain_id)
    return metas, damaged


# Our own id format; ids become path components and object keys, so nothing else passes.
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{7,63}\Z")
CHECKSUM = re.compile(r"^[0-9a-f]{64}\Z")


def check_id(value: str) -> str:
    """``value`` if it is a user or brain id of our format; else StorageError."""
    if not SAFE_ID.match(value):
        raise StorageError(f"invalid id {value!r}")
    return value


def check_checksum(value: str) -> str:
    """``value`` if it is a lowercase hex SHA-256; else StorageError."""
    if not CHECKSUM.match(value):
        raise StorageError("invalid checksum")
    return value


class BlobMissing(StorageError):
    """A blob named by metadata is gone (deleted or replaced concurrently)."""


class ArchiveRef(msgspec.Struct, frozen=True):
    """One stored archive: what the client sent (checksum, size, file count) and where it is."""

    checksum: str
    size: int
    file_count: int
    synced_at: str
    sealed: bool = False
    # written by someone other than an owner (an editor, or through an agent key): what
    # snapshot retention keeps the owner's last version from (store.service.BrainService._retain)
    by_other: bool = False


class Snapshot(msgspec.Struct, frozen=True):
    """An earlier archive kept for restore; ``name`` sorts lexically by age (newest last)."""

    name: str
    date: str
    archive: ArchiveRef


class BrainMeta(msgspec.Struct, frozen=True):
    """The commit point of one brain: its record, current archive and snapshots."""

    id: str
    user_id: str
    name: str
    created_at: str
    generation: int = 0
    current: ArchiveRef | None = None
    snapshots: tuple[Snapshot, ...] = ()
    # [extension] When the owner deleted the brain keeping its data (``BrainService.trash``): it
    # is gone for every client (404, never listed) while its archive and snapshots stay until
    # the operator brings it back or purges it (`brain-store brain undelete|purge`). "" : live.
    deleted_at: str = ""

    def blobs(self) -> set[str]:
        """Checksums of every blob this metadata references."""
        names = {s.archive.checksum for s in self.snapshots}
        if self.current is not None:
            names.add(self.current.checksum)
        return names

    def stored_bytes(self) -> int:
        """Bytes really kept for this brain (each distinct archive once)."""
        sizes: dict[str, int] = {s.archive.checksum: s.archive.size for s in self.snapshots}
        if self.current is not None:
            sizes[self.current.checksum] = self.current.size
        return sum(sizes.values())

    def snapshot(self, name: str) -> Snapshot | None:
        """The snapshot called ``name``, if any."""
        for snap in self.snapshots:
            if snap.name == name:
                return snap
        return None


class StagedBlob(Protocol):
    """A blob being written (temporary until a transaction commits it)."""

    @property
    def file(self) -> BinaryIO:
        """Where the (possibly sealed) bytes are written."""
        ...

    # True when ``reopen()`` reads the written bytes back (a file on local disk): uploads
    # then inspect most of the archive after the body ended, see store.upload.
    rereadable: bool

    def reopen(self) -> BinaryIO:
        """The written bytes, opened for reading once ``file`` is flushed (if ``rereadable``)."""
        ...

    def finish(self) -> None:
        """Make the written bytes durable (fsync); blocking."""
        ...

    def discard(self) -> None:
        """Remove the temporary data; safe to call more than once."""
        ...


class BrainTransaction(Protocol):
    """An open change to one brain; see ``StorageBackend.transaction``."""

    @property
    def meta(self) -> BrainMeta | None:
        """The metadata as of the start of the transaction (None: the brain is gone)."""
        ...

    def usage(self) -> int:
        """Bytes stored by the whole user right now (only meaningful with ``user_wide``)."""
        ...

    def commit(self, new: BrainMeta, blob: StagedBlob | None = None) -> None:
        """Store ``blob`` under ``new.current.checksum`` (if given) and make ``new`` current.

        Blobs no longer referenced are removed afterwards. Raises ``StorageFull`` (nothing
        changed) or ``CommitConflict`` (someone else committed first).
        """
        ...


class StorageBackend(Protocol):
    """Where brains live. Implementations: ``store.storage.local.LocalBackend``,
    ``store.storage.s3.S3Backend``."""

    # True when calls wait on the network (an object store): async callers run them in a
    # worker thread. False for local disk, whose small cached reads stay on the event loop.
    blocking: bool

    def ready(self) -> str | None:
        """None when the backend can serve now, else a short reason (``/health/ready``)."""
        ...

    def startup(self) -> None:
        """Recover after a crash: drop orphaned temporary data and unreferenced blobs."""
        ...

    def list_brains(self, user_id: str) -> list[BrainMeta]:
        """Every usable brain of ``user_id``, oldest first (damaged ones are logged and left out)."""
        ...

    def survey_brains(self, user_id: str) -> tuple[list[BrainMeta], list[DamagedBrain]]:
        """``list_brains`` and the brains it leaves out because their metadata is damaged: what a
        command over the whole store (backup, migrate, rekey) must account for."""
        ...

    def usage(self, user_id: str) -> int:
        """Bytes the user's brains keep, as ``STORE_MAX_USER_MB`` counts them (``stored_total``)."""
        ...

    def damaged_bytes(self, user_id: str, damaged: list[DamagedBrain]) -> dict[str, int]:
        """Bytes of the stored archives of each of the user's ``damaged`` brains, by brain id: what
        they still take (their metadata cannot be trusted to say), as the files or objects are listed."""
        ...

    def read_meta(self, user_id: str, brain_id: str) -> BrainMeta | None:
        """The current metadata of a brain, or None when it does not exist."""
        ...

    def create_brain(self, meta: BrainMeta, max_brains: int) -> bool:
        """Create a brain unless the user already has ``max_brains``; False when over."""
        ...

    def create_first_brain(self, meta: BrainMeta) -> bool:
        """Create a brain only if the user has none yet (atomically); False otherwise."""
        ...

    def delete_brain(self, user_id: str, brain_id: str) -> bool:
        """Remove a brain with its archive and snapshots; False when it did not exist."""
        ...

    def delete_user(self, user_id: str) -> None:
        """Remove every brain of a user."""
        ...

    def delete_empty_user(self, user_id: str) -> bool:
        """Remove what ``delete_user`` would leave of a user who has no brain left (their directory, or
        their account object); False, removing nothing, while a brain of theirs (damaged too) remains."""
        ...

    def stage(self, user_id: str, brain_id: str) -> StagedBlob:
        """A new temporary blob to stream an upload into."""
        ...

    def transaction(
        self, user_id: str, brain_id: str, *, user_wide: bool = False
    ) -> AbstractContextManager[BrainTransaction]:
        """Change one brain atomically; ``user_wide`` also excludes changes to the user's other
        brains (needed for quota checks)."""
        ...

    def open_blob(self, user_id: str, brain_id: str, checksum: str) -> BinaryIO:
        """Open a stored blob for reading; raises ``BlobMissing``."""
        ...

    def read_whole_blob(self, user_id: str, brain_id: str, checksum: str, size: int) -> bytes | memoryview | None:
        """A stored blob of ``size`` bytes as one sendable body (read, or mapped read-only),
        or None when this backend streams blobs instead (then ``open_blob``); raises
        ``BlobMissing``."""
        ...

    def iter_users(self) -> Iterator[str]:
        """Ids of users with brains (for maintenance such as rekey)."""
        ...


def usable_meta(backend: StorageBackend, user_id: str, brain_id: str) -> BrainMeta | None:
    """``backend.read_meta``, reading a brain whose metadata is damaged as absent (the backend logged
    it): for listings that reach into other users' brains (a member's shared brains), where one
    damaged brain must be left out, as ``list_brains`` leaves it out, not fail the whole listing."""
    try:
        return backend.read_meta(user_id, brain_id)
    except CorruptMeta:
        return None


def stored_total(backend: StorageBackend, user_id: str, metas: list[BrainMeta], damaged: list[DamagedBrain]) -> int:
    """Bytes a user's brains keep (``survey_brains``' two lists): each usable brain's stored bytes,
    deleted ones kept included, and each damaged one's by its archives (``damaged_bytes``); what
    ``STORE_MAX_USER_MB`` counts, and so what every listing of a user's bytes shows."""
    return sum(meta.stored_bytes() for meta in metas) + sum(backend.damaged_bytes(user_id, damaged).values())
