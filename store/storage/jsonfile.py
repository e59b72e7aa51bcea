"""A JSON document in one local file, shared by the CLI and every worker process.

Readers call ``changed()`` on every request: one ``stat``, and a re-read only when the
file's inode, mtime or size changed (a file written within the timestamp granularity
is read again next time). Writers go through ``edit()``: an ``flock`` shared by every
process, read, change, atomic write (temporary file, fsync, rename) with mode 0600.
The users file and the sharing file are kept this way.

Every edit also writes the new document to ``<name>.last-good`` (before the file itself).
A file damaged from outside (truncated, overwritten) is never read as empty: readers turn
to that copy, the latest state written, so every process serves the same state; a process
that had not yet read the latest edit does not keep serving what was revoked meanwhile.
The damage is logged at CRITICAL and reported by ``damaged`` (the store's /health/ready).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

from store.storage.local import FileLock, settled, write_atomic

D = TypeVar("D")
T = TypeVar("T")


class WatchedJsonFile(Generic[D]):
    """One document type ``D`` (a msgspec Struct) in ``path``, edited under ``lock_path``."""

    def __init__(self, path: Path, lock_path: Path, doc_type: type[D], *, fsync: bool, log: logging.Logger,
                 what: str) -> None:
        self.path = path
        self.lock_path = lock_path
        self._path_str = str(path)
        self._type = doc_type
        self._decoder = msgspec.json.Decoder(doc_type)
        self._encoder = msgspec.json.Encoder()
        self._fsync = fsync
        self._log = log
        self._what = what
        self._stat_key: tuple[int, int, int] | None = None
        self._reload_lock = threading.Lock()
        self.last_good = path.with_name(path.name + ".last-good")
        self.damaged: str | None = None  # why the file is not read (its last good copy serves)

    def changed(self, on_missing: Callable[[], None]) -> D | None:
        """The document when the file changed since the last call and parses, else None.

        ``on_missing`` is called once when a file seen before disappears. A corrupt file is
        logged at CRITICAL (once per version) and gives None: callers keep the last good copy.
        """
        try:
            st = os.stat(self._path_str)
        except FileNotFoundError:
            if self._stat_key is not None:
                self._stat_key = None
                on_missing()
            return None
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key == self._stat_key:
            return None
        with self._reload_lock:
            if key == self._stat_key:
                return None
            try:
                doc = self._decoder.decode(self.path.read_bytes())
            except (OSError, msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                self._stat_key = key  # log once per bad version, not per request
                return self._damaged(exc)
            self.damaged = None
            self._stat_key = key if settled(st.st_mtime_ns) else None
            return doc

    def _damaged(self, exc: Exception) -> D | None:
        """The file does not parse: the last good copy written (None: keep what is in memory)."""
        try:
            doc = self._decoder.decode(self.last_good.read_bytes())
            serving = f"serving its last good copy {self.last_good.name}"
        except (OSError, msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            doc = None
            serving = "no readable last good copy; still serving what this process read before"
        self.damaged = f"{self._what} {self.path} is unreadable or corrupt ({exc}); {serving}"
        self._log.critical("%s", self.damaged)
        return doc

    def edit(self, change: Callable[[D], T], corrupt: Callable[[str], Exception]) -> T:
        """Apply ``change`` to the document in one locked edit and write it; returns its result.

        A missing file starts from an empty document; a corrupt one raises ``corrupt(message)``
        and is never written over. If ``change`` raises, nothing is written.
        """
        with FileLock(self.lock_path):
            try:
                doc = self._decoder.decode(self.path.read_bytes())
            except FileNotFoundError:
                doc = self._type()
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                raise corrupt(f"{self.path} is corrupt ({exc}); fix or restore it first "
                              f"(its last good copy is {self.last_good})") from None
            result = change(doc)
            data = self._encoder.encode(doc)
            # the copy first: it is never older than the file it stands in for
            write_atomic(self.last_good, data, fsync=self._fsync, mode=0o600)
            write_atomic(self.path, data, fsync=self._fsync, mode=0o600)
        return result
