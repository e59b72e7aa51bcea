"""Write a backup of a whole store (any backend) as one zstandard-compressed tar stream.

Memory stays bounded: each archive is copied from storage to a temporary file (hashing
it on the way), then streamed into the tar. A brain is consistent on its own: its
metadata is read first and every blob it names is copied before anything of the brain
is written; blobs are immutable, and if one vanished (a concurrent upload rotated it
out) the brain is read again.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import zstandard

from store.backup.format import (
    FORMAT,
    MANIFEST,
    MANIFEST_SUM,
    SHARING,
    USERS,
    VERSION,
    BackupError,
    Entry,
    LeftOut,
    Manifest,
    audit_path,
    blob_path,
    meta_path,
)
from store.sealed import SEALED_MAGIC
from store.storage.base import BlobMissing, BrainMeta, CorruptMeta, DamagedBrain

CHUNK = 1024 * 1024
_RETRIES = 5


class BackupWriter:
    """Adds entries to the tar stream and remembers their hashes for the manifest."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self._tar = tar
        self.entries: list[Entry] = []

    def add_bytes(self, path: str, data: bytes) -> None:
        """Add a small in-memory entry."""
        self.add_file(path, io.BytesIO(data), len(data), hashlib.sha256(data).hexdigest())

    def add_file(self, path: str, f: BinaryIO, size: int, sha256: str) -> None:
        """Add ``size`` bytes from ``f`` whose hash the caller already computed."""
        info = tarfile.TarInfo(path)
        info.size = size
        info.mode = 0o600
        info.mtime = int(time.time())
        self._tar.addfile(info, f)
        self.entries.append(Entry(path=path, size=size, sha256=sha256))


def _spool_blob(backend: Any, meta: BrainMeta, checksum: str, scratch: Path) -> tuple[Path, int, str, bool]:
    """Copy one stored blob to a temporary file: (path, size, sha256, sealed)."""
    path = scratch / checksum
    digest = hashlib.sha256()
    size = 0
    head = b""
    with backend.open_blob(meta.user_id, meta.id, checksum) as src, open(path, "wb") as out:
        while chunk := src.read(CHUNK):
            if size == 0:
                head = chunk[:8]
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    return path, size, digest.hexdigest(), head.startswith(SEALED_MAGIC)


def _consistent_brain(
    backend: Any, user_id: str, brain_id: str, scratch: Path
) -> tuple[BrainMeta, list[tuple[str, Path, int, str, bool]]] | None:
    """The brain's metadata and a private copy of every blob it names (None: deleted meanwhile)."""
    for _ in range(_RETRIES):
        meta = backend.read_meta(user_id, brain_id)
        if meta is None:
            return None
        copies: list[tuple[str, Path, int, str, bool]] = []
        try:
            for checksum in sorted(meta.blobs()):
                copies.append((checksum, *_spool_blob(backend, meta, checksum, scratch)))
        except BlobMissing:
            for item in copies:
                item[1].unlink(missing_ok=True)
            continue  # an upload replaced the brain between our reads; take the new state
        return meta, copies
    raise BackupError(f"brain {user_id}/{brain_id} kept changing while being read; try again")


def write_backup(
    backend: Any,
    registry: Any,
    target: Path,
    *,
    source: str,
    now: str,
    progress: Callable[[str], None] = lambda line: None,
    sharing: Any = None,
    left_out: list[DamagedBrain] | None = None,
) -> Manifest:
    """Back up users and every brain to ``target`` (written to a temporary name, renamed at the end).

    With ``sharing`` (``store.sharing.access.Sharing``) the sharing document and each backed-up
    brain's sharing audit log go in too. A brain whose metadata is damaged cannot go in (a restore
    checks every brain); it is named in ``progress``, recorded in the manifest's ``left_out`` (a
    restore keeps the target's brain of that id) and appended to ``left_out``, and the backup of
    everything else is written all the same.
    """
    from store.auth.users import UsersDocument

    target = Path(target)
    partial = target.with_name(target.name + ".partial")
    for document in (registry, sharing.registry if sharing is not None else None):
        if document is not None and (problem := document.unreadable()) is not None:
            # read as empty, it would make a backup whose restore removes every user (or share)
            raise BackupError(f"{problem}; restore it (or its last good copy) before backing up")
    skipped: list[DamagedBrain] = []  # recorded in the manifest, so a restore keeps them where it finds them
    users_doc = UsersDocument(users=registry.users(), denied=registry.denied())
    user_ids = [u.id for u in users_doc.users]
    user_ids += sorted(set(backend.iter_users()) - set(user_ids))  # brains of removed users too
    brains = archives = sealed = stored = 0
    started = time.monotonic()
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with (
            os.fdopen(fd, "wb") as raw,
            zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(raw, closefd=False) as zst,
            tarfile.open(fileobj=zst, mode="w|", format=tarfile.PAX_FORMAT) as tar,
            # next to the backup, where the operator made room, not in /tmp (in the container a
            # 64 MiB tmpfs: one brain with its snapshots can be larger)
            tempfile.TemporaryDirectory(prefix=".brain-store-backup-", dir=partial.parent) as scratch_dir,
        ):
            out = BackupWriter(tar)
            out.add_bytes(USERS, msgspec.json.encode(users_doc))
            progress(f"users: {len(users_doc.users)} ({len(users_doc.denied)} deny records)")
            if sharing is not None and sharing.registry is not None:
                doc = sharing.registry.document()
                out.add_bytes(SHARING, msgspec.json.encode(doc))
                progress(f"sharing: {len(doc.shares)} shared brain(s), {len(doc.keys)} agent key(s)")
            scratch = Path(scratch_dir)
            for user_id in user_ids:
                metas, damaged = backend.survey_brains(user_id)
                for listed in metas:
                    try:
                        got = _consistent_brain(backend, user_id, listed.id, scratch)
                    except CorruptMeta as exc:  # damaged since it was listed
                        damaged.append(DamagedBrain(user_id, listed.id, exc.where, exc.reason))
                        continue
                    if got is None:
                        continue
                    meta, copies = got
                    out.add_bytes(meta_path(user_id, meta.id), msgspec.json.encode(meta))
                    for checksum, path, size, digest, is_sealed in copies:
                        with open(path, "rb") as f:
                            out.add_file(blob_path(user_id, meta.id, checksum), f, size, digest)
                        path.unlink()
                        archives += 1
                        sealed += int(is_sealed)
                    if sharing is not None and sharing.audit is not None:
                        events = sharing.audit.events(meta.id, limit=1 << 30)
                        if events:
                            out.add_bytes(audit_path(meta.id), b"".join(msgspec.json.encode(e) + b"\n"
                                                                        for e in events))
                    brains += 1
                    stored += meta.stored_bytes()
                    progress(
                        f"brain {brains}: {user_id}/{meta.id} ({meta.name}) {len(copies)} archive(s); "
                        f"total {archives} archive(s), {stored} stored bytes"
                    )
                for broken in damaged:
                    progress(f"brain {broken.describe()}: NOT in the backup, its metadata is damaged")
                skipped.extend(damaged)
            manifest = Manifest(
                format=FORMAT, version=VERSION, created_at=now, source=source, users=len(users_doc.users),
                brains=brains, archives=archives, sealed_archives=sealed, entries=out.entries,
                left_out=[LeftOut(b.user_id, b.brain_id, b.describe()) for b in skipped],
            )
            body = msgspec.json.format(msgspec.json.encode(manifest), indent=1)
            BackupWriter(tar).add_bytes(MANIFEST, body)
            BackupWriter(tar).add_bytes(MANIFEST_SUM, hashlib.sha256(body).hexdigest().encode() + b"\n")
        with open(partial, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if left_out is not None:
        left_out.extend(skipped)
    # "stored bytes" means the same everywhere (user list, /api/brains stored_bytes, restore):
    # every distinct archive of each brain, current and snapshots, at its size as uploaded.
    progress(
        f"backup done: {manifest.users} user(s), {brains} brain(s), {archives} archive(s) "
        f"({sealed} sealed), {stored} stored bytes; backup file {target.stat().st_size} bytes, "
        f"{time.monotonic() - started:.1f}s"
    )
    return manifest
