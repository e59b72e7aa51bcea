"""The conditional document store: small documents under keys, written with a condition.

Both servers keep small documents (registries, OAuth state, sessions, heads) that several
processes, and several hosts, change at once. This interface is what they need from the
place those documents live, whichever it is: read with a version, create-if-absent,
replace-if-unchanged, unconditional write, delete, take-exactly-once, and a
read-modify-write retried on conflict. Backends: a directory (``directory.py``: O_EXCL,
rename, flock) and an S3 bucket (``s3.py``: If-None-Match / If-Match on ETags).

Keys are relative, "/"-separated paths of ``[A-Za-z0-9._-]`` segments; a segment may not
start with "." (backends keep their own bookkeeping under such names). Values are bytes:
callers seal or encode them.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_PREFIX = re.compile(r"[A-Za-z0-9._/-]*")
MAX_KEY_LENGTH = 1000  # S3 allows 1024 bytes, including the store's prefix

Unchanged = Literal["unchanged"]
UNCHANGED: Unchanged = "unchanged"


@dataclass(frozen=True)
class Document:
    """A document's bytes and its version (opaque; changes on every write)."""

    data: bytes
    version: str


class DocumentStoreError(Exception):
    """The backend is unreachable or damaged, or a change kept conflicting; the message is
    safe to log (no document contents, no credentials)."""


class NewerDocument(DocumentStoreError):
    """A document carries a ``version`` newer than this code knows: it was written by a newer
    release, and rewriting it would drop what that release added (unknown fields are not kept)."""


class DocumentStoreUnavailable(DocumentStoreError):
    """The backend itself is gone (an S3 bucket that does not exist): no answer about any
    document, so no caller may read it as "missing" or "damaged"; retry once it is back."""


def check_key(key: str) -> str:
    """``key`` when it is a valid document key; else ``ValueError``."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise ValueError("a document key is a non-empty string of at most 1000 characters")
    for segment in key.split("/"):
        if not _SEGMENT.fullmatch(segment):
            raise ValueError(f"bad document key {key!r}: segments are [A-Za-z0-9._-], not starting with '.'")
    return key


def check_prefix(prefix: str) -> str:
    """``prefix`` when it is a valid listing prefix ("" or the start of a key); else ``ValueError``."""
    if not isinstance(prefix, str) or len(prefix) > MAX_KEY_LENGTH or not _PREFIX.fullmatch(prefix) \
            or prefix.startswith("/") or "//" in prefix or any(s.startswith(".") for s in prefix.split("/") if s):
        raise ValueError(f"bad document key prefix {prefix!r}")
    return prefix


def is_hidden(key: str) -> bool:
    """Whether a stored name is backend bookkeeping (a segment starting with "."), not a document."""
    return any(segment.startswith(".") for segment in key.split("/"))


@runtime_checkable
class DocumentStore(Protocol):
    """Small documents under keys, changed with conditions (see the module docstring)."""

    where: str  # "directory /path" or "s3://bucket/prefix", for messages

    def locate(self, key: str) -> str:
        """Where the document ``key`` is, for messages ("/path/key", "s3://bucket/prefix/key")."""
        ...

    def get(self, key: str) -> Document | None:
        """The document, or None when there is none."""
        ...

    def get_if_changed(self, key: str, version: str | None) -> Document | None | Unchanged:
        """``"unchanged"`` when the current version is ``version``; else the document or None."""
        ...

    def create(self, key: str, data: bytes) -> str | None:
        """Create-if-absent: the new version, or None when the key exists."""
        ...

    def replace(self, key: str, data: bytes, version: str) -> str | None:
        """Replace-if-unchanged: the new version, or None when the current version is not
        ``version`` (or the document is gone)."""
        ...

    def put(self, key: str, data: bytes) -> str:
        """Unconditional atomic write; the new version."""
        ...

    def delete(self, key: str) -> bool:
        """Remove the document; True when it existed."""
        ...

    def take(self, key: str) -> Document | None:
        """Read and remove: of any number of concurrent callers, on any host, at most one gets it."""
        ...

    def list(self, prefix: str = "") -> list[str]:
        """The keys starting with ``prefix``, sorted."""
        ...

    def update(self, key: str, change: Callable[[bytes | None], bytes | None], *,
               attempts: int = 30) -> bytes | None:
        """Read-modify-write retried on conflict (see ``ConditionalUpdate.update``)."""
        ...


class ConditionalUpdate:
    """``update`` built on ``get``, ``create`` and ``replace``: what every backend shares."""

    def get(self, key: str) -> Document | None:
        raise NotImplementedError

    def create(self, key: str, data: bytes) -> str | None:
        raise NotImplementedError

    def replace(self, key: str, data: bytes, version: str) -> str | None:
        raise NotImplementedError

    def update(self, key: str, change: Callable[[bytes | None], bytes | None], *,
               attempts: int = 30) -> bytes | None:
        """Read, ``change`` (current bytes or None) and write conditionally; retried when another
        writer won. ``change`` may run more than once, so it must only compute; it returns the
        new bytes, or None to leave the document as it is. Returns what is stored afterwards.
        Raises ``DocumentStoreError`` after ``attempts`` conflicts; exceptions of ``change``
        pass through with nothing written."""
        for attempt in range(attempts):
            current = self.get(key)
            new = change(current.data if current is not None else None)
            if new is None:
                return current.data if current is not None else None
            if current is None:
                written = self.create(key, new)
            else:
                written = self.replace(key, new, current.version)
            if written is not None:
                return new
            # another writer won: back off a little (randomised, so racers spread out)
            time.sleep(random.uniform(0, min(0.2, 0.005 * (attempt + 1))))
        raise DocumentStoreError(f"document {key} kept changing under us ({attempts} attempts); try again")
