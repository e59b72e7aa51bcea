"""Brains on local disk, safe with several processes on one data directory.

Layout under the data directory::

    brains/<user>/<brain>/meta.json         the commit point (BrainMeta as JSON)
    brains/<user>/<brain>/blobs/<checksum>  immutable archives (sealed when encryption is on)
    locks/<user>/user.lock                  held for user-wide changes (create, delete, quota)
    locks/<user>/<brain>.lock               held for every change of one brain
    tmp/                                    uploads in progress, brains being deleted

Commit: the upload is written to ``tmp/`` and fsynced, renamed to ``blobs/<checksum>``
and the blobs directory fsynced, while ``meta.json`` is written to a temporary file and
fsynced; once both are durable it is renamed over the old one and the brain directory
fsynced. The meta rename is the single commit point. Locks are ``fcntl.flock`` on lock files, so they hold
between threads and between processes (uvicorn workers, the CLI).
"""

from __future__ import annotations

import concurrent.futures
import errno
import fcntl
import logging
import mmap
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import msgspec

from common.files import (  # also imported from here by other store modules
    NotARegularFile,
    fsync_dir,
    open_regular,
    remove_quietly,
    settled,
    write_atomic,
    write_temporary,
)
from store.storage.base import (
    SAFE_ID,
    BlobMissing,
    BrainMeta,
    CommitConflict,
    CorruptMeta,
    DamagedBrain,
    StorageError,
    StorageFull,
    check_checksum,
    check_id,
    checked_survey,
    stored_total,
)

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
log = logging.getLogger("store.storage")
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(BrainMeta)


# Write buffer of a staged upload: uploads arrive in batches of this size or more (store.upload),
# which the buffer passes straight through; it only gathers the small pieces.
STAGE_BUFFER = 256 * 1024
# Blobs up to this size are read; larger ones are memory-mapped (see read_blob).
SMALL_BLOB = 256 * 1024


def read_blob(fd: int, size: int) -> bytes | memoryview:
    """The ``size`` bytes of an immutable blob as one sendable body.

    Small blobs are read with one ``pread``; larger ones are memory-mapped read-only and
    returned as a view (the mapping lives as long as the view: until the server has
    written it). Raises OSError when the file is shorter than ``size`` (a mapping past
    the end of a file would fault on access, so this is checked first).
    """
    if size <= SMALL_BLOB:
        data = os.pread(fd, size, 0)
        if len(data) != size:
            raise OSError("blob shorter than recorded")
        return data
    if os.fstat(fd).st_size < size:
        raise OSError("blob shorter than recorded")
    return memoryview(mmap.mmap(fd, size, prot=mmap.PROT_READ))


def is_disk_full(exc: OSError) -> bool:
    """True for 'no space left' and 'quota exceeded' errors."""
    return exc.errno in _FULL_ERRNOS


def _read_meta_file(path: str) -> BrainMeta:
    """Read and decode one meta.json; ``FileNotFoundError`` when it is gone, ``CorruptMeta`` when it
    is not a regular file (a named pipe there would hang the reader: a server, backup, migrate)."""
    try:
        with open_regular(path, buffering=-1) as f:
            data = f.read()
    except NotARegularFile as exc:
        log.critical("brain metadata %s is damaged (%s); the brain is unavailable until it is repaired",
                     path, exc.strerror)
        raise CorruptMeta(path, exc.strerror) from None
    return _decode_meta(path, data)


def _decode_meta(path: str, data: bytes) -> BrainMeta:
    try:
        return _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        # our writes are atomic, so this is outside damage: never guess, never delete
        log.critical("brain metadata %s is damaged (%s); the brain is unavailable until it is repaired", path, exc)
        raise CorruptMeta(path, str(exc)) from None


class FileLock:
    """An exclusive ``flock`` on a lock file (blocking), usable as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class LocalStagedBlob:
    """An upload being written to ``tmp/``; its flock marks it as alive for start-up cleanup."""

    rereadable = True

    def __init__(self, path: Path, fsync: bool) -> None:
        self.path = path
        self._fsync = fsync
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._file: BinaryIO = os.fdopen(fd, "wb", buffering=STAGE_BUFFER)
        self._lock_fd = os.dup(fd)  # survives a writer that closes ``file``
        self.committed = False

    @property
    def file(self) -> BinaryIO:
        """The temporary file, open for writing."""
        return self._file

    def finish(self) -> None:
        """Flush and fsync the written bytes (blocking)."""
        if not self._file.closed:
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())
            self._file.close()
        elif self._fsync:
            os.fsync(self._lock_fd)

    def reopen(self) -> BinaryIO:
        """The written bytes, opened for reading (once ``file`` is flushed)."""
        return open(self.path, "rb")  # noqa: SIM115 - caller closes

    def release(self) -> None:
        """Drop the file handles (after the blob was moved into place)."""
        if not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def discard(self) -> None:
        """Remove the temporary file (idempotent)."""
        self.release()
        if not self.committed:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __del__(self) -> None:  # last resort: never leak descriptors
        try:
            self.discard()
        except Exception:
            pass


class LocalTransaction:
    """A change to one brain, made while its lock (and maybe the user lock) is held."""

    def __init__(self, backend: LocalBackend, user_id: str, brain_id: str, user_wide: bool) -> None:
        self._backend = backend
        self._user_id = user_id
        self._brain_id = brain_id
        self._user_wide = user_wide
        self.meta = backend.read_meta(user_id, brain_id, fresh=True)

    def usage(self) -> int:
        """Bytes stored for the whole user (exact only inside a user-wide transaction)."""
        return self._backend.usage(self._user_id)

    def commit(self, new: BrainMeta, blob: LocalStagedBlob | None = None) -> None:
        """Put ``blob`` in place, then write the metadata (the commit point), then drop old blobs."""
        backend = self._backend
        old = self.meta
        if old is None:
            raise CommitConflict("brain was deleted")
        brain_dir = backend.brain_dir(self._user_id, self._brain_id)
        blobs_dir = brain_dir / "blobs"
        placed: Path | None = None
        try:
            placing: concurrent.futures.Future[None] | None = None
            if blob is not None:
                if new.current is None:
                    raise StorageError("a blob needs a current archive")
                target = blobs_dir / check_checksum(new.current.checksum)
                if target.exists() and new.current.checksum in old.blobs():
                    blob.discard()  # identical content is already stored
                else:
                    blobs_dir.mkdir(exist_ok=True, mode=0o700)
                    os.rename(blob.path, target)
                    blob.committed = True
                    blob.release()
                    placed = target
                    if backend.fsync:
                        # The rename is flushed while the new meta.json's temporary file is
                        # written and flushed; both before the rename that commits.
                        placing = _dir_flushes.submit(fsync_dir, blobs_dir)
            if placing is None:
                write_atomic(brain_dir / "meta.json", _encoder.encode(new), fsync=backend.fsync)
            else:
                _commit_meta(brain_dir / "meta.json", _encoder.encode(new), placing)
        except OSError as exc:
            if placed is not None and new.current is not None and new.current.checksum not in old.blobs():
                try:
                    os.unlink(placed)
                except OSError:
                    pass
            if blob is not None:
                blob.discard()
            if is_disk_full(exc):
                raise StorageFull(str(exc)) from exc
            raise
        self.meta = new
        for checksum in old.blobs() - new.blobs():
            try:
                os.unlink(blobs_dir / checksum)
            except FileNotFoundError:
                pass


_dir_flushes = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="store-dir-fsync")


def _commit_meta(path: Path, data: bytes, placed: concurrent.futures.Future[None]) -> None:
    """`write_atomic` of the new metadata once ``placed`` (the flush of the blob's rename) is
    done too: its temporary file is written and fsynced meanwhile, the rename that commits
    comes only after both, then the directory is fsynced (the same flushes, the same order
    for the commit point; two disk waits overlap)."""
    try:
        tmp, _ = write_temporary(path, data, fsync=True)
    except BaseException:
        concurrent.futures.wait([placed])
        raise
    try:
        placed.result()
        os.rename(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    fsync_dir(path.parent)


class LocalBackend:
    """The ``StorageBackend`` for one data directory on local disk."""

    blocking = False  # small reads of cached files: fine on the event loop

    def __init__(self, data_dir: Path, *, fsync: bool = True) -> None:
        self.root = Path(data_dir)
        self.fsync = fsync
        self.brains_root = self.root / "brains"
        self.locks_root = self.root / "locks"
        self.tmp_root = self.root / "tmp"
        for directory in (self.root, self.brains_root, self.locks_root, self.tmp_root):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        # path -> ((inode, mtime_ns, size), parsed meta); valid because every commit
        # renames a new file into place (new inode).
        self._meta_cache: dict[str, tuple[tuple[int, int, int], BrainMeta]] = {}
        self._meta_paths: dict[tuple[str, str], str] = {}
        self._brains_str = str(self.brains_root)
        self._list_cache: dict[str, tuple[int, list[str]]] = {}

    # -- paths and locks -------------------------------------------------------------

    def user_dir(self, user_id: str) -> Path:
        """Directory holding the user's brains."""
        return self.brains_root / check_id(user_id)

    def brain_dir(self, user_id: str, brain_id: str) -> Path:
        """Directory holding one brain."""
        return self.user_dir(user_id) / check_id(brain_id)

    def user_lock(self, user_id: str) -> FileLock:
        """Lock excluding user-wide changes (brain count, quota)."""
        return FileLock(self.locks_root / check_id(user_id) / "user.lock")

    def brain_lock(self, user_id: str, brain_id: str) -> FileLock:
        """Lock excluding concurrent changes of one brain."""
        return FileLock(self.locks_root / check_id(user_id) / f"{check_id(brain_id)}.lock")

    # -- reading ---------------------------------------------------------------------

    def _meta_path(self, user_id: str, brain_id: str) -> str:
        key = (user_id, brain_id)
        path = self._meta_paths.get(key)
        if path is None:
            path = os.path.join(self._brains_str, check_id(user_id), check_id(brain_id), "meta.json")
            if len(self._meta_paths) > 100_000:
                self._meta_paths.clear()
            self._meta_paths[key] = path
        return path

    def read_meta(self, user_id: str, brain_id: str, *, fresh: bool = False) -> BrainMeta | None:
        """Current metadata of one brain, None if absent.

        Cached by (inode, mtime, size) once the file is settled; ``fresh`` always reads
        the file (transactions decide on it under the lock).
        """
        path = self._meta_path(user_id, brain_id)
        if fresh:
            try:
                return _read_meta_file(path)
            except (FileNotFoundError, NotADirectoryError):
                return None
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            self._meta_cache.pop(path, None)
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._meta_cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            meta = _read_meta_file(path)
        except FileNotFoundError:
            return None
        if settled(st.st_mtime_ns):
            if len(self._meta_cache) > 100_000:
                self._meta_cache.clear()
            self._meta_cache[path] = (key, meta)
        return meta

    def _brain_ids(self, user_id: str) -> list[str]:
        user_dir = os.path.join(self._brains_str, check_id(user_id))  # a str: no Path object per listing
        try:
            mtime = os.stat(user_dir).st_mtime_ns
        except FileNotFoundError:
            return []
        cached = self._list_cache.get(user_id)
        if cached is not None and cached[0] == mtime:
            return cached[1]
        try:
            names = [name for name in os.listdir(user_dir) if SAFE_ID.match(name)]
        except FileNotFoundError:
            return []
        if settled(mtime):
            self._list_cache[user_id] = (mtime, names)
        return names

    def list_brains(self, user_id: str) -> list[BrainMeta]:
        """Every usable brain of the user, oldest first (damaged ones are logged and left out: the
        other brains stay usable)."""
        return self.survey_brains(user_id)[0]

    def survey_brains(self, user_id: str) -> tuple[list[BrainMeta], list[DamagedBrain]]:
        """The user's usable brains, oldest first, and the damaged ones (``base.checked_survey``).
        A brain directory without meta.json is no brain: a create or delete cut short (``startup``
        removes it)."""

        def read() -> Iterator[tuple[str, str, BrainMeta | CorruptMeta]]:
            for brain_id in self._brain_ids(user_id):
                try:
                    meta = self.read_meta(user_id, brain_id)
                except CorruptMeta as exc:  # logged
                    yield brain_id, exc.where, exc
                    continue
                if meta is not None:
                    yield brain_id, self._meta_path(user_id, brain_id), meta

        return checked_survey(user_id, read())

    def usage(self, user_id: str) -> int:
        """Bytes stored for the user: every distinct archive of every brain, snapshots included;
        a brain with damaged metadata by the files in its blob directory (they still take the space,
        and its metadata cannot be trusted to say how much)."""
        return stored_total(self, user_id, *self.survey_brains(user_id))

    def damaged_bytes(self, user_id: str, damaged: list[DamagedBrain]) -> dict[str, int]:
        """Bytes of the files in each of the user's ``damaged`` brains' blob directories, by brain id."""
        return {brain.brain_id: self._blob_bytes(user_id, brain.brain_id) for brain in damaged}

    def _blob_bytes(self, user_id: str, brain_id: str) -> int:
        """Bytes of the regular files in a brain's blob directory (links and the like are no archive)."""
        total = 0
        try:
            with os.scandir(self.brain_dir(user_id, brain_id) / "blobs") as entries:
                for entry in entries:
                    if entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
        except (FileNotFoundError, NotADirectoryError):
            pass
        return total

    def _blob_file(self, user_id: str, brain_id: str, checksum: str) -> str:
        return os.path.join(os.path.dirname(self._meta_path(user_id, brain_id)), "blobs", check_checksum(checksum))

    def open_blob(self, user_id: str, brain_id: str, checksum: str) -> BinaryIO:
        """Open an immutable blob for reading; ``BlobMissing`` if it is gone, ``NotARegularFile``
        (an OSError) at once if something else stands in its place (a named pipe would hang the reader)."""
        try:
            return open_regular(self._blob_file(user_id, brain_id, checksum))
        except (FileNotFoundError, NotADirectoryError):
            raise BlobMissing(checksum) from None

    def read_whole_blob(self, user_id: str, brain_id: str, checksum: str, size: int) -> bytes | memoryview:
        """The blob as one body (see :func:`read_blob`); ``BlobMissing`` if it is gone,
        ``NotARegularFile`` if it is not a regular file."""
        with self.open_blob(user_id, brain_id, checksum) as blob:
            return read_blob(blob.fileno(), size)

    def blob_path(self, user_id: str, brain_id: str, checksum: str) -> Path:
        """Where a blob lives (maintenance tools only)."""
        return self.brain_dir(user_id, brain_id) / "blobs" / check_checksum(checksum)

    def iter_users(self) -> Iterator[str]:
        """Users that have a brains directory."""
        try:
            names = sorted(os.listdir(self.brains_root))
        except FileNotFoundError:
            return
        for name in names:
            if SAFE_ID.match(name):
                yield name

    # -- changing --------------------------------------------------------------------

    def stage(self, user_id: str, brain_id: str) -> LocalStagedBlob:
        """A new temporary file for an upload."""
        try:
            return LocalStagedBlob(self.tmp_root / f"up-{uuid.uuid4().hex}", self.fsync)
        except OSError as exc:
            if is_disk_full(exc):
                raise StorageFull(str(exc)) from exc
            raise

    @contextmanager
    def transaction(self, user_id: str, brain_id: str, *, user_wide: bool = False) -> Iterator[LocalTransaction]:
        """Hold the brain lock (after the user lock when ``user_wide``) for one change."""
        if user_wide:
            with self.user_lock(user_id), self.brain_lock(user_id, brain_id):
                yield LocalTransaction(self, user_id, brain_id, user_wide)
        else:
            with self.brain_lock(user_id, brain_id):
                yield LocalTransaction(self, user_id, brain_id, user_wide)

    def create_brain(self, meta: BrainMeta, max_brains: int) -> bool:
        """Create the brain's directory and first metadata unless the user is at ``max_brains``."""
        with self.user_lock(meta.user_id):
            if len(self._brain_ids_fresh(meta.user_id)) >= max_brains:
                return False
            return self._create_locked(meta)

    def create_first_brain(self, meta: BrainMeta) -> bool:
        """Create ``meta`` only if the user has no brain at all (atomic); False otherwise."""
        with self.user_lock(meta.user_id):
            if self._brain_ids_fresh(meta.user_id):
                return False
            return self._create_locked(meta)

    def _create_locked(self, meta: BrainMeta) -> bool:
        brain_dir = self.brain_dir(meta.user_id, meta.id)
        try:
            # each level 0700 (mkdir's parents=True would make the user's directory 0755)
            brain_dir.parent.mkdir(exist_ok=True, mode=0o700)
            brain_dir.mkdir(mode=0o700)
            (brain_dir / "blobs").mkdir(mode=0o700)
            write_atomic(brain_dir / "meta.json", _encoder.encode(meta), fsync=self.fsync)
            if self.fsync:
                fsync_dir(brain_dir.parent)
        except OSError as exc:
            shutil.rmtree(brain_dir, ignore_errors=True)
            if is_disk_full(exc):
                raise StorageFull(str(exc)) from exc
            raise
        return True

    def _brain_ids_fresh(self, user_id: str) -> list[str]:
        self._list_cache.pop(user_id, None)
        return [b for b in self._brain_ids(user_id) if (self.brain_dir(user_id, b) / "meta.json").exists()]

    def delete_brain(self, user_id: str, brain_id: str) -> bool:
        """Remove a brain: move its directory out of the way atomically, then delete it."""
        with self.user_lock(user_id), self.brain_lock(user_id, brain_id):
            return self._delete_locked(user_id, brain_id)

    def _delete_locked(self, user_id: str, brain_id: str) -> bool:
        brain_dir = self.brain_dir(user_id, brain_id)
        if not (brain_dir / "meta.json").exists():
            return False
        trash = self.tmp_root / f"deleted-{uuid.uuid4().hex}"
        os.rename(brain_dir, trash)
        if self.fsync:
            fsync_dir(brain_dir.parent)
        self._meta_cache.pop(str(brain_dir / "meta.json"), None)
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def delete_user(self, user_id: str) -> None:
        """Remove every brain of the user and the user's directory."""
        with self.user_lock(user_id):
            for brain_id in list(self._brain_ids_fresh(user_id)):
                with self.brain_lock(user_id, brain_id):
                    self._delete_locked(user_id, brain_id)
            shutil.rmtree(self.user_dir(user_id), ignore_errors=True)

    def delete_empty_user(self, user_id: str) -> bool:
        """Remove the user's directory when no brain is left in it (a brain directory without
        ``meta.json`` is none: ``delete_user`` and ``startup`` remove it too); False while one is."""
        with self.user_lock(user_id):  # a brain created meanwhile is seen, never removed
            if self._brain_ids_fresh(user_id):
                return False
            shutil.rmtree(self.user_dir(user_id), ignore_errors=True)
            return True

    def ready(self) -> str | None:
        """None when the data directory and its scratch space are writable."""
        if os.access(self.root, os.W_OK) and os.access(self.tmp_root, os.W_OK):
            return None
        return "data directory is not writable"

    # -- recovery --------------------------------------------------------------------

    def startup(self) -> None:
        """Remove orphaned uploads/trash and blobs no metadata references (crash recovery)."""
        for entry in list(os.scandir(self.tmp_root)):
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, ignore_errors=True)
                continue
            if not entry.is_file(follow_symlinks=False):  # no upload of ours; opening a named pipe would wait
                remove_quietly(path)
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live upload in another process
            finally:
                os.close(fd)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        for user_id in self.iter_users():
            for brain_id in self._brain_ids_fresh_all(user_id):
                self._recover_brain(user_id, brain_id)

    def _brain_ids_fresh_all(self, user_id: str) -> list[str]:
        try:
            return [n for n in os.listdir(self.user_dir(user_id)) if SAFE_ID.match(n)]
        except FileNotFoundError:
            return []

    def _recover_brain(self, user_id: str, brain_id: str) -> None:
        brain_dir = self.brain_dir(user_id, brain_id)
        with self.user_lock(user_id), self.brain_lock(user_id, brain_id):
            for entry in list(os.scandir(brain_dir)):
                if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                    os.unlink(entry.path)
            try:
                meta = self.read_meta(user_id, brain_id, fresh=True)
            except CorruptMeta:
                return  # logged; leave everything as it is for the operator
            if meta is None:
                # created or deleted half-way: without metadata it never existed
                shutil.rmtree(brain_dir, ignore_errors=True)
                return
            keep = meta.blobs()
            blobs_dir = brain_dir / "blobs"
            blobs_dir.mkdir(exist_ok=True, mode=0o700)
            for entry in list(os.scandir(blobs_dir)):
                if entry.name not in keep:
                    try:
                        os.unlink(entry.path)
                    except FileNotFoundError:
                        pass
