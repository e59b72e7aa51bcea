"""Streaming intake of one upload: multipart parsing, hashing, counting, inspection, writing.

``UploadSink`` is fed the raw request body chunk by chunk (the route reads the ASGI
``receive`` channel itself, so nothing is buffered whole). The ``brain`` part goes
to the staged blob (sealed when encryption is on) while being hashed and inspected;
every other part is ignored. Memory: a small body (``WHOLE_BODY``) is held whole, a
larger one streams through a few buffers.

Inflating the gzip stream is most of an upload's CPU, and an archive's validity and
file count are properties of its bytes. So inspection waits, where it can, until the
checksum is known: an archive this brain already stores (current or snapshot,
validated when it was first uploaded) takes its file count from the metadata, and any
other archive is inspected to the end before the staged blob is committed. A first
archive, or one validated whole, is fsynced only once valid (such junk never costs a
disk flush); the successor of an archive validated before (`store.archive.resume`, a
connector's next write) has its flush started beside its validation, and the commit
still waits for `StagedBlob.finish`. Where the rest is inspected from:

* a small body (``WHOLE_BODY``, handed over at its end) keeps the archive bytes it
  carries in memory and inspects them from there, encrypted or not;
* a larger body on a plain staged file (local disk, no encryption) inspects its first
  ``EARLY_INSPECT`` bytes while streaming (garbage is still refused early) and the rest
  read back from the file;
* any other larger body is inspected while it streams: reading a sealed blob back would
  mean decrypting every byte a second time, which costs more than the re-upload
  shortcut saves.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import mmap
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio.to_thread
import multipart

from store.archive.inspect import STEP, ArchiveInspector, ArchiveRejected, InspectLimits
from store.archive.resume import ValidationMemos, inspect_against
from store.conditional import Preconditions
from store.errors import ServiceError
from store.sealed import ArchiveSealer
from store.settings import StoreSettings
from store.storage.base import ArchiveRef, StagedBlob, StorageBackend, StorageFull
from store.storage.local import is_disk_full

# Room for multipart framing and small extra fields beyond the archive itself.
BODY_SLACK = 1024 * 1024
# Archive bytes inspected while streaming when the rest can be inspected from the staged blob.
EARLY_INSPECT = 64 * 1024
# Read size when inspecting the rest of a staged plain archive.
REREAD_CHUNK = 256 * 1024
# Inflate step for an archive kept in memory: a few big steps instead of many small ones
# (each step gives up and retakes the GIL). Bounds the inflated bytes held at once.
KEPT_STEP = 1024 * 1024
# Archives validated against the brain's last one (store.archive.resume): smaller ones cost
# little to inspect whole; larger ones stream through the inspector (their memo would not fit
# STORE_VALIDATION_MEMO_MB's default anyway: ~1/8 of the tar's size).
MEMO_MIN_ARCHIVE = 256 * 1024
MEMO_MAX_ARCHIVE = 64 * 1024 * 1024


@dataclass
class StagedUpload:
    """An upload fully received and durable in a temporary blob, not yet committed."""

    blob: StagedBlob
    checksum: str
    size: int
    file_count: int
    sealed: bool


class UploadTarget(Protocol):
    """What an upload needs of the brain service (``BrainService`` is one).

    Declared here so the dependency runs one way: the service imports this module,
    never the reverse.
    """

    settings: StoreSettings
    backend: StorageBackend
    sealer: ArchiveSealer | None
    validation_memos: ValidationMemos

    def upload_room(self) -> int: ...

    def stored_archive(self, user_id: str, brain_id: str, checksum: str) -> ArchiveRef | None: ...

    def commit_upload(
        self, user_id: str, brain_id: str, staged: StagedUpload, cond: Preconditions, force: bool = False,
        by_owner: bool = True,
    ) -> ArchiveRef: ...


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


def _reason(exc: multipart.MultipartError) -> str:
    """The parser's sentence: a second argument (the UnicodeDecodeError of a header that is not
    UTF-8) would make ``str(exc)`` the repr of a tuple, Python's internals shown to the client."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)


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
        early_inspect: int | None = None,
        keep: bool = False,
    ) -> None:
        self.blob = blob
        self._writer = writer if writer is not None else blob.file
        self._sealed = writer is not None
        self._max_archive = max_archive
        self._max_body = max_archive + BODY_SLACK
        self._hash = hashlib.sha256()
        self._inspector = ArchiveInspector(inspect_limits, step=KEPT_STEP if keep else STEP)
        self._size = 0
        self._body = 0
        # keep: hold the archive bytes for inspect_rest, inspect nothing while streaming.
        # Else early_inspect None: inspect every byte while streaming; or only this many.
        self.kept: list[bytes] | None = [] if keep else None
        self._early = 0 if keep else early_inspect
        self._inspected = 0
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
            raise ServiceError(400, f"malformed multipart body: {_reason(exc)}") from None

    def feed_all(self, chunks: list[bytes]) -> None:
        """Process the next pieces of the request body, in order."""
        for chunk in chunks:
            self.feed(chunk)

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
            raise ServiceError(400, f"multipart body exceeds a limit: {_reason(exc)}") from None
        except multipart.MultipartError as exc:
            raise ServiceError(400, f"malformed multipart body: {_reason(exc)}") from None

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
            early = self._early
            if self.kept is not None:
                self.kept.append(event)
            elif early is None:
                self._inspect(event)
            elif self._inspected < early:
                part = event[: early - self._inspected]
                self._inspected += len(part)
                self._inspect(part)
            self._writer.write(event)

    def _inspect(self, data: Any) -> None:
        try:
            self._inspector.feed(data)
        except ArchiveRejected as exc:
            raise ServiceError(400, f"not a valid brain archive: {exc.message}") from None

    @property
    def size(self) -> int:
        """Archive bytes received so far."""
        return self._size

    @property
    def inspected_all(self) -> bool:
        """True when every archive byte went through the inspector."""
        return self._early is None or self._inspected >= self._size

    def inspect_rest(self, plaintext: Iterator[bytes]) -> None:
        """Feed the archive bytes after the early part (``plaintext`` yields the whole archive)."""
        skip = self._inspected
        for chunk in plaintext:
            if skip:
                if len(chunk) <= skip:
                    skip -= len(chunk)
                    continue
                chunk = chunk[skip:]
                skip = 0
            self._inspected += len(chunk)
            self._inspect(chunk)

    def end_body(self) -> str:
        """The body ended: check the multipart framing, close the seal; returns the checksum."""
        try:
            for event in self._parser.parse(b""):
                self._event(event)
            self._parser.close()
        except multipart.MultipartError as exc:
            raise ServiceError(400, f"incomplete multipart body: {_reason(exc)}") from None
        if not self._seen_brain:
            raise ServiceError(400, "no 'brain' file field in the upload")
        checksum = self._hash.hexdigest()
        if self._sealed:
            self._writer.close(checksum)
        return checksum

    def staged(self, checksum: str, file_count: int | None = None) -> StagedUpload:
        """The staged upload; ``file_count`` None: the inspector (fed every byte) decides."""
        if file_count is None:
            if not self.inspected_all:
                raise RuntimeError("the archive was not inspected to the end")
            try:
                file_count = self._inspector.finish().file_count
            except ArchiveRejected as exc:
                raise ServiceError(400, f"not a valid brain archive: {exc.message}") from None
        return StagedUpload(
            blob=self.blob,
            checksum=checksum,
            size=self._size,
            file_count=file_count,
            sealed=self._sealed,
        )


def staged_plaintext(blob: StagedBlob) -> Iterator[bytes]:
    """The archive bytes of a flushed plain (unsealed) staged blob, read back."""
    f = blob.reopen()
    try:
        yield from iter(lambda: f.read(REREAD_CHUNK), b"")
    finally:
        f.close()


@contextmanager
def staged_mapping(blob: StagedBlob) -> Iterator[mmap.mmap]:
    """The archive bytes of a flushed plain (unsealed) staged blob, mapped (the page cache's
    pages: validated in place, never copied into the process). Copy-on-write, so that ctypes
    may point into it; nothing writes to it."""
    with blob.reopen() as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    try:
        yield mapped
    finally:
        try:
            mapped.close()
        except BufferError:  # still pointed into (only after a failure): unmapped once let go
            pass


_early_flushes = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="store-early-fsync")


@contextmanager
def _flushing(blob: StagedBlob, early: bool) -> Iterator[None]:
    """With ``early``: fsync the staged (flushed) ``blob``'s file in another thread while the
    block runs, and wait for it at the end. The disk flush of an upload whose archive is
    validated against its brain's last one then overlaps that validation (~10 ms each at
    10,000 memories), where it used to follow it; durability is unchanged (the commit still
    waits for `StagedBlob.finish`, whose fsync then finds little left to write). Without
    ``early`` (a first upload, anything validated whole), nothing is flushed before the
    archive is known valid."""
    if not early or blob.file.closed:
        yield
        return
    flushed = _early_flushes.submit(os.fsync, blob.file.fileno())
    try:
        yield
    finally:
        try:
            flushed.result()
        except OSError:
            pass  # `finish` fsyncs again and reports it


@contextmanager
def _discarded_on_error(blob: StagedBlob) -> Iterator[None]:
    """Remove the staged ``blob`` if the block fails in any way; a full disk becomes a 507."""
    try:
        yield
    except OSError as exc:
        blob.discard()
        if is_disk_full(exc):
            raise ServiceError(507, "the store is out of disk space; nothing was changed") from None
        raise
    except BaseException:
        blob.discard()
        raise


def _checked(
    service: UploadTarget, sink: UploadSink, tail: list[bytes], user_id: str, brain_id: str
) -> StagedUpload:
    """Feed the last pieces of the body, close the multipart framing, validate the whole archive.

    CPU work only: the rest of the archive is inspected from memory (a small body) or read
    back from the page cache, before anything is fsynced, so an archive that fails
    validation never costs the disk a flush (except one validated against its brain's last
    archive, see `_flushing`). Consumes ``tail`` (emptied) and the sink's
    kept archive: the upload then waits for the disk without holding its body.
    """
    if sink.kept is not None and len(tail) > 1:
        tail[:] = [b"".join(tail)]  # one pass of the parser, the hash and the write
    sink.feed_all(tail)
    tail.clear()
    checksum = sink.end_body()
    file_count = None
    if not sink.inspected_all:
        known = service.stored_archive(user_id, brain_id, checksum)
        # These very bytes passed inspection before; else, validated against the brain's last archive.
        file_count = known.file_count if known is not None else _inspected_against_memo(service, sink, user_id, brain_id)
        if file_count is None and sink.kept is not None:
            sink.inspect_rest(iter(sink.kept))
        elif file_count is None:
            sink.blob.file.flush()
            sink.inspect_rest(staged_plaintext(sink.blob))
    if sink.kept is not None:
        sink.kept.clear()
    return sink.staged(checksum, file_count)


def _inspected_against_memo(service: UploadTarget, sink: UploadSink, user_id: str, brain_id: str) -> int | None:
    """The file count of the archive validated against what validating the brain's last one
    established (``store.archive.resume``: what is unchanged is not inflated again); None when
    that cannot decide (then the archive is inspected the usual way, which words any refusal)."""
    memos = service.validation_memos
    if not memos.enabled or not MEMO_MIN_ARCHIVE <= sink.size <= MEMO_MAX_ARCHIVE:
        return None
    memo = memos.get(user_id, brain_id)
    sink.blob.file.flush()
    # The successor of an archive validated before: its disk flush starts now, beside the
    # validation, instead of after it (`finish` still fsyncs before the commit).
    with _flushing(sink.blob, memo is not None):
        if sink.kept is not None:
            data = b"".join(sink.kept)
            inspected = inspect_against(data, service.settings.inspect_limits, memo) if len(data) == sink.size else None
        else:
            with staged_mapping(sink.blob) as mapped:
                inspected = inspect_against(mapped, service.settings.inspect_limits, memo) if len(mapped) == sink.size else None
    if inspected is None:
        return None
    if inspected.memo is not None:
        memos.put(user_id, brain_id, inspected.memo)
    return inspected.summary.file_count


def _durably_committed(
    service: UploadTarget, staged: StagedUpload, user_id: str, brain_id: str, cond: Preconditions, force: bool,
    before_commit: Callable[[], None] | None = None, by_owner: bool = True,
) -> ArchiveRef:
    """fsync the staged blob, call ``before_commit`` (it may refuse by raising), then commit
    (disk waits; the blob is committed or removed)."""
    with _discarded_on_error(staged.blob):
        staged.blob.finish()
        if before_commit is not None:
            before_commit()
    return service.commit_upload(user_id, brain_id, staged, cond, force, by_owner)


# Each hand-over of body bytes to a worker thread costs a wait for a CPU slot and GIL
# hand-offs, so a body of at most WHOLE_BODY bytes (by its Content-Length) is handed over
# once, at its end (one worker, 8 clients of 1 MiB: ~+15% uploads/s over 256 KiB
# batches), and its archive inspected from memory in KEPT_STEP steps (another ~+15%:
# no read-back, a few inflate calls instead of ~35). A larger body (or one without a
# length) streams in FEED_BATCH pieces, so an upload holds at most WHOLE_BODY in memory;
# uvicorn stops reading the socket meanwhile.
WHOLE_BODY = 2 * 1024 * 1024
FEED_BATCH = 256 * 1024
# Worker threads of one process doing uploads' CPU work (multipart, hashing, inflating, tar
# headers) at once. Only one of them runs Python at a time (the GIL), so more than this adds
# nothing but GIL hand-overs: with eight uploads in flight each upload cost ~660 futex calls.
# Waiting for the disk (fsync, commit) takes no slot.
MAX_UPLOAD_THREADS = 2
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


def upload_threads(configured: int, workers: int = 1) -> int:
    """Threads per process for uploads' CPU work: ``configured``, or if 0 the automatic choice.

    Automatic: the cores this process may run on, shared among the ``workers``, at most
    ``MAX_UPLOAD_THREADS``. Two workers on two cores get one each: more would only make the
    processes' threads take turns on the same cores (alternating runs, 8 clients of 1 MiB:
    one thread per worker won 14 of 18 rounds, by ~3-5%).
    """
    if configured > 0:
        return configured
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(MAX_UPLOAD_THREADS, cores // max(1, workers)))


def cpu_slots(threads: int) -> anyio.CapacityLimiter:
    """This event loop's limiter for uploads' CPU work, ``threads`` wide (see ``upload_threads``)."""
    loop = asyncio.get_running_loop()
    limiter = _slots.get(loop)
    if limiter is None:
        limiter = _slots[loop] = anyio.CapacityLimiter(upload_threads(threads))
    return limiter


class BodyReader:
    """The ASGI request body as a sequence of chunks; remembers whether it was read to the end."""

    def __init__(self, receive: Any) -> None:
        self._receive = receive
        self.done = False

    async def next_chunk(self) -> bytes:
        """The next piece of the body (b"" at the end); 400 if the client went away."""
        if self.done:
            return b""
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.done = True
            raise ServiceError(400, "client disconnected during upload")
        self.done = not message.get("more_body", False)
        return message.get("body", b"")  # type: ignore[no-any-return]

    async def drain(self, limit: int) -> None:
        """Read and discard the rest of the body (at most ``limit`` bytes)."""
        seen = 0
        try:
            while not self.done and seen <= limit:
                seen += len(await self.next_chunk())
        except ServiceError:
            pass


async def receive_upload(
    service: UploadTarget,
    body: BodyReader,
    boundary: str,
    content_length_header: str | None,
    user_id: str,
    brain_id: str,
    cond: Preconditions,
    force: bool,
    before_commit: Callable[[], None] | None = None,
    by_owner: bool = True,
) -> ArchiveRef:
    """Stream a multipart upload into a staged blob and commit it; raises ServiceError.

    ``by_owner`` False: the archive is written by an editor or through an agent key.

    ``before_commit`` (blocking, called in a worker thread once the body is received and
    durable, just before the commit) may refuse the commit by raising ServiceError: the
    caller's authorisation is checked again there, however long the body took.

    The body is read on the event loop and handed to a worker thread in batches:
    hashing, inflating and writing release the GIL, so concurrent uploads use every
    core while the loop keeps serving other requests. Memory: at most ``WHOLE_BODY`` per upload.
    """
    content_length = -1
    if content_length_header is not None:
        if not content_length_header.strip().isdigit():
            raise ServiceError(400, "invalid Content-Length")
        content_length = int(content_length_header)
    room = service.upload_room()
    if content_length > room + BODY_SLACK:
        raise ServiceError(413, "upload is larger than this store accepts")
    try:
        blob = service.backend.stage(user_id, brain_id)
    except StorageFull:
        raise ServiceError(507, "the store is out of disk space") from None
    whole = 0 <= content_length <= WHOLE_BODY
    batch_size = content_length if whole else FEED_BATCH
    pending: list[bytes] = []
    slots = cpu_slots(service.settings.upload_threads)
    with _discarded_on_error(blob):
        settings = service.settings
        writer = service.sealer.writer(blob.file, user_id, brain_id) if service.sealer else None
        sink = UploadSink(
            boundary,
            blob,
            max_archive=room,
            inspect_limits=settings.inspect_limits,
            writer=writer,
            content_length=content_length,
            early_inspect=EARLY_INSPECT if writer is None and blob.rereadable else None,
            keep=whole,
        )
        pending_size = 0
        # A batch is parsed, hashed and written while the next one is received (never two at
        # once: the sink is fed in order); the upload holds at most two batches.
        feeding: asyncio.Future[None] | None = None
        try:
            while not body.done:
                chunk = await body.next_chunk()
                if chunk:
                    pending.append(chunk)
                    pending_size += len(chunk)
                if pending_size >= batch_size and not body.done:
                    chunks, pending, pending_size = pending, [], 0
                    if feeding is not None:
                        await feeding
                    feeding = asyncio.ensure_future(anyio.to_thread.run_sync(sink.feed_all, chunks, limiter=slots))
            if feeding is not None:
                await feeding
        except BaseException:
            if feeding is not None and not feeding.done():
                # Its thread may still write to the blob: the blob goes only once it is done.
                await asyncio.wait([feeding])
            if feeding is not None and not feeding.cancelled():
                feeding.exception()  # retrieved: the first failure is what is raised
            raise
        staged = await anyio.to_thread.run_sync(_checked, service, sink, pending, user_id, brain_id, limiter=slots)
    return await anyio.to_thread.run_sync(_durably_committed, service, staged, user_id, brain_id, cond, force,
                                          before_commit, by_owner)
