"""The conditional document store both servers keep small documents in (see ``base``).

``open_document_store`` is the one place a location becomes a backend: ``s3://bucket/prefix``
is a bucket (``S3Store``), anything else a directory (``DirectoryStore``).
"""

from __future__ import annotations

from pathlib import Path

from common.docstore.base import (
    UNCHANGED,
    Document,
    DocumentStore,
    DocumentStoreError,
    DocumentStoreUnavailable,
    NewerDocument,
    Unchanged,
)
from common.docstore.directory import DirectoryStore

S3_SCHEME = "s3://"


def open_document_store(location: str | Path, *, s3_endpoint_url: str | None = None,
                        s3_region: str | None = None, fsync: bool = True) -> DocumentStore:
    """The store at ``location``: ``s3://bucket/prefix`` (credentials from the AWS_* variables;
    the endpoint and region as given), else a directory (``fsync``: make writes durable)."""
    if isinstance(location, str) and location.startswith(S3_SCHEME):
        from common.docstore.s3 import S3Store
        from common.s3client import make_client

        bucket, _, prefix = location[len(S3_SCHEME):].partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {location!r}: write s3://bucket/prefix")
        return S3Store(make_client(s3_endpoint_url, s3_region), bucket, prefix)
    return DirectoryStore(Path(location), fsync=fsync)


__all__ = ["UNCHANGED", "DirectoryStore", "Document", "DocumentStore", "DocumentStoreError",
           "DocumentStoreUnavailable", "NewerDocument", "Unchanged",
           "open_document_store"]
