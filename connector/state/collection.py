"""JSON collections every replica shares: a dict of records in one document, changed under a condition.

``JsonCollection`` keeps the dict in one file of the state directory (flock, atomic rename);
``DocCollection`` in one document of a ``DocumentStore`` (a bucket: a change is a read and an
``If-Match`` write, retried when another replica won). Both offer ``records``, ``get``,
``mutate``, ``damaged`` and ``name``; ``connector.oauth.state.OAuthState`` chooses.
"""

from __future__ import annotations

import copy
import fcntl
import itertools
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from common.docstore import UNCHANGED, DocumentStore, DocumentStoreError
from common.files import write_atomic
from connector.state.files import StateError

log = logging.getLogger("connector.state.collection")
T = TypeVar("T")
_WRITES = itertools.count()


def _encode(records: dict[str, Any]) -> bytes:
    return json.dumps(records, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _decode(data: bytes) -> dict[str, Any]:
    records = json.loads(data)
    if not isinstance(records, dict):
        raise ValueError("not a JSON object")
    return records


class _Records:
    """What both collections answer from their ``records``."""

    @property
    def records(self) -> dict[str, Any]:
        raise NotImplementedError

    def get(self, key: str) -> Any:
        """The record under ``key`` or None."""
        return self.records.get(key)

    def __len__(self) -> int:
        return len(self.records)


class JsonCollection(_Records):
    """A dict of JSON records, written through to one file (0600) after each change.

    Writes are atomic (temporary file, fsync, rename, directory fsync), so a
    crash leaves the old or the new file, never a torn one. Several processes
    may share the file (replicas on one state directory): a change happens
    under an exclusive lock on a sibling ``.lock`` file after re-reading the
    file, and reads pick up another process's change when the file changed.
    Without a path the collection lives in memory only.

    A file damaged from outside (truncated, edited, a disk error) is never read as
    empty, which would revive what it revoked: the last good records stay in use
    (those in memory, or at start-up the ``.last-good`` copy written after every change),
    the file is named in the log and in ``damaged`` (``/health/ready`` says so), and
    the next change writes the good records back. With neither good records nor a
    good copy, start-up refuses (StateError) rather than guess.
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._records: dict[str, Any] = {}
        self._signature: tuple[int, int, int] | None = None
        self.damaged: str | None = None  # why the file could not be read, while it cannot
        self._reload(force=True)

    @property
    def name(self) -> str:
        """The file's name ("" in memory)."""
        return self._path.name if self._path is not None else ""

    @property
    def _good_copy(self) -> Path:
        assert self._path is not None
        return self._path.with_name(self._path.name + ".last-good")

    def _stat_signature(self) -> tuple[int, int, int] | None:
        assert self._path is not None
        try:
            info = self._path.stat()
        except FileNotFoundError:
            return None
        return (info.st_mtime_ns, info.st_size, info.st_ino)

    @staticmethod
    def _parse(path: Path) -> dict[str, Any]:
        return _decode(path.read_bytes())

    def _reload(self, force: bool = False) -> None:
        if self._path is None:
            return
        signature = self._stat_signature()
        if not force and signature == self._signature:
            return
        if signature is None:
            self._records, self._signature, self.damaged = {}, None, None
            return
        try:
            self._records, self._signature, self.damaged = self._parse(self._path), signature, None
            return
        except (OSError, ValueError, RecursionError) as exc:
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        self._signature = signature  # reported once per damaged version, not on every read
        if force:  # start-up: nothing in memory yet, so the copy of the last good records
            try:
                self._records = self._parse(self._good_copy)
            except (OSError, ValueError, RecursionError):
                raise StateError(
                    f"cannot read {self._path} ({reason}) and there is no good copy ({self._good_copy.name}): "
                    "restore it from a backup; deleting it forgets what it holds (sign-ins, revocations)"
                ) from None
        self.damaged = reason
        log.error("state file damaged: the last good records stay in use and are written back at the next change",
                  extra={"file": self._path.name, "reason": reason})

    @property
    def records(self) -> dict[str, Any]:
        """The current records (re-read when another process changed the file). Do not mutate."""
        with self._lock:
            self._reload()
            return self._records

    def mutate(self, change: Callable[[dict[str, Any]], T]) -> T:
        """Apply ``change`` to the latest records and persist the result; returns what ``change`` returned.

        If ``change`` raises, nothing is written.
        """
        with self._lock:
            if self._path is None:
                return change(self._records)
            lock_fd = os.open(self._path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                self._reload()
                working = copy.deepcopy(self._records)
                result = change(working)
                self._flush(working)
                self._records = working
                self._signature = self._stat_signature()
                if self.damaged is not None:
                    log.warning("state file written back from the last good records", extra={"file": self._path.name})
                    self.damaged = None
                return result
            finally:
                os.close(lock_fd)  # closing releases the lock

    def _flush(self, records: dict[str, Any]) -> None:
        assert self._path is not None
        payload = _encode(records)
        write_atomic(self._path, payload)
        # The copy a restart falls back on if the file is damaged later (its own inode: a
        # file truncated in place leaves it whole). The file above is the durable one.
        write_atomic(self._good_copy, payload, fsync=False)



class DocCollection(_Records):
    """A dict of JSON records in one document of a ``DocumentStore`` (the state in a bucket).

    A change reads the document, applies the change to a copy and writes it back with the
    version it read (``DocumentStore.update``: ``If-Match`` on S3), so of two replicas
    changing it at once one retries on the other's result and nothing is lost. A read asks
    the store whether the document changed (a conditional GET) unless ``fresh_s`` is set:
    then a background thread asks at most every ``fresh_s`` seconds and reads answer from
    memory, so a change at another replica is seen here within ``fresh_s`` plus one round
    trip (a read finding the copy older than ``3 * fresh_s``, the poller being stuck,
    refreshes it itself). This process's own changes are seen at once.

    A document damaged from outside is never read as empty: the last good records stay in
    use, ``damaged`` says why, and the next change writes them back. When the store cannot
    be reached, reads keep the last records they had (logged) and changes raise
    ``DocumentStoreError``.
    """

    def __init__(self, docs: DocumentStore, key: str, *, fresh_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._docs = docs
        self._key = key
        self._fresh_s = fresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, Any] = {}
        self._version: str | None = None
        self._checked = float("-inf")
        self._poller: tuple[int, threading.Thread] | None = None
        self.damaged: str | None = None
        self._refresh(start=True)

    @property
    def name(self) -> str:
        """The document's key."""
        return self._key

    def _refresh(self, start: bool = False) -> None:
        """Bring the records up to date with the store. The store is asked without holding
        ``_lock`` (readers answer from memory meanwhile); the answer is applied under it unless
        a change of this process came in between."""
        with self._lock:
            asked_with = self._version
        try:
            got = self._docs.get_if_changed(self._key, asked_with)
        except DocumentStoreError as exc:
            if start:
                raise StateError(f"cannot read the connector's state ({exc})") from None
            log.warning("state document not re-read; the last records stay in use",
                        extra={"file": self._key, "reason": str(exc)})
            return
        with self._lock:
            if self._version != asked_with:
                return  # our own change, newer than this answer, is already in memory
            self._checked = self._clock()
            if got == UNCHANGED:
                return
            if got is None:
                self._records, self._version, self.damaged = {}, None, None
                return
            try:
                self._records, self._version, self.damaged = _decode(got.data), got.version, None
                return
            except (ValueError, RecursionError) as exc:
                reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            self._version = got.version  # reported once per damaged version, not on every read
            if start:
                raise StateError(f"cannot read {self._key} in the {self._docs.where} ({reason}): restore it "
                                 "from a backup (bucket versioning); deleting it forgets what it holds") from None
            self.damaged = reason
        log.error("state document damaged: the last good records stay in use and are written back at the next change",
                  extra={"file": self._key, "reason": reason})

    @staticmethod
    def _poll(ref: weakref.ReferenceType[DocCollection], every_s: float) -> None:
        # A weak reference: the thread ends once its collection is gone.
        while True:
            time.sleep(every_s)
            collection = ref()
            if collection is None:
                return
            collection._refresh()
            del collection

    def _ensure_poller(self) -> None:
        # Started on first use, and again in a forked worker (threads do not survive a fork).
        if self._poller is None or self._poller[0] != os.getpid():
            thread = threading.Thread(target=self._poll, args=(weakref.ref(self), self._fresh_s),
                                      name=f"state-poll-{self._key}", daemon=True)
            self._poller = (os.getpid(), thread)
            thread.start()

    @property
    def records(self) -> dict[str, Any]:
        """The current records (see the class docstring for how fresh). Do not mutate."""
        if self._fresh_s <= 0:
            self._refresh()
        else:
            with self._lock:
                self._ensure_poller()
                stale = self._clock() - self._checked > 3 * self._fresh_s
            if stale:
                self._refresh()
        with self._lock:
            return self._records

    def mutate(self, change: Callable[[dict[str, Any]], T]) -> T:
        """Apply ``change`` to the latest records and store the result; returns what ``change`` returned.

        ``change`` may run more than once (when another replica changed the document first), on
        a fresh copy each time. If it raises, nothing is written.
        """
        outcome: list[Any] = []

        def apply(current: bytes | None) -> bytes:
            records: dict[str, Any] = {}
            if current is not None:
                try:
                    records = _decode(current)
                except (ValueError, RecursionError):
                    records = copy.deepcopy(self._records)  # damaged: write the last good records back
            outcome[:] = [change(records), records]
            return _encode(records)

        with self._lock:
            self._docs.update(self._key, apply)
            self._records = outcome[1]
            # The version written is not returned: the next read fetches the document once. A
            # distinct marker (not None) so that an answer asked for before this change is dropped.
            self._version, self._checked = f"written-{next(_WRITES)}", self._clock()
            if self.damaged is not None:
                log.warning("state document written back from the last good records", extra={"file": self._key})
                self.damaged = None
        return outcome[0]
