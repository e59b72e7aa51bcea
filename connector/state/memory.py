"""The connector's state in this process's memory: a ``DocumentStore`` over a dict.

Used when neither ``CONNECTOR_STATE_URL`` nor ``CONNECTOR_STATE_DIR`` is set, so the OAuth
and web state run the same code whatever holds it; a restart forgets everything.
"""

from __future__ import annotations

import itertools
import threading

from common.docstore.base import (UNCHANGED, ConditionalUpdate, Document, Unchanged, check_key, check_prefix)


class MemoryStore(ConditionalUpdate):
    """Documents in a dict, each change under one lock (a version is a write counter)."""

    where = "memory of this process"

    def __init__(self) -> None:
        self._documents: dict[str, Document] = {}
        self._lock = threading.Lock()
        self._writes = itertools.count(1)

    def _stored(self, key: str, data: bytes) -> str:
        version = str(next(self._writes))
        self._documents[key] = Document(bytes(data), version)
        return version

    def locate(self, key: str) -> str:
        """The key, for messages."""
        return f"memory:{check_key(key)}"

    def get(self, key: str) -> Document | None:
        """The document, or None."""
        with self._lock:
            return self._documents.get(check_key(key))

    def get_if_changed(self, key: str, version: str | None) -> Document | None | Unchanged:
        """``"unchanged"`` when the document is still ``version``."""
        document = self.get(key)
        return UNCHANGED if document is not None and document.version == version else document

    def create(self, key: str, data: bytes) -> str | None:
        """Create-if-absent; the new version, or None when the key exists."""
        with self._lock:
            return None if check_key(key) in self._documents else self._stored(key, data)

    def replace(self, key: str, data: bytes, version: str) -> str | None:
        """Replace-if-unchanged; the new version, or None on conflict."""
        with self._lock:
            current = self._documents.get(check_key(key))
            return self._stored(key, data) if current is not None and current.version == version else None

    def put(self, key: str, data: bytes) -> str:
        """Unconditional write; the new version."""
        with self._lock:
            return self._stored(check_key(key), data)

    def delete(self, key: str) -> bool:
        """Remove the document; True when it existed."""
        with self._lock:
            return self._documents.pop(check_key(key), None) is not None

    def take(self, key: str) -> Document | None:
        """Read and remove (the lock makes it once)."""
        with self._lock:
            return self._documents.pop(check_key(key), None)

    def list(self, prefix: str = "") -> list[str]:
        """The keys starting with ``prefix``, sorted."""
        check_prefix(prefix)
        with self._lock:
            return sorted(key for key in self._documents if key.startswith(prefix))
