"""Small expiring records that every replica sees: one sealed file each in the state directory.

Used for what a client's next request needs wherever it lands: authorization
codes, and the web app's sessions, sign-ins at the issuer and checked imports. A record lives in ``<directory>/<name>``
where the name is the SHA-256 of its kind and key (the key itself, e.g. a cookie
value, is never written), sealed with AES-256-GCM under the state key and bound
to that name, written atomically with mode 0600. A lookup reads the file, so a
record deleted at one replica (a sign-out) is gone at every replica at once.
``take`` hands a record out once across replicas: it renames the file to a
unique name first, and the file system lets exactly one rename succeed.

Every record expires at most ``ttl_s`` after it was written, so files older
than that are removed by whichever replica next writes (at most every 30 s);
beyond ``capacity`` files the oldest go first. Without a directory the records
live in a bounded dict in this process.

``SealedDocs`` keeps the same records in a ``DocumentStore`` (the state in a bucket): one
document each under ``<prefix>/<name>``, sealed the same way; ``take`` is the store's
take-exactly-once (a conditional marker on S3). Expired documents are removed by a
background pass of whichever replica writes, at most every ``prune_every_s``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.files import write_atomic
from connector.state.files import ensure_private_dir
from connector.state.sealing import SecretBox

log = logging.getLogger("connector.state.sealed")

_PRUNE_EVERY_S = 30.0
_TAKEN = ".taken"
_MAX_FILE_BYTES = 64 * 1024 * 1024


def seal_record(box: SecretBox, context: str, expires_at: float, record: dict[str, Any]) -> bytes:
    """``record`` and its expiry sealed under ``context`` (the bytes of one file or document)."""
    return box.seal(json.dumps({"e": expires_at, "r": record}, separators=(",", ":")), context).encode("ascii")


def open_record(box: SecretBox, context: str, data: bytes) -> tuple[float, dict[str, Any]] | None:
    """(expiry, record) sealed in ``data`` under ``context``; None when altered, foreign or malformed."""
    if len(data) > _MAX_FILE_BYTES:
        return None
    opened = box.open(data.decode("ascii", errors="replace").strip(), context)
    if opened is None:
        return None
    try:
        document = json.loads(opened)
        return float(document["e"]), dict(document["r"])
    except (ValueError, KeyError, TypeError):
        return None


def record_name(kind: str, key: str) -> str:
    """The name a record of ``kind`` under ``key`` is kept at (the key itself is never written)."""
    return hashlib.sha256(f"{kind}\0{key}".encode()).hexdigest()


class SealedRecords:
    """Records of one ``kind`` by key, each with its own expiry; shared through ``directory``."""

    def __init__(self, directory: Path | None, box: SecretBox, kind: str, *, ttl_s: float, capacity: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._dir = directory
        self._box = box
        self._kind = kind
        self._ttl_s = ttl_s
        self._capacity = capacity
        self._clock = clock
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._pruned_at = 0.0
        self._written_since_prune = 0
        if directory is not None:
            ensure_private_dir(directory)

    def _name(self, key: str) -> str:
        return record_name(self._kind, key)

    def put(self, key: str, record: dict[str, Any], expires_at: float) -> None:
        """Store ``record`` under ``key`` until ``expires_at`` (at most ``ttl_s`` from now)."""
        now = self._clock()
        expires_at = min(expires_at, now + self._ttl_s)
        name = self._name(key)
        if self._dir is None:
            with self._lock:
                self._memory[name] = (expires_at, record)
                self._memory.move_to_end(name)
                while len(self._memory) > self._capacity:
                    self._memory.popitem(last=False)
            return
        self._prune(now)
        write_atomic(self._dir / name, seal_record(self._box, self._context(name), expires_at, record), fsync=False)

    def get(self, key: str) -> dict[str, Any] | None:
        """The live record under ``key``, else None (unknown, expired, deleted, or not ours)."""
        name = self._name(key)
        if self._dir is None:
            with self._lock:
                held = self._memory.get(name)
            return self._live(held, name)
        return self._live(self._read(self._dir / name, name), name)

    def take(self, key: str) -> dict[str, Any] | None:
        """The live record under ``key``, removed: of two replicas taking it at once, one gets it."""
        name = self._name(key)
        if self._dir is None:
            with self._lock:
                held = self._memory.pop(name, None)
            return self._live(held, name)
        claimed = self._dir / f"{name}.{secrets.token_hex(8)}{_TAKEN}"
        try:
            os.rename(self._dir / name, claimed)
        except FileNotFoundError:
            return None
        try:
            held = self._read(claimed, name)
        finally:
            claimed.unlink(missing_ok=True)
        # Expired: nothing to remove (the name may already hold a newer record).
        return held[1] if held is not None and held[0] > self._clock() else None

    def delete(self, key: str) -> bool:
        """Remove the record under ``key`` everywhere; True when there was one."""
        name = self._name(key)
        if self._dir is None:
            with self._lock:
                return self._memory.pop(name, None) is not None
        try:
            os.unlink(self._dir / name)
        except FileNotFoundError:
            return False
        return True

    def __len__(self) -> int:
        if self._dir is None:
            return len(self._memory)
        with os.scandir(self._dir) as entries:
            return sum(1 for entry in entries if not entry.name.startswith("."))

    # ----- internals ---------------------------------------------------------------

    def _context(self, name: str) -> str:
        # Binds a sealed file to its kind and name: a file copied over another's name does not open.
        return f"{self._kind}/{name}"

    def _live(self, held: tuple[float, dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
        if held is None:
            return None
        expires_at, record = held
        if expires_at <= self._clock():
            if self._dir is None:
                with self._lock:
                    self._memory.pop(name, None)
            else:
                (self._dir / name).unlink(missing_ok=True)
            return None
        return record

    def _read(self, path: Path, name: str) -> tuple[float, dict[str, Any]] | None:
        try:
            with open(path, "rb") as handle:
                data = handle.read(_MAX_FILE_BYTES + 1)
        except OSError:
            return None
        return open_record(self._box, self._context(name), data)

    def _prune(self, now: float) -> None:
        """Drop files past ``ttl_s`` (and the oldest beyond ``capacity``); at most every 30 s
        unless this process alone wrote ``capacity`` records since."""
        assert self._dir is not None
        self._written_since_prune += 1
        if now - self._pruned_at < _PRUNE_EVERY_S and self._written_since_prune < self._capacity:
            return
        self._pruned_at, self._written_since_prune = now, 0
        cutoff = now - self._ttl_s
        kept: list[tuple[float, str]] = []
        try:
            with os.scandir(self._dir) as entries:
                for entry in entries:
                    try:
                        modified = entry.stat(follow_symlinks=False).st_mtime
                        if modified < cutoff:
                            os.unlink(entry.path)
                        elif not entry.name.startswith("."):
                            kept.append((modified, entry.path))
                    except FileNotFoundError:
                        continue  # another replica removed it first
            kept.sort()
            for _, path in kept[: max(0, len(kept) - self._capacity + 1)]:
                Path(path).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not prune %s: %s", self._dir, exc)


class SealedDocs:
    """Records of one ``kind`` by key in ``docs`` under ``prefix``: ``SealedRecords`` on a bucket."""

    def __init__(self, docs: DocumentStore, prefix: str, box: SecretBox, kind: str, *, ttl_s: float, capacity: int,
                 clock: Callable[[], float] = time.time, prune_every_s: float = 300.0) -> None:
        self._docs = docs
        self._prefix = prefix.rstrip("/") + "/"
        self._box = box
        self._kind = kind
        self._ttl_s = ttl_s
        self._capacity = capacity
        self._clock = clock
        self._prune_every_s = prune_every_s
        self._lock = threading.Lock()
        self._pruned_at = 0.0
        self._written_since_prune = 0
        self._pruning = False
        self._again = False  # a pass was due while one ran: run once more

    def _key(self, key: str) -> tuple[str, str]:
        name = record_name(self._kind, key)
        return self._prefix + name, f"{self._kind}/{name}"  # the same context as a file's

    def put(self, key: str, record: dict[str, Any], expires_at: float) -> None:
        """Store ``record`` under ``key`` until ``expires_at`` (at most ``ttl_s`` from now)."""
        now = self._clock()
        doc_key, context = self._key(key)
        self._docs.put(doc_key, seal_record(self._box, context, min(expires_at, now + self._ttl_s), record))
        self._maybe_prune(now)

    def get(self, key: str) -> dict[str, Any] | None:
        """The live record under ``key``, else None (unknown, expired, deleted, or not ours)."""
        doc_key, context = self._key(key)
        document = self._docs.get(doc_key)
        held = open_record(self._box, context, document.data) if document is not None else None
        if held is None:
            return None
        if held[0] <= self._clock():
            self._docs.delete(doc_key)
            return None
        return held[1]

    def take(self, key: str) -> dict[str, Any] | None:
        """The live record under ``key``, removed: of replicas taking it at once, one gets it."""
        doc_key, context = self._key(key)
        document = self._docs.take(doc_key)
        held = open_record(self._box, context, document.data) if document is not None else None
        return held[1] if held is not None and held[0] > self._clock() else None

    def delete(self, key: str) -> bool:
        """Remove the record under ``key`` everywhere; True when there was one."""
        return self._docs.delete(self._key(key)[0])

    def __len__(self) -> int:
        return len(self._docs.list(self._prefix))

    def _maybe_prune(self, now: float) -> None:
        """Start a background pass removing expired documents (and the soonest to expire beyond
        ``capacity``), at most every ``prune_every_s`` unless this process alone wrote ``capacity``
        records since; the request that wrote does not wait for it."""
        with self._lock:
            self._written_since_prune += 1
            due = now - self._pruned_at >= self._prune_every_s or self._written_since_prune >= self._capacity
            if not due:
                return
            self._pruned_at, self._written_since_prune = now, 0
            if self._pruning:
                self._again = True
                return
            self._pruning = True
        threading.Thread(target=self._prune_passes, name=f"prune-{self._kind}", daemon=True).start()

    def _prune_passes(self) -> None:
        while True:
            self._prune()
            with self._lock:
                if not self._again:
                    self._pruning = False
                    return
                self._again = False

    def _prune(self) -> None:
        try:
            now = self._clock()
            live: list[tuple[float, str]] = []
            for doc_key in self._docs.list(self._prefix):
                document = self._docs.get(doc_key)
                if document is None:
                    continue
                held = open_record(self._box, f"{self._kind}/{doc_key[len(self._prefix):]}", document.data)
                if held is None or held[0] <= now:
                    self._docs.delete(doc_key)
                else:
                    live.append((held[0], doc_key))
            live.sort()
            for _, doc_key in live[: max(0, len(live) - self._capacity)]:
                self._docs.delete(doc_key)
        except Exception as exc:  # noqa: BLE001 - a failed pass is retried by the next; never kills a request
            log.warning("could not prune %s: %s", self._prefix, exc)
