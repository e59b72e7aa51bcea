"""Streaming intake of one upload: multipart parsing, hashing, counting, inspection, writing.

``UploadSink`` is fed the raw request body chunk by chunk (the route reads the ASGI
``receive`` channel itself, so nothing is buffered whole). The ``brain`` part goes
to the staged blob (sealed when encryption is on) while being hashed and inspected;
every other part is ignored. Memory stays at a few small buffers per upload.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import multipart

from store.archive.inspect import ArchiveInspector, ArchiveRejected, InspectLimits
from store.conditional import Preconditions
from store.errors import ServiceError
from store.storage.base import ArchiveRef, StagedBlob
from store.storage.local import is_disk_full

if TYPE_CHECKING:
    from store.service import BrainService

# Room for multipart framing and small extra fields beyond the archive itself.
BODY_SLACK = 1024 * 1024


@dataclass
class StagedUpload:
    """An upload fully received and durable in a temporary blob, not yet committed."""

    blob: StagedBlob
    checksum: str
    size: int
    file_count: int
    sealed: bool


def multipart_boundary(content_type: str | None) -> str:
    """The boundary of a ``multipart/form-data`` content type; 400 when there is none."""
    if not content_type:
        raise ServiceError(400, "expected a multipart/form-data body with a 'brain' file field")
    mime, options = multipart.parse_options_header(content_type)
    if mime.lower() != "multipart/form-data":
        raise ServiceError(400, "expected a multipart/form-data body with a 'brain' file field")
    boundary = options.get("boundary", "")
    if not boundary or len(boundary) > 200 or "\n" in boundary or "\r" in boundary:
        raise ServiceError(400, "multipart body without a valid boundary")
    return boundary


class UploadSink:
    """Consumes a multipart body; see the module doc."""

    def __init__(
        self,
        boundary: str,
        blob: StagedBlob,
        *,
        max_archive: int,
        inspect_limits: InspectLimits,
        writer: Any | None = None,
        content_length: int = -1,
    ) -> None:
        self.blob = blob
        self._writer = writer if writer is not None else blob.file
        self._sealed = writer is not None
        self._max_archive = max_archive
        self._max_body = max_archive + BODY_SLACK
        self._hash = hashlib.sha256()
        self._inspector = ArchiveInspector(inspect_limits)
        self._size = 0
        self._body = 0
        self._in_brain = False
        self._seen_brain = False
        try:
            self._parser = multipart.PushMultipartParser(
                boundary,
                content_length=content_length,
                max_header_size=8192,
                max_header_count=16,
                max_segment_count=64,
            )
        except multipart.MultipartError as exc:
            raise ServiceError(400, f"malformed multipart body: {exc}") from None

    def feed(self, chunk: bytes) -> None:
        """Process the next piece of the request body."""
        if not chunk:
            return
        self._body += len(chunk)
        if self._body > self._max_body:
            raise ServiceError(413, "upload is larger than this store accepts")
        try:
            for event in self._parser.parse(chunk):
                self._event(event)
        except multipart.ParserLimitReached as exc:
            raise ServiceError(400, f"multipart body exceeds a limit: {exc}") from None
        except multipart.MultipartError as exc:
            raise ServiceError(400, f"malformed multipart body: {exc}") from None

    def _event(self, event: Any) -> None:
        if isinstance(event, multipart.MultipartSegment):
            # the field is identified by its name only; a filename of "brain" does not count
            if event.name == "brain":
                if self._seen_brain:
                    raise ServiceError(400, "exactly one 'brain' field is allowed")
                self._seen_brain = True
                self._in_brain = True
            else:
                self._in_brain = False
        elif event is None:
            self._in_brain = False
        elif self._in_brain:
            self._size += len(event)
            if self._size > self._max_archive:
                raise ServiceError(413, "archive is larger than this store accepts")
            self._hash.update(event)
            try:
                self._inspector.feed(event)
            except ArchiveRejected as exc:
                raise ServiceError(400, f"not a valid brain archive: {exc.message}") from None
            self._writer.write(event)

    def finish(self) -> StagedUpload:
        """The body ended: check completeness and validity, seal, return the staged upload.

        The caller must still call ``blob.finish()`` (fsync, blocking) before committing.
        """
        try:
            for event in self._parser.parse(b""):
                self._event(event)
            self._parser.close()
        except multipart.MultipartError as exc:
            raise ServiceError(400, f"incomplete multipart body: {exc}") from None
        if not self._seen_brain:
            raise ServiceError(400, "no 'brain' file field in the upload")
        try:
            summary = self._inspector.finish()
        except ArchiveRejected as exc:
            raise ServiceError(400, f"not a valid brain archive: {exc.message}") from None
        checksum = self._hash.hexdigest()
        if self._sealed:
            self._writer.close(checksum)
        return StagedUpload(
            blob=self.blob,
            checksum=checksum,
            size=self._size,
            file_count=summary.file_count,
            sealed=self._sealed,
        )


def complete_upload(
    service: BrainService, sink: UploadSink, tail: bytes, user_id: str, brain_id: str,
    cond: Preconditions, force: bool,
) -> ArchiveRef:
    """Feed the last bytes, validate, fsync and commit (blocking; one worker-thread hop).

    The staged blob is always removed or committed, whatever happens.
    """
    blob = sink.blob
    try:
        sink.feed(tail)
        staged = sink.finish()
        blob.finish()
    except OSError as exc:
        blob.discard()
        if is_disk_full(exc):
            raise ServiceError(507, "the store is out of disk space; nothing was changed") from None
        raise
    except BaseException:
        blob.discard()
        raise
    return service.commit_upload(user_id, brain_id, staged, cond, force)
