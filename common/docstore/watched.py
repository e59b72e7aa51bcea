"""One typed JSON document in a document store, read by many processes and edited by CAS.

The store's users and sharing registries keep their document this way, on a directory
(``users.json``, ``sharing.json`` in the data directory) or in a bucket (the same names
under the store's prefix); the backend is whatever ``DocumentStore`` is given.

Reading: ``check()`` asks the store whether the document changed since the version last
seen (a directory: one ``stat``; S3: a conditional GET, an empty 304 when nothing changed)
and hands a changed document that parses to ``on_change``. Where a look costs a syscall
(``poll_seconds=None``) ``refresh()`` checks on every call; where it costs a network round
trip (S3) a background thread checks every ``poll_seconds`` and ``refresh()`` does no I/O.

Damage: every edit also writes the new document to ``<key>.last-good`` (before the document
itself), so a document damaged from outside (truncated, overwritten) is never read as empty:
readers turn to that copy, the latest state written, so every process and replica serves the
same state, and one that had not yet read the latest edit does not keep serving what was
revoked meanwhile. The damage is logged at CRITICAL (once per damaged version) and reported
by ``damaged`` (the store's /health/ready). A damaged document is never written over.

Editing: ``edit()`` reads, applies ``change`` and writes with the store's ``update`` (a
directory: under the key's flock; S3: If-Match / If-None-Match, retried on conflict), so
writers in different processes and on different hosts never lose each other's edits.

Versions: with ``newest_version``, a document whose ``version`` is above it (written by a newer
release, after a downgrade) is refused when read (``NewerDocument``) and never edited: decoding
drops the fields this code does not know, so a rewrite would lose them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec

from common.docstore.base import (
    UNCHANGED,
    DocumentStore,
    DocumentStoreError,
    DocumentStoreUnavailable,
    NewerDocument,
)

D = TypeVar("D")
T = TypeVar("T")
LAST_GOOD = ".last-good"
_UNREADABLE = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)


class WatchedDocument(Generic[D]):
    """The document type ``D`` (a msgspec Struct whose defaults make an empty document) at
    ``key`` of ``store``; ``what`` names it in messages ("users file")."""

    def __init__(self, store: DocumentStore, key: str, doc_type: type[D], *, what: str, log: logging.Logger,
                 on_change: Callable[[D], None], on_missing: Callable[[], None],
                 poll_seconds: float | None = None, newest_version: int | None = None) -> None:
        """``newest_version``: the highest ``version`` field this code writes (``D`` has one)."""
        self.store = store
        self._newest = newest_version
        self.key = key
        self.last_good_key = key + LAST_GOOD
        self.location = store.locate(key)  # for messages
        self._type = doc_type
        self._decoder = msgspec.json.Decoder(doc_type)
        self._encoder = msgspec.json.Encoder()
        self._what = what
        self._log = log
        self._on_change = on_change
        self._on_missing = on_missing
        self.poll_seconds = poll_seconds
        self._version: str | None = None  # the version last looked at (good or damaged)
        self._seen = False  # a document was there at the last look
        self._lock = threading.Lock()
        self.damaged: str | None = None  # why the document is not read (its last good copy serves)
        # why neither the document nor its last good copy could be read (what serves is only what
        # this process read before: for a command that just started, nothing)
        self.unread: str | None = None
        self.last_fetch = 0.0
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    # -- reading ------------------------------------------------------------------------------

    def check(self) -> None:
        """Look at the store once; install a changed document (or its last good copy).

        Raises ``DocumentStoreError`` when the store cannot be asked (the caller decides)."""
        with self._lock:
            self.last_fetch = time.monotonic()
            found = self.store.get_if_changed(self.key, self._version)
            if found == UNCHANGED:
                return
            if found is None:
                self._version = None
                if self._seen:
                    self._seen = False
                    self._on_missing()
                return
            self._version = found.version
            self._seen = True
            try:
                doc = self._decoder.decode(found.data)
            except _UNREADABLE as exc:
                self._install_last_good(exc)
                return
            if (newer := self._newer(doc)) is not None:
                # the version is noted as looked at: a serving process keeps what it read before
                # and says so once (``refresh``), instead of on every request
                self.damaged = newer
                raise NewerDocument(newer)
            self.damaged = self.unread = None
            self._on_change(doc)

    def _newer(self, doc: D) -> str | None:
        """Why ``doc`` must not be read here (a newer release wrote it), else None."""
        version = getattr(doc, "version", 0)
        if self._newest is None or not isinstance(version, int) or version <= self._newest:
            return None
        return (f"{self._what} {self.location} has version {version}, newer than this brain-store knows (up to "
                f"{self._newest}): a newer release wrote it, and rewriting it here would drop what that release "
                "added; run that release (or restore a backup made with this one); nothing was changed")

    def _install_last_good(self, exc: Exception) -> None:
        """The document does not parse: install its last good copy if that one does."""
        try:
            copy = self.store.get(self.last_good_key)
            if copy is None:
                raise DocumentStoreError("missing")
            doc = self._decoder.decode(copy.data)
            if self._newer(doc) is not None:
                raise DocumentStoreError("newer")  # not this release's to serve either
            self._on_change(doc)
            serving = f"serving its last good copy {self.key}{LAST_GOOD}"
            self.unread = None
        except (DocumentStoreError, *_UNREADABLE):
            serving = "no readable last good copy; still serving what this process read before"
            self.unread = f"{self._what} {self.location} is unreadable or corrupt ({exc}) and has no readable " \
                          f"last good copy ({self.key}{LAST_GOOD})"
        self.damaged = f"{self._what} {self.location} is unreadable or corrupt ({exc}); {serving}"
        self._log.critical("%s", self.damaged)

    def refresh(self) -> None:
        """Where a look is cheap (no ``poll_seconds``), look now; else nothing (the poller looks).

        A store that cannot be asked is logged; what was read before keeps serving."""
        if self.poll_seconds is not None:
            return
        try:
            self.check()
        except DocumentStoreError as exc:
            self._log.error("cannot read the %s: %s; still serving what this process read before", self._what, exc)

    @property
    def polling(self) -> bool:
        """True once ``start_polling`` ran (a serving replica on S3)."""
        return self._poller is not None

    def start_polling(self, name: str) -> None:
        """Start the background poller (servers, when ``poll_seconds`` is set); idempotent."""
        if self._poller is not None or self.poll_seconds is None:
            return
        self._poller = threading.Thread(target=self._poll_loop, name=name, daemon=True)
        self._poller.start()

    def stop_polling(self) -> None:
        """Stop the poller (tests, shutdown)."""
        self._stop.set()

    def _poll_loop(self) -> None:
        failures = 0
        while not self._stop.wait(self.poll_seconds):
            try:
                self.check()
                failures = 0
            except Exception as exc:  # keep serving the last good copy; never die
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    self._log.warning("cannot poll the %s (%s failures): %s", self._what, failures, exc)

    # -- changing -------------------------------------------------------------------------------

    def edit(self, change: Callable[[D], T], corrupt: Callable[[str], Exception], *,
             replace_damaged: bool = False) -> T:
        """Apply ``change`` to the document in one conditional edit and write it; its result.

        A missing document starts empty; a damaged one raises ``corrupt(message)`` and is never
        written over, unless ``replace_damaged`` (a restore, whose ``change`` replaces the whole
        document: it then starts empty too); if ``change`` raises, nothing is written. Storage
        that is gone (``DocumentStoreUnavailable``) is raised as it is, never as ``corrupt``. ``change``
        runs again when another writer won the race (S3), so it must only change the document it
        is given.
        """
        outcome: list[T] = []

        def apply(data: bytes | None) -> bytes:
            if data is None:
                doc = self._type()
            else:
                try:
                    doc = self._decoder.decode(data)
                except _UNREADABLE as exc:
                    if not replace_damaged:
                        raise corrupt(f"{self.location} is corrupt ({exc}); fix or restore it first "
                                      f"(its last good copy is {self.key}{LAST_GOOD})") from None
                    doc = self._type()
                if (newer := self._newer(doc)) is not None:
                    raise corrupt(newer)  # before ``change``: nothing is written
            outcome[:] = [change(doc)]
            new = self._encoder.encode(doc)
            # the copy first: it is never older than the document it stands in for
            self.store.put(self.last_good_key, new)
            return new

        try:
            self.store.update(self.key, apply)
        except DocumentStoreUnavailable:
            raise  # the storage is gone, not the document refused: the caller answers 503
        except DocumentStoreError as exc:
            raise corrupt(f"cannot change the {self._what}: {exc}") from None
        try:
            self.check()  # install what is stored now (this edit, or a later one)
        except DocumentStoreError as exc:
            self._log.warning("cannot re-read the %s after an edit: %s", self._what, exc)
        return outcome[0]
