"""S3 client helpers both servers use: a configured boto3 client and error classification.

Everything here is plain S3 API use (Amazon S3 and compatible services: SeaweedFS, MinIO,
moto). The store's archive transfers build on it (``store.storage.s3client``), and so does
the conditional document store (``common.docstore.s3``).
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError


def make_client(endpoint_url: str | None = None, region: str | None = None, *, timeout: float | None = None) -> Any:
    """A boto3 S3 client for ``endpoint_url`` (None: Amazon S3) and ``region`` (None: us-east-1);
    credentials come from the standard AWS chain (the AWS_* variables, profiles, roles).

    ``timeout`` (seconds): a client for quick probes, with that connect/read timeout and no retries.
    """
    import boto3
    from botocore.config import Config

    endpoint = endpoint_url
    config = Config(
        # a custom endpoint (SeaweedFS, MinIO, moto...) is addressed by path, not by DNS name
        s3={"addressing_style": "path" if endpoint else "auto"},
        # checksums only where S3 requires them: compatible services differ in support, and
        # our archives carry their own SHA-256 (and sealed ones an AEAD tag)
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"max_attempts": 1 if timeout else 4, "mode": "standard"},
        max_pool_connections=64,
        connect_timeout=timeout or 5,
        read_timeout=timeout or 60,
    )
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint or None, region_name=region or "us-east-1",
                          config=config)


def error_code(exc: ClientError) -> str:
    """The S3 error code of a failed call."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: ClientError) -> int:
    """The HTTP status of a failed call."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def is_missing_bucket(exc: ClientError) -> bool:
    """The bucket itself does not exist (deleted, or a wrong name): not a missing object."""
    return error_code(exc) == "NoSuchBucket"


def is_not_found(exc: ClientError) -> bool:
    """The object (or key) does not exist; never a missing bucket, which holds no "absent"
    answer about any object (a caller must not conclude a brain or document is gone)."""
    if is_missing_bucket(exc):
        return False
    return http_status(exc) == 404 or error_code(exc) in ("NoSuchKey", "404", "NotFound")


def is_not_modified(exc: ClientError) -> bool:
    """A conditional GET found the object unchanged."""
    return http_status(exc) == 304 or error_code(exc) == "304"


def is_conflict(exc: ClientError) -> bool:
    """A conditional write lost: precondition failed, a concurrent conditional write, or the
    object to replace is gone."""
    return http_status(exc) in (409, 412) or error_code(exc) in (
        "PreconditionFailed",
        "ConditionalRequestConflict",
    ) or is_not_found(exc)
