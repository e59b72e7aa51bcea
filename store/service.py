"""The rules of the store (contract 1.1 plus our extensions), independent of HTTP.

``BrainService`` decides; the storage backend keeps. Every change runs inside a
backend transaction so its checks (preconditions, empty-push guard, quota) and its
commit are one atomic step, across threads and processes.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO, TypeVar

import msgspec

from common.brainnames import checked_brain_name
from common.files import NotARegularFile
from store.archive.resume import ValidationMemos
from store.conditional import Preconditions
from store.errors import ServiceError
from store.sealed import NO_KEY, SEALED_MAGIC, ArchiveSealer, SealedFileRefused, SealedKeyUnknown
from store.settings import StoreSettings
from store.storage.base import (
    ArchiveRef,
    BlobMissing,
    BrainMeta,
    CommitConflict,
    CorruptMeta,
    Snapshot,
    StorageBackend,
    StorageFull,
)
from store.upload import StagedUpload

log = logging.getLogger("store.service")

EMPTY_PUSH_GUARD_FILES = 5
# Snapshot names: a UTC instant with microseconds; fixed width so lexical order is age order.
# Snapshots imported from a reference store keep its names (a nanosecond field and ".tar.gz");
# both start with the instant, and ours sort after a reference name of the same microsecond.
_VERSION_NAME = re.compile(r"^\d{8}T\d{6}\.(?:\d{6}Z|\d{9}\.tar\.gz)$")
_VERSION_FORMAT = "%Y%m%dT%H%M%S.%fZ"
_VERSION_INSTANT = 22  # characters of "YYYYMMDDTHHMMSS.ffffff" at the start of either form
_COMMIT_ATTEMPTS = 8
T = TypeVar("T")
_CANONICAL_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def now_utc() -> datetime:
    """The current UTC time."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """RFC 3339 UTC text with microseconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_brain_id(text: str) -> str:
    """A brain id in canonical lower-case form; 404 for anything that is not a UUID."""
    if _CANONICAL_UUID.match(text):
        return text
    if len(text) > 64:
        raise ServiceError(404, "brain not found")
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise ServiceError(404, "brain not found") from None


def valid_version_name(name: str) -> bool:
    """True when ``name`` has the shape of a snapshot name this store issues."""
    return _VERSION_NAME.match(name) is not None


def next_version_name(meta: BrainMeta, moment: datetime) -> str:
    """A snapshot name for ``moment`` that sorts after every existing one."""
    name = moment.strftime(_VERSION_FORMAT)
    if meta.snapshots:
        last = max(s.name for s in meta.snapshots)
        if name <= last:
            previous = datetime.strptime(last[:_VERSION_INSTANT], "%Y%m%dT%H%M%S.%f").replace(tzinfo=UTC)
            name = (previous + timedelta(microseconds=1)).strftime(_VERSION_FORMAT)
    return name


def brain_record(meta: BrainMeta) -> dict[str, Any]:
    """The contract's brain record (plus extension members)."""
    current = meta.current
    return {
        "id": meta.id,
        "name": meta.name,
        "size_bytes": current.size if current else 0,
        "file_count": current.file_count if current else 0,
        "checksum": current.checksum if current else None,
        "last_synced_at": current.synced_at if current else None,
        "created_at": meta.created_at,
        "snapshot_count": len(meta.snapshots),
        "stored_bytes": meta.stored_bytes(),
    }


class SmallBlobCache:
    """Bytes of small plain archives recently sent, by (user, brain, checksum).

    Blobs are content-addressed and never change, so bytes read once are the bytes of
    that checksum for good: a download whose metadata names a cached checksum is sent
    from memory (no open, read and close; one shared object). Bounded in total size,
    oldest entries dropped first; only plain blobs that passed the seal check get here.
    """

    MAX_BYTES = 8 * 1024 * 1024

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str], bytes] = {}
        self._bytes = 0

    def get(self, key: tuple[str, str, str]) -> bytes | None:
        """The cached bytes, or None."""
        return self._entries.get(key)

    def put(self, key: tuple[str, str, str], data: bytes) -> None:
        """Remember ``data`` (dropping the oldest entries beyond the size bound)."""
        if key in self._entries or len(data) > self.MAX_BYTES // 8:
            return
        self._entries[key] = data
        self._bytes += len(data)
        while self._bytes > self.MAX_BYTES:
            oldest = next(iter(self._entries))
            self._bytes -= len(self._entries.pop(oldest))


@dataclass
class Download:
    """An archive ready to be sent: its description and its whole body or plaintext chunks."""

    archive: ArchiveRef
    body: bytes | memoryview | None  # a plain blob read whole or mapped (StorageBackend.read_whole_blob)
    chunks: Iterator[bytes] | None  # decrypted stream (encryption on) or an object-store blob

    def close(self) -> None:
        """Release the open blob (a mapped body is released when the last view goes)."""
        self.body = None
        if self.chunks is not None:
            close = getattr(self.chunks, "close", None)
            if close:
                close()


class BrainService:
    """Brains of users: records, uploads, downloads, snapshots, restore."""

    def __init__(self, settings: StoreSettings, backend: StorageBackend) -> None:
        self.settings = settings
        self.backend = backend
        self.sealer: ArchiveSealer | None = (
            ArchiveSealer(settings.encryption_key, settings.previous_keys) if settings.encryption_key else None
        )
        # Set once a download met a sealed archive this process holds no key for: the settings
        # are wrong, so /health/ready says not ready until the store is restarted with the key.
        self.key_problem: str | None = None
        self._small_blobs = SmallBlobCache()
        self.validation_memos = ValidationMemos(settings.validation_memo_mb * 1024 * 1024)

    # -- records -----------------------------------------------------------------------

    def list_brains(self, user_id: str) -> list[BrainMeta]:
        """The user's brains, oldest first (not the deleted ones the store keeps)."""
        return [meta for meta in self.backend.list_brains(user_id) if not meta.deleted_at]

    def get(self, user_id: str, brain_id: str) -> BrainMeta:
        """One brain of the user; 404 when it does not exist or belongs to someone else."""
        try:
            meta = self.backend.read_meta(user_id, brain_id)
        except CorruptMeta:
            raise ServiceError(500, "this brain's stored metadata is damaged; the operator has been told") from None
        if not _live(meta, user_id):
            raise ServiceError(404, "brain not found")
        assert meta is not None
        return meta

    def create(self, user_id: str, name: str = "default") -> BrainMeta:
        """Create a brain; 403 when the account already has the maximum number."""
        name = _checked_name(name)
        meta = BrainMeta(id=str(uuid.uuid4()), user_id=user_id, name=name, created_at=rfc3339(now_utc()))
        try:
            created = self.backend.create_brain(meta, self.settings.max_brains)
        except StorageFull:
            raise ServiceError(507, "the store is out of disk space") from None
        if not created:
            raise ServiceError(403, f"this account may not have more than {self.settings.max_brains} brains")
        return meta

    def ensure_default(self, user_id: str) -> None:
        """Give a user with no brain a first brain named ``default`` (safe when called concurrently)."""
        if self.backend.list_brains(user_id):
            return
        meta = BrainMeta(id=str(uuid.uuid4()), user_id=user_id, name="default", created_at=rfc3339(now_utc()))
        try:
            self.backend.create_first_brain(meta)
        except StorageFull:
            log.warning("could not create the default brain: disk full")

    def delete(self, user_id: str, brain_id: str) -> None:
        """Remove a brain with its archive and snapshots."""
        self.get(user_id, brain_id)
        if not self.backend.delete_brain(user_id, brain_id):
            raise ServiceError(404, "brain not found")

    def rename(self, user_id: str, brain_id: str, name: Any) -> BrainMeta:
        """[extension] Give a brain another name (its id, archive and snapshots stay); 400 for a
        name ``create`` would refuse, 404 when it does not exist."""
        name = _checked_name(name)
        return self._change_meta(user_id, brain_id, lambda meta: msgspec.structs.replace(meta, name=name))

    def trash(self, user_id: str, brain_id: str) -> BrainMeta:
        """[extension] Delete a brain for every client while the store keeps its archive and
        snapshots (``BrainMeta.deleted_at``); ``undelete`` brings it back, ``purge`` removes it."""
        moment = rfc3339(now_utc())
        return self._change_meta(user_id, brain_id, lambda meta: msgspec.structs.replace(meta, deleted_at=moment))

    def undelete(self, user_id: str, brain_id: str) -> BrainMeta:
        """Bring back a brain ``trash`` deleted, as it was (operator command); 404 when there is none."""
        return self._change_meta(user_id, brain_id, lambda meta: msgspec.structs.replace(meta, deleted_at=""),
                                 deleted=True)

    def purge(self, user_id: str, brain_id: str) -> None:
        """Remove a deleted brain with its archive and snapshots for good."""
        meta = self.backend.read_meta(user_id, brain_id)
        if meta is None or meta.user_id != user_id or not meta.deleted_at:
            raise ServiceError(404, "no deleted brain with that id")
        if not self.backend.delete_brain(user_id, brain_id):
            raise ServiceError(404, "no deleted brain with that id")

    def _change_meta(self, user_id: str, brain_id: str, change: Callable[[BrainMeta], BrainMeta], *,
                     deleted: bool = False) -> BrainMeta:
        """Commit ``change`` to a brain's record alone (no new archive); ``deleted``: to a deleted one."""

        def once() -> BrainMeta:
            with self.backend.transaction(user_id, brain_id) as tx:
                meta = tx.meta
                if meta is None or meta.user_id != user_id or bool(meta.deleted_at) != deleted:
                    raise ServiceError(404, "no deleted brain with that id" if deleted else "brain not found")
                new = msgspec.structs.replace(change(meta), generation=meta.generation + 1)
                tx.commit(new, None)
                return new

        return _retrying(once)

    def usage(self, user_id: str) -> int:
        """Bytes the user really stores (every distinct archive, snapshots included), as the quota
        counts them: deleted brains kept and brains whose metadata is damaged too (``stored_total``)."""
        return self.backend.usage(user_id)

    def versions(self, user_id: str, brain_id: str) -> list[Snapshot]:
        """Snapshots, newest first."""
        meta = self.get(user_id, brain_id)
        return sorted(meta.snapshots, key=lambda s: s.name, reverse=True)

    # -- writes ------------------------------------------------------------------------

    def precheck_upload(self, user_id: str, brain_id: str, cond: Preconditions) -> BrainMeta:
        """Cheap checks before reading a body (brain exists, preconditions hold now)."""
        meta = self.get(user_id, brain_id)
        self._check(meta, cond)
        return meta

    def upload_room(self) -> int:
        """The most archive bytes one upload may have (size limit; quota checked at commit)."""
        room = self.settings.max_upload_bytes
        if self.settings.max_user_bytes:
            room = min(room, self.settings.max_user_bytes)
        return room

    @staticmethod
    def _check(meta: BrainMeta, cond: Preconditions) -> None:
        current = meta.current.checksum if meta.current else None
        if not cond.holds(current):
            raise ServiceError(412, "precondition failed", extra={"current_checksum": current})

    def commit_upload(
        self, user_id: str, brain_id: str, staged: StagedUpload, cond: Preconditions, force: bool = False,
        by_owner: bool = True,
    ) -> ArchiveRef:
        """Make a fully received upload the brain's archive (blocking; run in a thread).

        ``by_owner`` False: written by an editor or through an agent key (see ``_retain``).
        """
        try:
            for _ in range(_COMMIT_ATTEMPTS):
                try:
                    return self._commit_upload_once(user_id, brain_id, staged, cond, force, by_owner)
                except CommitConflict:
                    continue
            raise ServiceError(503, "too much contention on this brain, retry")
        except StorageFull:
            raise ServiceError(507, "the store is out of disk space; nothing was changed") from None
        except CorruptMeta:
            raise ServiceError(500, "this brain's stored metadata is damaged; the operator has been told") from None
        finally:
            staged.blob.discard()

    def _commit_upload_once(
        self, user_id: str, brain_id: str, staged: StagedUpload, cond: Preconditions, force: bool, by_owner: bool
    ) -> ArchiveRef:
        quota = self.settings.max_user_bytes
        with self.backend.transaction(user_id, brain_id, user_wide=bool(quota)) as tx:
            meta = tx.meta
            if not _live(meta, user_id):
                raise ServiceError(404, "brain not found")
            assert meta is not None
            self._check(meta, cond)
            current = meta.current
            if (
                not force
                and staged.file_count == 0
                and current is not None
                and current.file_count >= EMPTY_PUSH_GUARD_FILES
            ):
                raise ServiceError(
                    409,
                    f"refusing to replace a brain of {current.file_count} files with an empty archive "
                    "(add ?force=true to do it anyway)",
                )
            moment = now_utc()
            archive = ArchiveRef(
                checksum=staged.checksum,
                size=staged.size,
                file_count=staged.file_count,
                synced_at=rfc3339(moment),
                sealed=staged.sealed,
                by_other=not by_owner,
            )
            new = self._made_current(meta, archive, moment)
            if quota:
                after = tx.usage() - meta.stored_bytes() + new.stored_bytes()
                if after > quota:
                    raise ServiceError(413, "this upload would exceed the account's storage quota")
            tx.commit(new, staged.blob)
            return archive

    def _made_current(self, meta: BrainMeta, archive: ArchiveRef, moment: datetime) -> BrainMeta:
        """``meta`` with ``archive`` current; the archive it replaces, when another, is kept as a snapshot."""
        snapshots = meta.snapshots
        current = meta.current
        if current is not None and current.checksum != archive.checksum:
            snapshots = self._retain(
                (*snapshots, Snapshot(name=next_version_name(meta, moment), date=rfc3339(moment), archive=current)),
                archive,
            )
        return msgspec.structs.replace(meta, current=archive, snapshots=snapshots, generation=meta.generation + 1)

    def _retain(self, snapshots: tuple[Snapshot, ...], current: ArchiveRef) -> tuple[Snapshot, ...]:
        """The snapshots to keep beside the new ``current`` archive: the newest ``STORE_SNAPSHOTS``,
        plus the newest owner-written one while the current archive is someone else's.

        So the owner of a shared brain can always get back what it held before others' writes:
        an editor (or an agent key) uploading junk again and again, or forcing an empty archive,
        pushes every other snapshot out but never that one (docs/sharing.md).
        """
        keep = self.settings.snapshots
        ordered = tuple(sorted(snapshots, key=lambda s: s.name))
        kept = ordered[-keep:] if keep > 0 else ()
        if current.by_other:
            own = next((s for s in reversed(ordered) if not s.archive.by_other), None)
            if own is not None and own not in kept:
                kept = (own, *kept)  # older than every snapshot kept, so still in order
        return kept

    def restore(self, user_id: str, brain_id: str, name: str, cond: Preconditions) -> ArchiveRef:
        """Make a snapshot the current archive, keeping the current one as a snapshot first."""
        if not valid_version_name(name):
            raise ServiceError(404, "version not found")
        return _retrying(lambda: self._restore_once(user_id, brain_id, name, cond))

    def _restore_once(self, user_id: str, brain_id: str, name: str, cond: Preconditions) -> ArchiveRef:
        with self.backend.transaction(user_id, brain_id) as tx:
            meta = tx.meta
            if not _live(meta, user_id):
                raise ServiceError(404, "brain not found")
            assert meta is not None
            snap = meta.snapshot(name)
            if snap is None:
                raise ServiceError(404, "version not found")
            self._check(meta, cond)
            moment = now_utc()
            # restoring is for owners only: the restored archive is theirs from now on
            archive = msgspec.structs.replace(snap.archive, synced_at=rfc3339(moment), by_other=False)
            tx.commit(self._made_current(meta, archive, moment), None)
            return archive

    # -- reads -------------------------------------------------------------------------

    def stored_archive(self, user_id: str, brain_id: str, checksum: str) -> ArchiveRef | None:
        """The brain's current or snapshot archive with this checksum, if it keeps one."""
        try:
            meta = self.backend.read_meta(user_id, brain_id)
        except CorruptMeta:
            return None
        if meta is None or not _live(meta, user_id):
            return None
        if meta.current is not None and meta.current.checksum == checksum:
            return meta.current
        for snap in meta.snapshots:
            if snap.archive.checksum == checksum:
                return snap.archive
        return None

    def resolve(self, user_id: str, brain_id: str, version: str | None) -> ArchiveRef:
        """The archive a download would send (no I/O beyond metadata)."""
        meta = self.get(user_id, brain_id)
        if version is None:
            if meta.current is None:
                raise ServiceError(404, "nothing uploaded to this brain yet")
            return meta.current
        if not valid_version_name(version):
            raise ServiceError(404, "version not found")
        snap = meta.snapshot(version)
        if snap is None:
            raise ServiceError(404, "version not found")
        return snap.archive

    def open_download(self, user_id: str, brain_id: str, version: str | None) -> Download:
        """Open the archive to send; the blob is immutable, so its bytes match its checksum."""
        for _ in range(_COMMIT_ATTEMPTS):
            archive = self.resolve(user_id, brain_id, version)
            cached = self._small_blobs.get((user_id, brain_id, archive.checksum))
            if cached is not None:
                return Download(archive=archive, body=cached, chunks=None)
            try:
                if self.sealer is None:
                    body = self.backend.read_whole_blob(user_id, brain_id, archive.checksum, archive.size)
                    if body is not None:
                        # checked for the seal in the bytes read anyway: no extra read
                        self._refuse_sealed(bytes(body[: len(SEALED_MAGIC)]), brain_id, archive.checksum)
                        if isinstance(body, bytes):
                            self._small_blobs.put((user_id, brain_id, archive.checksum), body)
                        return Download(archive=archive, body=body, chunks=None)
                blob = self.backend.open_blob(user_id, brain_id, archive.checksum)
            except BlobMissing:
                continue  # replaced or deleted meanwhile: look again
            except NotARegularFile as exc:
                # outside damage (a named pipe or device in blobs/): refused at once rather than hanging
                log.error("refusing to serve brain %s archive %s: %s", brain_id, archive.checksum, exc)
                raise ServiceError(500, "this brain's stored archive is damaged; the operator has been told") from None
            if self.sealer is None:
                # a blob this backend streams (an object store): check the seal, send in chunks
                try:
                    self._refuse_sealed(_head(blob, len(SEALED_MAGIC)), brain_id, archive.checksum)
                except ServiceError:
                    blob.close()
                    raise
                return Download(archive=archive, body=None, chunks=_closing(iter(lambda: blob.read(1 << 20), b""), blob))
            try:
                chunks = self.sealer.open(blob, user_id, brain_id, archive.checksum)
            except SealedKeyUnknown as exc:
                blob.close()
                raise self._no_key_for(exc.reason, brain_id, archive.checksum) from None
            except SealedFileRefused as exc:
                blob.close()
                log.error("refusing to serve brain %s archive %s: %s", brain_id, archive.checksum, exc)
                raise ServiceError(500, "stored archive failed its integrity check") from None
            return Download(archive=archive, body=None, chunks=_closing(chunks, blob))
        raise ServiceError(404, "brain not found")

    def _refuse_sealed(self, head: bytes, brain_id: str, checksum: str) -> None:
        """Refuse (``_no_key_for``) a stored blob that is sealed although no key is configured."""
        if head == SEALED_MAGIC:
            raise self._no_key_for(NO_KEY, brain_id, checksum)

    def _no_key_for(self, reason: str, brain_id: str, checksum: str) -> ServiceError:
        """503 ``encryption_key_unavailable`` for a sealed archive no configured key opens.

        With no key at all the store's settings are wrong for every sealed archive, so it stays
        unready until restarted with one. A key that does not open one archive (sealed by a
        replica under a newer key, or a damaged header) refuses that archive only: one such blob
        must not take the replica out of its load balancer."""
        if reason == NO_KEY:
            self.key_problem = f"stored archives are encrypted at rest and {reason}"
        log.error("brain %s archive %s is encrypted at rest and %s%s", brain_id, checksum, reason,
                  "; the store is not ready until it is restarted with the key that sealed it"
                  if reason == NO_KEY else "")
        return ServiceError(503, "this archive is encrypted at rest and the store does not hold its key; "
                                 "the operator has been told", extra={"code": "encryption_key_unavailable"})


def _retrying(attempt: Callable[[], T]) -> T:
    """``attempt`` (one transaction) again after a concurrent commit won, a few times; storage
    refusals as the client's errors (507 full, 500 damaged metadata, 503 contention)."""
    try:
        for _ in range(_COMMIT_ATTEMPTS):
            try:
                return attempt()
            except CommitConflict:
                continue
    except StorageFull:
        raise ServiceError(507, "the store is out of disk space; nothing was changed") from None
    except CorruptMeta:
        raise ServiceError(500, "this brain's stored metadata is damaged; the operator has been told") from None
    raise ServiceError(503, "too much contention on this brain, retry")


def _live(meta: BrainMeta | None, user_id: str) -> bool:
    """A brain clients may see: it exists, is ``user_id``'s, and was not deleted (``trash``)."""
    return meta is not None and meta.user_id == user_id and not meta.deleted_at


def _checked_name(name: Any) -> str:
    """A brain name as it is kept (`checked_brain_name`: NFC, surrounding spaces dropped), or 400."""
    checked = checked_brain_name(name)
    if checked is None:
        raise ServiceError(400, "brain name must be 1-100 printable characters without slashes")
    return checked


def _head(blob: BinaryIO, size: int) -> bytes:
    """The first ``size`` bytes of a blob without consuming them (a local file or a buffered stream)."""
    peek = getattr(blob, "peek", None)
    if peek is not None:
        return bytes(peek(size)[:size])
    return os.pread(blob.fileno(), size, 0)


def _closing(chunks: Iterator[bytes], blob: BinaryIO) -> Iterator[bytes]:
    try:
        yield from chunks
    finally:
        blob.close()
