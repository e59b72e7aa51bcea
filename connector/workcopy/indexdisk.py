"""Hybrid indexes kept on this replica's disk, so a restart or an eviction need not rebuild them.

One file per brain and content key (the archive's checksum): the packed index
(connector/engine/recall/hybridpack.py) sealed with AES-256-GCM under the state key
(`SecretBox.seal_bytes`), bound to that brain and key, so a file copied under another
name, sealed by another connector (other key) or damaged does not open and is rebuilt.
It holds memory text (the text index's terms, the vectors), hence the sealing.

The directory is local to one replica (CONNECTOR_INDEX_CACHE_DIR; default
``index-cache`` in the state directory): a cache, not state. Files are 0600 in a 0700
directory, written to a temporary name and renamed (no fsync: a file lost or torn by a
crash fails to open and is rebuilt). After each save the least recently used files
beyond the size budget are removed.

Saving waits until a brain has had no newer version for SAVE_DELAY_S (`save_later`), and
only the newest version is saved: a session of writes makes one file once it goes quiet,
not one per write (packing and sealing 10,000 memories costs some 70 ms of CPU and
writes 14 MB, more than the memorize itself). The file only serves after a restart or
an eviction, so it need not be current sooner. One timer per brain waits, pushed back
by each newer version rather than replaced (no thread started per write). `flush`
saves what waits (shutdown).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import NamedTuple

from connector.engine.recall.hybrid import HybridIndex
from connector.engine.recall.hybridpack import pack, unpack
from connector.engine.recall.index import BrainIndex
from connector.state.sealing import SecretBox

log = logging.getLogger("connector.indexdisk")

_SUFFIX = ".hix"
# Seconds without a newer version of the same brain (which replaces the waiting one)
# before a save.
SAVE_DELAY_S = 30.0


class _Pending(NamedTuple):
    key: str
    hybrid: HybridIndex
    model_id: str
    due: float  # time.monotonic() from which it is saved


class IndexDisk:
    """Sealed hybrid indexes by cache key (brain and content key) in one directory (thread-safe)."""

    def __init__(self, directory: Path, state_key: bytes, *, max_bytes: int = 1024 * 1024 * 1024) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._box = SecretBox(state_key)
        self._lock = threading.Lock()
        self._ready = False
        self._pending: dict[str, _Pending] = {}  # by group (one brain)
        self._timers: dict[str, threading.Timer] = {}  # by group: the one timer waiting to save it

    def _name(self, key: str) -> Path:
        # The name reveals neither the brain nor the content key.
        digest = hashlib.sha256(b"brain-connector hybrid index\0" + key.encode("utf-8", "surrogatepass")).hexdigest()
        return self.directory / f"{digest[:40]}{_SUFFIX}"

    @staticmethod
    def _context(key: str, model_id: str) -> str:
        return f"hybrid index\0{model_id}\0{key}"

    def _ensure(self) -> bool:
        if not self._ready:
            try:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                if self.directory.stat().st_mode & 0o077:
                    os.chmod(self.directory, 0o700)
            except OSError as exc:
                log.warning("hybrid index cache unavailable: %s", exc.strerror or exc)
                return False
            self._ready = True
        return True

    def load(self, key: str, index: BrainIndex, model_id: str) -> HybridIndex | None:
        """The index kept for ``key`` when it opens and fits ``index`` (same memories), else None."""
        if not self._ensure():
            return None
        path = self._name(key)
        try:
            sealed = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("could not read a hybrid index cache file: %s", exc.strerror or exc)
            return None
        opened = self._box.open_bytes(sealed, self._context(key, model_id))
        found = None if opened is None else unpack(opened, index, model_id)
        if found is None:
            log.warning("ignoring an unreadable hybrid index cache file (other key, damaged or stale): rebuilt")
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)  # recently used: the last to be pruned
        except OSError:
            pass
        return found

    def save_later(self, group: str, key: str, hybrid: HybridIndex, model_id: str, delay_s: float = SAVE_DELAY_S) -> None:
        """`save` once ``delay_s`` seconds pass without a newer save of the same ``group`` (one
        brain's versions), which replaces this one; on a background thread."""
        with self._lock:
            self._pending[group] = _Pending(key, hybrid, model_id, time.monotonic() + delay_s)
            if group in self._timers:
                return  # the waiting timer finds the newer version and waits for it
            self._arm(group, delay_s)

    def _arm(self, group: str, delay_s: float) -> None:
        """Start the timer of ``group`` (lock held)."""
        timer = threading.Timer(max(delay_s, 0.0), self._save_pending, args=(group,))
        timer.daemon = True
        self._timers[group] = timer
        timer.start()

    def _save_pending(self, group: str) -> None:
        with self._lock:
            self._timers.pop(group, None)
            pending = self._pending.get(group)
            if pending is None:
                return
            wait = pending.due - time.monotonic()
            if wait > 0:  # a newer version came meanwhile: wait for it to go quiet
                self._arm(group, wait)
                return
            del self._pending[group]
        self.save(pending.key, pending.hybrid, pending.model_id)

    def flush(self) -> None:
        """Save at once every save that waits."""
        with self._lock:
            waiting = list(self._pending.values())
            self._pending.clear()
            timers = list(self._timers.values())
            self._timers.clear()
        for timer in timers:
            timer.cancel()
        for pending in waiting:
            self.save(pending.key, pending.hybrid, pending.model_id)

    def save(self, key: str, hybrid: HybridIndex, model_id: str) -> None:
        """Keep ``hybrid`` for ``key`` (a full or read-only disk costs a rebuild later, nothing else)."""
        if not self._ensure():
            return
        path = self._name(key)
        temporary = self.directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            sealed = self._box.seal_bytes(pack(hybrid, model_id), self._context(key, model_id))
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(sealed)
            os.replace(temporary, path)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            log.warning("could not save a hybrid index: %s", exc.strerror or exc)
            return
        self._prune()

    def _prune(self) -> None:
        """Remove the least recently used files beyond the size budget."""
        with self._lock:
            try:
                files = []
                for entry in os.scandir(self.directory):
                    if entry.name.endswith(_SUFFIX):
                        stat = entry.stat()
                        files.append((stat.st_mtime_ns, stat.st_size, entry.path))
            except OSError:
                return
            total = sum(size for _, size, _ in files)
            for _, size, name in sorted(files):
                if total <= self.max_bytes:
                    break
                Path(name).unlink(missing_ok=True)
                total -= size
