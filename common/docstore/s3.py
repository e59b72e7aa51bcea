"""The document store on S3: one object per document, conditional writes on ETags.

``create`` is a PUT with ``If-None-Match: *``, ``replace`` a PUT with ``If-Match: <etag>``,
``get_if_changed`` a GET with ``If-None-Match: <etag>`` (an empty 304 when nothing changed):
what Amazon S3 and compatible services (SeaweedFS, MinIO) honour since 2024, and what the
store checks at start-up. ``take`` first creates the marker ``.taken/<key>`` with
``If-None-Match: *`` (only one caller can), then reads and deletes the document and the
marker. A taker that dies between the two leaves the document untakeable: a document worth
taking (an authorization code, a sign-in in flight) expires anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from common.docstore.base import (
    UNCHANGED,
    ConditionalUpdate,
    Document,
    DocumentStoreError,
    DocumentStoreUnavailable,
    Unchanged,
    check_key,
    check_prefix,
    is_hidden,
)
from common.s3client import error_code, is_conflict, is_missing_bucket, is_not_found, is_not_modified

TAKEN = ".taken/"


class S3Store(ConditionalUpdate):
    """Documents as objects ``<prefix>/<key>`` in ``bucket``, through a boto3 ``client``."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self._client = client
        self.bucket = bucket
        prefix = prefix.strip("/")
        self.prefix = f"{prefix}/" if prefix else ""
        self.where = f"s3://{bucket}/{self.prefix}"

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    @contextmanager
    def _errors(self, action: str, key: str) -> Iterator[None]:
        """Turn a failure of S3 into a ``DocumentStoreError`` that is safe to log."""
        try:
            yield
        except ClientError as exc:
            error = DocumentStoreUnavailable if is_missing_bucket(exc) else DocumentStoreError
            raise error(f"cannot {action} {key} in {self.where}: S3 says {error_code(exc) or exc}") from None
        except BotoCoreError as exc:
            # No answer at all (endpoint refused or timed out): the backend is gone, not the document
            # damaged, so no caller may read it as "missing" or "damaged" (the store's 503).
            raise DocumentStoreUnavailable(f"cannot {action} {key} in {self.where}: {exc}") from None

    def _get(self, object_key: str, **condition: str) -> Document | None | Unchanged:
        try:
            reply = self._client.get_object(Bucket=self.bucket, Key=object_key, **condition)
        except ClientError as exc:
            if is_not_modified(exc):
                return UNCHANGED
            if is_not_found(exc):
                return None
            raise
        with reply["Body"] as body:
            data = body.read()
        return Document(data, str(reply["ETag"]))

    def _put(self, object_key: str, data: bytes, **condition: str) -> str | None:
        """PUT the object; its ETag, or None when the condition failed."""
        try:
            reply = self._client.put_object(Bucket=self.bucket, Key=object_key, Body=data, **condition)
        except ClientError as exc:
            if condition and is_conflict(exc):
                return None
            raise
        return str(reply["ETag"])

    def _exists(self, object_key: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=object_key)
        except ClientError as exc:
            if is_not_found(exc):
                return False
            raise
        return True

    # -- the interface -----------------------------------------------------------------------

    def locate(self, key: str) -> str:
        """The document's object, for messages."""
        return f"s3://{self.bucket}/{self._key(key)}"

    def get(self, key: str) -> Document | None:
        """The document, or None."""
        with self._errors("read", key):
            doc = self._get(self._key(key))
        assert doc != UNCHANGED
        return doc  # type: ignore[return-value]

    def get_if_changed(self, key: str, version: str | None) -> Document | None | Unchanged:
        """A conditional GET: ``"unchanged"`` (304, no body) when the ETag is still ``version``."""
        with self._errors("read", key):
            if version is None:
                return self._get(self._key(key))
            return self._get(self._key(key), IfNoneMatch=version)

    def create(self, key: str, data: bytes) -> str | None:
        """PUT with ``If-None-Match: *``; the new ETag, or None when the key exists."""
        with self._errors("create", key):
            return self._put(self._key(key), data, IfNoneMatch="*")

    def replace(self, key: str, data: bytes, version: str) -> str | None:
        """PUT with ``If-Match: version``; the new ETag, or None on conflict (or when gone)."""
        with self._errors("replace", key):
            return self._put(self._key(key), data, IfMatch=version)

    def put(self, key: str, data: bytes) -> str:
        """Unconditional PUT; the new ETag."""
        with self._errors("write", key):
            etag = self._put(self._key(key), data)
        assert etag is not None  # only conditional PUTs give None
        return etag

    def delete(self, key: str) -> bool:
        """Remove the object; True when it existed (S3's DELETE does not say, so a HEAD asks first)."""
        object_key = self._key(key)
        with self._errors("delete", key):
            existed = self._exists(object_key)
            if existed:
                self._client.delete_object(Bucket=self.bucket, Key=object_key)
            return existed

    def take(self, key: str) -> Document | None:
        """Read and remove exactly once: only the caller that creates the marker reads."""
        object_key = self._key(key)
        marker = self.prefix + TAKEN + key
        with self._errors("take", key):
            if not self._exists(object_key):
                return None  # the common miss costs one HEAD, and leaves no marker behind
            if self._put(marker, b"", IfNoneMatch="*") is None:
                return None  # another caller is taking it
            try:
                doc = self._get(object_key)
                if doc is not None:
                    self._client.delete_object(Bucket=self.bucket, Key=object_key)
            finally:
                self._client.delete_object(Bucket=self.bucket, Key=marker)
        assert doc != UNCHANGED
        return doc  # type: ignore[return-value]

    def list(self, prefix: str = "") -> list[str]:
        """The keys starting with ``prefix``, sorted (markers left out)."""
        check_prefix(prefix)
        keys: list[str] = []
        with self._errors("list", prefix or "the keys"):
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                           Prefix=self.prefix + prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    key = str(item["Key"])[len(self.prefix):]
                    if key and not is_hidden(key):
                        keys.append(key)
        return sorted(keys)
