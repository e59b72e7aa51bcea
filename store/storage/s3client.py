"""The S3 side of the store's archives: the bucket and prefix, streamed object transfer.

The client and error classification both servers use live in ``common.s3client``.
Transfers stream between an S3 object and a local file in bounded pieces, so memory
does not grow with the archive size: uploads of large files use a multipart upload
whose parts are read from the file while they are sent.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

MIB = 1024 * 1024
# Files up to this size go up in one PutObject; larger ones as a multipart upload.
MULTIPART_THRESHOLD = 16 * MIB
PART_SIZE = 8 * MIB  # S3 needs >= 5 MiB per part except the last
COPY_CHUNK = 1 * MIB


@dataclass(frozen=True)
class Bucket:
    """Where the store lives: a bucket and a key prefix ("" or ending in "/")."""

    name: str
    prefix: str = ""

    @classmethod
    def of(cls, name: str, prefix: str) -> Bucket:
        """Normalise the prefix: no leading slash, exactly one trailing slash when not empty."""
        prefix = prefix.strip("/")
        return cls(name, f"{prefix}/" if prefix else "")

    def key(self, *parts: str) -> str:
        """The object key for path ``parts`` under the prefix."""
        return self.prefix + "/".join(parts)


class PositionedReader(io.RawIOBase):
    """A read-only, seekable raw stream that keeps its position in ``_pos`` (subclasses seek)."""

    _pos: int

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos


class FileSlice(PositionedReader):
    """A read-only, seekable window ``[start, start+length)`` of an open file (one upload part).

    botocore reads it in small blocks while sending, so a part never sits in memory whole.
    """

    def __init__(self, f: BinaryIO, start: int, length: int) -> None:
        self._fd = f.fileno()
        self._start = start
        self._length = length
        self._pos = 0

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._length}[whence]
        self._pos = max(0, min(self._length, base + offset))
        return self._pos

    def __len__(self) -> int:
        return self._length

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._length - self._pos)
        if want <= 0:
            return 0
        data = os.pread(self._fd, want, self._start + self._pos)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._length - self._pos
        size = min(size, self._length - self._pos)
        if size <= 0:
            return b""
        data = os.pread(self._fd, size, self._start + self._pos)
        self._pos += len(data)
        return data


def upload_file(client: Any, bucket: str, key: str, f: BinaryIO, size: int, *, create_only: bool = True) -> None:
    """Store ``size`` bytes of ``f`` (from offset 0) as object ``key``, streamed from the file.

    ``create_only`` adds ``If-None-Match: *`` to single-request uploads: blob keys are
    unique, so an existing object means something is badly wrong and must not be replaced.
    """
    if size <= MULTIPART_THRESHOLD:
        extra = {"IfNoneMatch": "*"} if create_only else {}
        client.put_object(Bucket=bucket, Key=key, Body=FileSlice(f, 0, size), ContentLength=size, **extra)
        return
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    try:
        parts = []
        offset, number = 0, 1
        while offset < size:
            length = min(PART_SIZE, size - offset)
            done = client.upload_part(
                Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number,
                Body=FileSlice(f, offset, length), ContentLength=length,
            )
            parts.append({"PartNumber": number, "ETag": done["ETag"]})
            offset += length
            number += 1
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})
    except BaseException:
        try:
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        except Exception:
            pass  # the start-up sweep aborts stale multipart uploads
        raise


def download_to(client: Any, bucket: str, key: str, out: BinaryIO) -> int:
    """Copy object ``key`` into ``out`` in bounded chunks; returns the byte count.

    Raises ``ClientError`` (e.g. NoSuchKey) before anything is written when the object is missing.
    """
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    total = 0
    try:
        while chunk := body.read(COPY_CHUNK):
            out.write(chunk)
            total += len(chunk)
    finally:
        body.close()
    return total
