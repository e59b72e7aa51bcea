"""Blobs on S3 seen as files: a staged upload (local spool + one S3 upload) and a streaming reader."""

from __future__ import annotations

import io
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, BinaryIO

from botocore.exceptions import ClientError

from store.storage.base import BlobMissing
from common.s3client import is_not_found
from store.storage.s3client import PositionedReader, upload_file

log = logging.getLogger("store.s3")

READ_BUFFER = 1024 * 1024
# Blob uploads to S3 at once per process: each holds botocore's signing and send buffers,
# so this bounds the memory of many concurrent commits (the rest wait their turn).
UPLOAD_SLOTS = threading.BoundedSemaphore(2)


class S3StagedBlob:
    """An upload received into an anonymous local spool file, sent to S3 once at commit.

    The spool is unlinked from the start, so a crashed process leaves nothing on disk.
    ``upload(key)`` streams the spool to its final, unique, content-addressed key; until
    metadata names that key the object is invisible, and ``discard`` removes it again
    when the commit did not happen.
    """

    rereadable = False  # an anonymous spool: inspected while it streams

    def reopen(self) -> BinaryIO:
        """Not supported (see ``rereadable``)."""
        raise NotImplementedError("an S3 staged blob is not read back")

    def __init__(self, client: Any, bucket: str, spool_dir: Path) -> None:
        self._client = client
        self._bucket = bucket
        self._file: BinaryIO = tempfile.TemporaryFile(dir=spool_dir, buffering=1024 * 1024)  # noqa: SIM115
        self.key: str | None = None
        self.committed = False

    @property
    def file(self) -> BinaryIO:
        """The spool file, open for writing."""
        return self._file

    def finish(self) -> None:
        """Flush the spool (S3 gives durability once the object is uploaded)."""
        if not self._file.closed:
            self._file.flush()

    def size(self) -> int:
        """Bytes written to the spool."""
        self._file.flush()
        return os.fstat(self._file.fileno()).st_size

    def upload(self, key: str) -> str:
        """Send the spool to ``key`` (once; later calls return the key already used)."""
        if self.key is None:
            with UPLOAD_SLOTS:
                upload_file(self._client, self._bucket, key, self._file, self.size())
            self.key = key
        return self.key

    def discard(self) -> None:
        """Close the spool and remove an uploaded but uncommitted object (idempotent)."""
        if not self._file.closed:
            try:
                self._file.close()
            except OSError:
                pass
        if self.key is not None and not self.committed:
            key, self.key = self.key, None
            try:
                self._client.delete_object(Bucket=self._bucket, Key=key)
            except Exception as exc:  # the start-up sweep removes it later
                log.warning("could not remove an uncommitted upload object: %s", exc)

    def __del__(self) -> None:
        try:
            if not self._file.closed:
                self._file.close()
        except Exception:
            pass


class S3Reader(PositionedReader):
    """A read-only, seekable view of one immutable S3 object, streamed in ranges.

    Sequential reads use one GET; a seek drops the open body and the next read
    starts a ranged GET at the new position (sealed archives read their last chunk
    first, then the rest in order).
    """

    def __init__(self, client: Any, bucket: str, key: str, checksum: str) -> None:
        self._client = client
        self._bucket = bucket
        self._key = key
        self._checksum = checksum
        self._pos = 0
        try:
            reply = client.get_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if is_not_found(exc):
                raise BlobMissing(checksum) from None
            raise
        self._body: Any = reply["Body"]
        self._size = int(reply["ContentLength"])

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        target = max(0, base + offset)
        if target != self._pos:
            self._drop_body()
            self._pos = target
        return self._pos

    def _drop_body(self) -> None:
        if self._body is not None:
            try:
                self._body.close()
            except Exception:
                pass
            self._body = None

    def readinto(self, buffer: Any) -> int:
        if self._pos >= self._size or len(buffer) == 0:
            return 0
        if self._body is None:
            try:
                reply = self._client.get_object(
                    Bucket=self._bucket, Key=self._key, Range=f"bytes={self._pos}-{self._size - 1}"
                )
            except ClientError as exc:
                if is_not_found(exc):
                    raise BlobMissing(self._checksum) from None
                raise
            self._body = reply["Body"]
        data = self._body.read(min(len(buffer), self._size - self._pos))
        if not data:
            raise OSError("S3 object ended before its recorded size")
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        self._drop_body()
        super().close()


def open_reader(client: Any, bucket: str, key: str, checksum: str) -> io.BufferedReader:
    """A buffered, seekable reader of a blob (``peek`` works); raises ``BlobMissing``."""
    return io.BufferedReader(S3Reader(client, bucket, key, checksum), buffer_size=READ_BUFFER)
