"""The document store on a directory (local disk, or NFSv4 shared by several hosts).

Every document is one file ``<root>/<key>`` (mode 0600, directories 0700), written whole to
a temporary file, fsynced and renamed into place, so readers never see half a document and
need no lock. Changes to one key are serialised by an ``flock`` on ``.<name>.lock`` beside
it, shared by every process: a replace compares the version under that lock, a create
links the new file in place (fails when the name exists, like O_EXCL), a take renames the
file to a unique name before reading it (at most one renamer wins). Lock files of removed
documents are removed too (a locker re-checks, after acquiring, that its lock file is still
the one in the directory).

A version is ``<inode>.<mtime_ns>.<size>.<content hash>`` in hex: a rename gives a new
inode, and the hash tells apart two writes that share the rest within the timestamp
granularity. ``get_if_changed`` answers from one ``stat`` when the file is older than that
granularity (``common.files.settled``) and reads only otherwise.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from common.docstore.base import (
    UNCHANGED,
    ConditionalUpdate,
    Document,
    DocumentStoreError,
    Unchanged,
    check_key,
    check_prefix,
    is_hidden,
)
from common.files import fsync_dir, open_regular_fd, remove_quietly, settled, write_temporary


_KNOWN_PATHS = 1024  # file names remembered by get_if_changed


def _version(status: os.stat_result, data: bytes) -> str:
    digest = hashlib.blake2b(data, digest_size=8).hexdigest()
    return f"{status.st_ino:x}.{status.st_mtime_ns:x}.{status.st_size:x}.{digest}"


def _stat_part(version: str) -> str:
    return version.rsplit(".", 1)[0]


class DirectoryStore(ConditionalUpdate):
    """Documents as files under ``root``, created 0700 on the first write (opening a store
    that is only read, or never written because a command failed, leaves no trace)."""

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.where = f"directory {self.root}"
        self._fsync = fsync
        self._known: dict[str, str] = {}

    # -- paths, locks, errors --------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _path_str(self, key: str) -> str:
        """The checked file name of ``key``, remembered: ``get_if_changed`` is on request paths."""
        path = self._known.get(key)
        if path is None:
            path = str(self._path(key))
            if len(self._known) >= _KNOWN_PATHS:
                self._known.clear()
            self._known[key] = path
        return path

    @contextmanager
    def _errors(self, action: str, key: str) -> Iterator[None]:
        """Turn an unexpected OS error into a ``DocumentStoreError`` that is safe to log."""
        try:
            yield
        except OSError as exc:
            raise DocumentStoreError(f"cannot {action} {key} in the {self.where}: "
                                     f"{exc.strerror or exc.__class__.__name__}") from None

    @contextmanager
    def _locked(self, path: Path, *, remove: bool = False) -> Iterator[None]:
        """Hold the key's lock; ``remove``: delete the lock file before letting go (the document
        is gone, so its lock file would only pile up)."""
        lock = path.with_name(f".{path.name}.lock")
        self._make_dirs(lock.parent)
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held = os.fstat(fd)
                try:
                    now = os.stat(lock)
                except FileNotFoundError:
                    now = None
            except BaseException:
                os.close(fd)
                raise
            if now is not None and (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev):
                break
            os.close(fd)  # its holder removed this lock file meanwhile: lock the new one
        try:
            yield
        finally:
            if remove:
                remove_quietly(lock)
            os.close(fd)  # closing releases the flock

    def _make_dirs(self, directory: Path) -> None:
        """``directory`` (the root or below it) and every directory between, each 0700."""
        if directory.is_dir():
            return
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        current = self.root
        for part in directory.relative_to(self.root).parts:
            current = current / part
            current.mkdir(exist_ok=True, mode=0o700)

    def _read(self, path: Path) -> Document | None:
        try:
            # a regular file only: a named pipe put in a document's place would hang every reader
            fd, status = open_regular_fd(path)
        except FileNotFoundError:
            return None
        try:
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read()
        finally:
            os.close(fd)
        return Document(data, _version(status, data))

    def _write(self, path: Path, data: bytes, *, exclusive: bool = False) -> str | None:
        """Write ``data`` at ``path`` atomically (``exclusive``: only when absent); the version."""
        self._make_dirs(path.parent)
        tmp, status = write_temporary(path, data, fsync=self._fsync)
        try:
            if exclusive:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return None
            else:
                os.rename(tmp, path)
        finally:
            remove_quietly(tmp)
        if self._fsync:
            fsync_dir(path.parent)
        return _version(status, data)

    # -- the interface -----------------------------------------------------------------------

    def locate(self, key: str) -> str:
        """The document's file, for messages."""
        return str(self._path(key))

    def get(self, key: str) -> Document | None:
        """The document, or None."""
        path = self._path(key)
        with self._errors("read", key):
            return self._read(path)

    def get_if_changed(self, key: str, version: str | None) -> Document | None | Unchanged:
        """``"unchanged"`` when the file is still ``version`` (one ``stat`` for a settled file)."""
        if version is None:
            return self.get(key)
        path = self._path_str(key)
        try:
            status = os.stat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DocumentStoreError(f"cannot read {key} in the {self.where}: {exc.strerror}") from None
        stat_part = f"{status.st_ino:x}.{status.st_mtime_ns:x}.{status.st_size:x}"
        if stat_part == _stat_part(version) and settled(status.st_mtime_ns):
            return UNCHANGED
        with self._errors("read", key):
            doc = self._read(Path(path))
        if doc is not None and doc.version == version:
            return UNCHANGED
        return doc

    def create(self, key: str, data: bytes) -> str | None:
        """Create-if-absent; the new version, or None when the key exists."""
        path = self._path(key)
        with self._errors("create", key), self._locked(path):
            return self._write(path, data, exclusive=True)

    def replace(self, key: str, data: bytes, version: str) -> str | None:
        """Replace-if-unchanged under the key's lock; the new version, or None on conflict."""
        path = self._path(key)
        with self._errors("replace", key), self._locked(path):
            current = self._read(path)
            if current is None or current.version != version:
                return None
            return self._write(path, data)

    def put(self, key: str, data: bytes) -> str:
        """Unconditional atomic write; the new version."""
        path = self._path(key)
        with self._errors("write", key), self._locked(path):
            version = self._write(path, data)
        assert version is not None  # only exclusive writes give None
        return version

    def delete(self, key: str) -> bool:
        """Remove the document; True when it existed."""
        path = self._path(key)
        if not path.parent.is_dir():
            return False  # nothing there, and nothing to lock
        with self._errors("delete", key), self._locked(path, remove=True):
            try:
                os.unlink(path)
            except FileNotFoundError:
                return False
            if self._fsync:
                fsync_dir(path.parent)
            return True

    def take(self, key: str) -> Document | None:
        """Read and remove exactly once: the file is renamed to a unique name first, which
        only one caller can do."""
        path = self._path(key)
        if not path.parent.is_dir():
            return None  # nothing there, and nothing to lock
        with self._errors("take", key), self._locked(path, remove=True):
            taken = path.with_name(f".{path.name}.{uuid.uuid4().hex}.taken")
            try:
                os.rename(path, taken)
            except FileNotFoundError:
                return None
            try:
                doc = self._read(taken)
            finally:
                remove_quietly(taken)
            if self._fsync:
                fsync_dir(path.parent)
            return doc

    def list(self, prefix: str = "") -> list[str]:
        """The keys starting with ``prefix``, sorted (bookkeeping files left out)."""
        check_prefix(prefix)
        start = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        keys: list[str] = []
        with self._errors("list", prefix or "the keys"):
            for dirpath, dirnames, filenames in os.walk(start):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                base = Path(dirpath).relative_to(self.root).as_posix()
                for name in filenames:
                    key = name if base == "." else f"{base}/{name}"
                    if key.startswith(prefix) and not is_hidden(key) and _valid(key):
                        keys.append(key)
        return sorted(keys)

    def update(self, key: str, change: Callable[[bytes | None], bytes | None], *,
               attempts: int = 30) -> bytes | None:
        """Read-modify-write under the key's lock (no conflicts to retry here); ``change`` gets
        the current bytes or None and returns the new bytes, or None to leave them. Returns
        what is stored afterwards; an exception of ``change`` writes nothing."""
        path = self._path(key)
        with self._errors("update", key), self._locked(path):
            current = self._read(path)
            new = change(current.data if current is not None else None)
            if new is None:
                return current.data if current is not None else None
            self._write(path, new)
            return new


def _valid(key: str) -> bool:
    try:
        check_key(key)
    except ValueError:
        return False
    return True
