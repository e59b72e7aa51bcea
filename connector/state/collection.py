"""JSON collections every replica shares: a dict of records in one document, changed under a condition.

``DocCollection`` keeps the dict in one document of the state's ``DocumentStore`` (a file of
the state directory changed under its flock, or an object of the bucket changed with
``If-Match``); ``connector.oauth.state.OAuthState`` makes one per collection.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from common.docstore import UNCHANGED, DocumentStore, DocumentStoreError
from common.docstore.watched import LAST_GOOD
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


class DocCollection:
    """A dict of JSON records in one document of a ``DocumentStore``.

    A change reads the document, applies the change to a copy and writes it back with the
    version it read (``DocumentStore.update``: ``If-Match`` on S3), so of two replicas
    changing it at once one retries on the other's result and nothing is lost. A read asks
    the store whether the document changed (a conditional GET) unless ``fresh_s`` is set:
    then a background thread asks at most every ``fresh_s`` seconds and reads answer from
    memory, so a change at another replica is seen here within ``fresh_s`` plus one round
    trip (a read finding the copy older than ``3 * fresh_s``, the poller being stuck,
    refreshes it itself). This process's own changes are seen at once.

    A document damaged from outside is never read as empty: the last good records stay in
    use, ``damaged`` says why, and the next change writes them back. With ``good_copy`` every
    change also writes ``<key>.last-good``, which a start finding the document damaged falls
    back on (a file can be truncated in place; a bucket object cannot, and bucket versioning
    keeps old versions there); without a good copy such a start refuses (StateError) rather
    than guess. When the store cannot be reached, reads keep the last records they had
    (logged) and changes raise ``DocumentStoreError``.

    With ``keep_when_missing`` (revocations: a missing list must not mean "nothing revoked")
    a document deleted from outside is treated as damaged, not as empty: once a good copy
    exists (every change writes one, in a bucket too), reads and the next change start from
    it, on every replica and after a restart.
    """

    def __init__(self, docs: DocumentStore, key: str, *, fresh_s: float = 0.0, good_copy: bool = False,
                 keep_when_missing: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self._docs = docs
        self._key = key
        self._keep_when_missing = keep_when_missing
        self._good_copy = good_copy or keep_when_missing
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
                if not self._keep_when_missing:
                    self._records, self._version, self.damaged = {}, None, None
                    return
                if self._version is None and self.damaged is not None:
                    return  # still missing: the good copy already serves (not read again on every call)
                self._version = None
                good = self._good_records()
                if good is None:
                    if start or not self._records:
                        self._records, self.damaged = {}, None
                        return  # never written (no good copy): nothing recorded yet
                else:
                    self._records = {**self._records, **good}
                reason = "the document is missing"
            else:
                try:
                    self._records, self._version, self.damaged = _decode(got.data), got.version, None
                    return
                except (ValueError, RecursionError) as exc:
                    reason = f"{type(exc).__name__}: {str(exc)[:200]}"
                self._version = got.version  # reported once per damaged version, not on every read
                if start and self._good_copy:
                    self._records = self._read_good_copy(reason)
                elif start:
                    raise StateError(f"cannot read {self._key} in the {self._docs.where} ({reason}): restore it "
                                     "from a backup (bucket versioning); deleting it forgets what it holds") from None
            self.damaged = reason
        log.error("state file damaged: the last good records stay in use and are written back at the next change",
                  extra={"file": self._key, "reason": reason})

    def _good_records(self) -> dict[str, Any] | None:
        """The records of ``<key>.last-good``, or None when there is none or it cannot be read."""
        try:
            document = self._docs.get(self._key + LAST_GOOD)
            return _decode(document.data) if document is not None else None
        except (DocumentStoreError, ValueError, RecursionError):
            return None

    def _read_good_copy(self, reason: str) -> dict[str, Any]:
        """The records of ``<key>.last-good`` (start-up with the document damaged), else StateError."""
        good_key = self._key + LAST_GOOD
        try:
            document = self._docs.get(good_key)
            if document is not None:
                return _decode(document.data)
        except (DocumentStoreError, ValueError, RecursionError):
            pass
        raise StateError(
            f"cannot read {self._docs.locate(self._key)} ({reason}) and there is no good copy ({good_key}): "
            "restore it from a backup; deleting it forgets what it holds (sign-ins, revocations)") from None

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

    def get(self, key: str) -> Any:
        """The record under ``key`` or None."""
        return self.records.get(key)

    def __len__(self) -> int:
        return len(self.records)

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
            elif self._keep_when_missing:
                # Deleted from outside: start again from the good copy (and what this process holds).
                records = {**copy.deepcopy(self._records), **(self._good_records() or {})}
            outcome[:] = [change(records), records]
            new = _encode(records)
            if self._keep_when_missing:
                # The copy first (as the store's watched documents do): a replica whose
                # conditional write then loses writes its copy again from the newer document,
                # so the copy does not stay older than the document it stands in for.
                self._docs.put(self._key + LAST_GOOD, new)
            return new

        with self._lock:
            written = self._docs.update(self._key, apply)
            if self._good_copy and not self._keep_when_missing and written is not None:
                # The copy a restart falls back on if the document is damaged later (its own
                # file: one truncated in place leaves it whole).
                self._docs.put(self._key + LAST_GOOD, written)
            self._records = outcome[1]
            # The version written is not returned: the next read fetches the document once. A
            # distinct marker (not None) so that an answer asked for before this change is dropped.
            self._version, self._checked = f"written-{next(_WRITES)}", self._clock()
            if self.damaged is not None:
                log.warning("state file written back from the last good records", extra={"file": self._key})
                self.damaged = None
        return outcome[0]
