"""Start-up probe: does this S3 service honour conditional writes?

The S3 backend's only guard against lost updates is ``If-None-Match: *`` and
``If-Match: <etag>`` on PutObject. Some S3-compatible services accept those headers
and silently ignore them, which would let two racing uploads both "win". The probe
exercises both on a scratch object and refuses the service unless each write that
must fail does fail (with 412) and each that must succeed does.
"""

from __future__ import annotations

import uuid
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from common.s3client import http_status, is_conflict
from store.storage.s3client import Bucket


class ConditionalWritesUnsupported(RuntimeError):
    """The S3 service does not honour conditional writes (or cannot be reached)."""


def _put(client: Any, bucket: Bucket, key: str, body: bytes, **cond: str) -> str | None:
    """The new ETag, or None when the service refused the write because of its condition."""
    try:
        return str(client.put_object(Bucket=bucket.name, Key=key, Body=body, **cond)["ETag"])
    except ClientError as exc:
        if is_conflict(exc):
            return None
        raise


def probe_conditional_writes(client: Any, bucket: Bucket, endpoint: str = "S3") -> None:
    """Raise ``ConditionalWritesUnsupported`` with a clear message unless conditional PUTs work."""
    key = bucket.key("probe", f"{uuid.uuid4().hex}.txt")
    where = f"{endpoint} bucket {bucket.name!r}"
    failures: list[str] = []
    try:
        first = _put(client, bucket, key, b"probe 1", IfNoneMatch="*")
        if first is None:
            raise ConditionalWritesUnsupported(f"{where}: creating a fresh probe object with If-None-Match: * failed")
        if _put(client, bucket, key, b"probe 2", IfNoneMatch="*") is not None:
            failures.append("If-None-Match: * replaced an existing object")
        if _put(client, bucket, key, b"probe 3", IfMatch='"00000000000000000000000000000000"') is not None:
            failures.append("If-Match with a wrong ETag replaced the object")
        current = client.head_object(Bucket=bucket.name, Key=key)["ETag"]
        second = _put(client, bucket, key, b"probe 4", IfMatch=current)
        if second is None:
            failures.append("If-Match with the current ETag was refused")
        elif _put(client, bucket, key, b"probe 5", IfMatch=current) is not None:
            failures.append("If-Match with a stale ETag replaced the object")
    except ClientError as exc:
        raise ConditionalWritesUnsupported(
            f"{where}: probe failed with HTTP {http_status(exc)} ({exc}); check the bucket, "
            "endpoint and credentials"
        ) from None
    except BotoCoreError as exc:
        raise ConditionalWritesUnsupported(f"{where}: cannot reach the service ({exc})") from None
    finally:
        try:
            client.delete_object(Bucket=bucket.name, Key=key)
        except Exception:
            pass
    if failures:
        raise ConditionalWritesUnsupported(
            f"{where} does not honour conditional writes ({'; '.join(failures)}). Refusing to start: "
            "without them two racing uploads could both succeed. Use Amazon S3 or a compatible "
            "service that implements If-Match / If-None-Match on PutObject."
        )
