"""Registered OAuth clients on disk: one small file per client in a sharded directory.

A registration writes one file (temporary file, fsync, rename, directory fsync),
so it costs the same with 50,000 clients as with 10; the old single
``clients.json`` was rewritten whole on every registration. Replicas sharing the
state directory see each other's clients at once (a lookup reads the file).
Callers keep writes off the event loop (the /register route runs in a thread).
Without a directory the clients live in a dict. ``ClientDocs`` keeps the same records in a
``DocumentStore`` (the state in a bucket), one document each at the same relative key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.docstore import DocumentStore
from common.files import is_temporary, write_atomic

log = logging.getLogger("connector.oauth.clients")

# Client ids are "bcc_" + URL-safe base64: anything else is never a file name here.
_CLIENT_ID = re.compile(r"bcc_[A-Za-z0-9_-]{8,64}")
_SUFFIX = ".json"
_STALE_TMP_S = 3600.0
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


class ClientFiles:
    """Client id -> registration record, one file each under ``directory/<2 hex>/``."""

    def __init__(self, directory: Path | None) -> None:
        self._dir = directory
        self._memory: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._count = 0
        if directory is not None:
            directory.mkdir(mode=0o700, exist_ok=True)
            self._count = sum(1 for _ in self._paths(clean=True))

    def __len__(self) -> int:
        """How many clients are registered (as far as this process has seen)."""
        if self._dir is None:
            return len(self._memory)
        return self._count

    def _path(self, client_id: str) -> Path:
        assert self._dir is not None
        return self._dir / _shard(client_id) / (client_id + _SUFFIX)

    def _paths(self, clean: bool = False) -> Iterator[Path]:
        """Every client file; with ``clean``, also remove temporary files a crash left behind."""
        assert self._dir is not None
        stale_before = time.time() - _STALE_TMP_S
        with os.scandir(self._dir) as shards:
            for shard in shards:
                if not shard.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(shard.path) as entries:
                    for entry in entries:
                        if entry.name.endswith(_SUFFIX) and _is_client_id(entry.name[: -len(_SUFFIX)]):
                            yield Path(entry.path)
                        elif clean and is_temporary(entry.name) and entry.stat().st_mtime < stale_before:
                            # Old enough that no replica is still writing it.
                            Path(entry.path).unlink(missing_ok=True)

    def get(self, client_id: str) -> dict[str, Any] | None:
        """The record of ``client_id``, or None (unknown, malformed id, unreadable file)."""
        if not _is_client_id(client_id):
            return None
        if self._dir is None:
            return self._memory.get(client_id)
        try:
            with open(self._path(client_id), "rb") as handle:
                data = handle.read(MAX_RECORD_BYTES + 1)
        except OSError:
            return None
        return _parse_record(client_id, data)

    def put(self, client_id: str, record: dict[str, Any], *, durable: bool = True) -> None:
        """Write ``record`` for ``client_id`` atomically (a crash leaves the old or the new file)."""
        if not _is_client_id(client_id):
            raise ValueError("not a client id")
        if self._dir is None:
            with self._lock:
                self._memory[client_id] = record
            return
        path = self._path(client_id)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        existed = path.exists()
        write_atomic(path, _encode(record), fsync=durable)
        if not existed:
            with self._lock:
                self._count += 1

    def delete(self, client_id: str) -> None:
        """Forget ``client_id`` (nothing happens when it is unknown)."""
        if not _is_client_id(client_id):
            return
        if self._dir is None:
            with self._lock:
                self._memory.pop(client_id, None)
            return
        try:
            self._path(client_id).unlink()
        except FileNotFoundError:
            return
        with self._lock:
            self._count = max(0, self._count - 1)

    def items(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every (client id, record); slow with many clients: call it from a thread."""
        if self._dir is None:
            yield from list(self._memory.items())
            return
        seen = 0
        for path in self._paths():
            seen += 1
            client_id = path.name[: -len(_SUFFIX)]
            record = self.get(client_id)
            if record is not None:
                yield client_id, record
        with self._lock:
            self._count = seen  # re-counted: replicas may have added or removed clients

    def import_collection(self, old_file: Path) -> int:
        """Move the clients of a former ``clients.json`` here, then rename that file; the count moved."""
        try:
            records = json.loads(old_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s to move its clients: %s", old_file.name, exc)
            return 0
        moved = 0
        for client_id, record in records.items() if isinstance(records, dict) else ():
            if isinstance(record, dict) and _is_client_id(client_id):
                self.put(client_id, record, durable=False)
                moved += 1
        os.sync()  # one flush for the whole move rather than two fsyncs per client
        try:
            os.replace(old_file, old_file.with_name(old_file.name + ".migrated"))
        except FileNotFoundError:
            pass  # a replica starting at the same moment moved it first
        return moved


class ClientDocs:
    """Client id -> registration record in ``docs``: ``<prefix>/<2 hex>/<client id>.json``, as the files."""

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

    def put(self, client_id: str, record: dict[str, Any], *, durable: bool = True) -> None:
        """Write ``record`` for ``client_id`` (a new client is created, never overwriting another's)."""
        del durable  # every write to the store is durable
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
