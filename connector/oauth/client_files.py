"""Registered OAuth clients: one small document per client, ``clients/<2 hex>/<client id>.json``.

A registration writes one document, so it costs the same with 50,000 clients as with 10 (the
old single ``clients.json`` was rewritten whole on every registration, and is moved here once
by ``ClientDocs.import_collection``). The documents live in the state's ``DocumentStore`` (a
directory, a bucket, or this process's memory); replicas sharing it see each other's clients
at once (a lookup reads the document). Callers keep writes off the event loop (the /register
route runs in a thread).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

from common.docstore import DocumentStore

log = logging.getLogger("connector.oauth.clients")

# Client ids are "bcc_" + URL-safe base64: anything else is never a file name here.
_CLIENT_ID = re.compile(r"bcc_[A-Za-z0-9_-]{8,64}")
_SUFFIX = ".json"
MAX_RECORD_BYTES = 256 * 1024


def _is_client_id(client_id: str) -> bool:
    return bool(_CLIENT_ID.fullmatch(client_id))


def _shard(client_id: str) -> str:
    return hashlib.sha256(client_id.encode("ascii")).hexdigest()[:2]


def _parse_record(client_id: str, data: bytes) -> dict[str, Any] | None:
    if len(data) > MAX_RECORD_BYTES:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        log.warning("client record %s is unreadable; treated as unknown", client_id)
        return None
    return record if isinstance(record, dict) else None


def _encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode("utf-8")


class ClientDocs:
    """Client id -> registration record in ``docs``: ``<prefix>/<2 hex>/<client id>.json``."""

    def __init__(self, docs: DocumentStore, prefix: str = "clients") -> None:
        self._docs = docs
        self._prefix = prefix.rstrip("/") + "/"
        self._lock = threading.Lock()
        self._count = len(self._keys())

    def _key(self, client_id: str) -> str:
        return f"{self._prefix}{_shard(client_id)}/{client_id}{_SUFFIX}"

    def _keys(self) -> list[str]:
        return [key for key in self._docs.list(self._prefix)
                if key.endswith(_SUFFIX) and _is_client_id(key.rsplit("/", 1)[-1][: -len(_SUFFIX)])]

    def __len__(self) -> int:
        """How many clients are registered (as far as this process has seen)."""
        return self._count

    def get(self, client_id: str) -> dict[str, Any] | None:
        """The record of ``client_id``, or None (unknown, malformed id, unreadable document)."""
        if not _is_client_id(client_id):
            return None
        document = self._docs.get(self._key(client_id))
        return _parse_record(client_id, document.data) if document is not None else None

    def put(self, client_id: str, record: dict[str, Any]) -> None:
        """Write ``record`` for ``client_id`` (a new client is created, never overwriting another's)."""
        if not _is_client_id(client_id):
            raise ValueError("not a client id")
        key = self._key(client_id)
        if self._docs.create(key, _encode(record)) is not None:
            with self._lock:
                self._count += 1
            return
        self._docs.put(key, _encode(record))

    def delete(self, client_id: str) -> None:
        """Forget ``client_id`` (nothing happens when it is unknown)."""
        if _is_client_id(client_id) and self._docs.delete(self._key(client_id)):
            with self._lock:
                self._count = max(0, self._count - 1)

    def items(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every (client id, record); slow with many clients (one read each): call it from a thread."""
        keys = self._keys()
        with self._lock:
            self._count = len(keys)  # re-counted: replicas may have added or removed clients
        for key in keys:
            client_id = key.rsplit("/", 1)[-1][: -len(_SUFFIX)]
            record = self.get(client_id)
            if record is not None:
                yield client_id, record

    def import_collection(self, old_key: str) -> int:
        """Move the clients of a former single document (``clients.json``) here, then rename it to
        ``<old_key>.migrated``; how many moved (0 when there is none)."""
        document = self._docs.get(old_key)
        if document is None:
            return 0
        try:
            records = json.loads(document.data)
        except ValueError as exc:
            log.warning("cannot read %s to move its clients: %s", old_key, exc)
            return 0
        moved = 0
        for client_id, record in records.items() if isinstance(records, dict) else ():
            if isinstance(record, dict) and _is_client_id(client_id):
                self.put(client_id, record)
                moved += 1
        self._docs.put(old_key + ".migrated", document.data)
        self._docs.delete(old_key)
        return moved
