"""Small expiring records that every replica sees: one sealed document each in the state.

Used for what a client's next request needs wherever it lands: authorization codes, and the
web app's sessions, sign-ins at the issuer and checked imports. A record lives at
``<prefix>/<name>`` in the state's ``DocumentStore`` (a file of the state directory, an
object of the bucket) where the name is the SHA-256 of its kind and key (the key itself, e.g.
a cookie value, is never written), sealed with AES-256-GCM under the state key and bound to
that name. A lookup reads the document, so a record deleted at one replica (a sign-out) is
gone at every replica at once. ``take`` hands a record out once across replicas (the store's
take-exactly-once: a rename in a directory, a conditional marker on S3).

Every record expires at most ``ttl_s`` after it was written; expired documents (and the
soonest to expire beyond ``capacity``) are removed by a background pass of whichever replica
writes, at most every ``prune_every_s``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from common.docstore import DocumentStore
from connector.state.sealing import SecretBox

log = logging.getLogger("connector.state.sealed")

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


class SealedDocs:
    """Records of one ``kind`` by key, each with its own expiry, in ``docs`` under ``prefix``."""

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
