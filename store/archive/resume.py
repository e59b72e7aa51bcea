"""Validating an archive against one validated before: only what changed is inflated and parsed.

A write to a brain changes a few files; the connector packs the brain so that most of the
archive's compressed bytes stay as they were (`connector/engine/format/archive.py`). Each
validation of an archive of the simple shape (one gzip member without optional fields,
nothing after it) leaves a `ValidationMemo`: checkpoints at byte-aligned deflate block
boundaries, each with the decoder's window (its whole state there, see `blocks`) and the
tar parser's position, and for each stretch between two checkpoints the SHA-256 of its
compressed bytes and what inflating and parsing it gave (tar bytes, CRC-32, files,
entries, headers).

Validating the next archive inflates it from the start; wherever its decoder stands at
such a boundary with a checkpoint's first compressed bytes ahead, the checkpoint's window
and the tar parser's position equal to the checkpoint's, the state of both is exactly the
one the earlier validation had there. Then each following stretch whose compressed bytes
hash equal to the memo's decodes to the same tar bytes and is parsed the same way: it is
taken from the memo without being inflated. At the first stretch that differs the
decoder starts again from that checkpoint's window. Nothing is trusted but equality of
bytes (SHA-256) and of states: a hostile entry in an otherwise unchanged archive changes
compressed bytes, and what changed is inflated and checked in full.

The limits still hold for the whole: entries, headers and inflated bytes are counted over
the archive and checked at the end (they only grow), the CRC-32 and length in the gzip
trailer are checked against the whole tar stream, and the ratio of tar bytes to compressed
bytes is held after every step, for a stretch taken from the memo through the worst point
it had (`_Span.excess`). Any doubt (another shape, corrupt data, a limit reached, a
refused entry) returns None: the caller then validates the whole archive the usual way,
which decides and words the refusal.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

from zlib_ng import zlib_ng

from store.archive.blocks import WINDOW, BlockInflater, Buffer, InflateFailed, available
from store.archive.inspect import _T_DATA, ArchiveRejected, ArchiveSummary, InspectLimits, _TarParser

__all__ = ["Inspected", "ValidationMemo", "ValidationMemos", "inspect_against"]

log = logging.getLogger("store")

# Tar bytes at least between two checkpoints: each holds a 32 KiB window, so ~5 MiB of
# memo for a 10,000-memory brain (41 MB of tar); after a change, at most about this much
# that did not change is inflated again before the next checkpoint.
CHECKPOINT_GAP = 256 * 1024
# Compressed bytes after a checkpoint that name it.
_KEY = 32
# Archives inflating to less than this keep no memo: validating them whole is cheap.
MIN_MEMO_INFLATED = 4 << 20
# Bytes a decoder may have read ahead of what it produced (zlib-ng reads up to 8 at once):
# the ratio check counts this much less compressed input than was consumed.
_LOOKAHEAD = 64
_GZIP_HEADER = 10
# Tar bytes handed to the parser at once (between checkpoints).
_PARSE_BATCH = 1 << 20
_GZIP_TRAILER = 8


@dataclass(frozen=True)
class _Checkpoint:
    key: bytes  # the compressed bytes that follow it
    window: bytes  # the last WINDOW tar bytes before it: the decoder's whole state there
    tar: tuple[object, ...]  # the tar parser's position there


@dataclass(frozen=True)
class _Span:
    """From one checkpoint to the next."""

    digest: bytes  # SHA-256 of its compressed bytes
    length: int  # compressed bytes
    inflated: int  # tar bytes
    crc: int  # CRC-32 of them
    counters: tuple[int, int, int]  # files, entries, tar headers
    excess: int  # max over its steps of (tar bytes - max_ratio * (compressed bytes - _LOOKAHEAD)) from its start


@dataclass(frozen=True)
class ValidationMemo:
    """What validating one archive established, for validating the next one (see the module doc)."""

    limits: InspectLimits
    checkpoints: list[_Checkpoint]
    spans: list[_Span]  # spans[i] leads from checkpoints[i] to checkpoints[i + 1]
    keys: dict[bytes, list[int]]

    @property
    def held_bytes(self) -> int:
        """Memory it holds, roughly (its windows; a window it shares with another memo counts in both)."""
        return len(self.checkpoints) * (WINDOW + 200) + len(self.spans) * 150


@dataclass(frozen=True)
class Inspected:
    """A valid archive's summary, the memo for the next one (None when too small), and how many
    compressed bytes were taken from the previous memo without being inflated."""

    summary: ArchiveSummary
    memo: ValidationMemo | None
    reused: int


def inspect_against(data: Buffer, limits: InspectLimits, memo: ValidationMemo | None = None) -> Inspected | None:
    """Validate the whole archive ``data``, taking what equals ``memo``'s archive from the memo.

    ``data``: bytes, or a writable buffer (a copy-on-write mmap of a staged file: the page
    cache's pages, no copy). None: not of the simple shape, not valid, or any other doubt:
    validate it the usual way.
    """
    if not available() or len(data) < _GZIP_HEADER + _GZIP_TRAILER or data[:4] != b"\x1f\x8b\x08\x00":
        return None
    if memo is not None and memo.limits != limits:
        memo = None
    run = None
    try:
        run = _Run(data, limits, memo)
        return run.run()
    except (ArchiveRejected, InflateFailed):
        return None
    except Exception:  # noqa: BLE001 - a shortcut that fails must never fail the upload: validate it whole
        log.exception("validation against the last archive failed; validating the whole archive")
        return None
    finally:
        if run is not None:
            run.release()


class _Run:
    """One validation; see `inspect_against`."""

    def __init__(self, data: Buffer, limits: InspectLimits, memo: ValidationMemo | None) -> None:
        self.data = data
        self.view = memoryview(data)
        self.limits = limits
        self.memo = memo
        self.tar = _TarParser(limits)
        self.inflater = BlockInflater(data, _GZIP_HEADER)
        self.inflated = 0
        self.crc = 0  # of the tar bytes up to the last checkpoint
        self.unparsed: list[bytes] = []  # inflated, not yet handed to the parser
        self.unparsed_size = 0
        self.recent: list[bytes] = []  # the last tar bytes produced, at least WINDOW of them once there are
        self.recent_size = 0
        self.reused = 0
        # The memo being made, and the span since its last checkpoint.
        self.checkpoints: list[_Checkpoint] = []
        self.spans: list[_Span] = []
        self._start_span(_GZIP_HEADER)

    def release(self) -> None:
        """Let go of ``data`` (nothing keeps an export of it then: a mmap can be closed)."""
        self.inflater.close()
        self.view.release()

    def _start_span(self, offset: int) -> None:
        self.span_offset = offset
        self.span_inflated = self.inflated
        self.span_crc = 0
        self.span_counters = self.tar.counters
        self.span_excess = -(1 << 62)

    def run(self) -> Inspected | None:
        limits = self.limits
        ratio = limits.max_ratio
        inflater = self.inflater
        try:
            while not inflater.finished:
                before = inflater.offset
                out = inflater.step()
                if out:
                    self.inflated += len(out)
                    if self.inflated > limits.max_inflated:
                        return None
                    counted = max(0, before - _LOOKAHEAD)
                    if ratio and self.inflated > limits.ratio_floor and self.inflated > ratio * counted:
                        return None
                    self.span_excess = max(
                        self.span_excess,
                        self.inflated - self.span_inflated - ratio * (counted - self.span_offset),
                    )
                    self.span_crc = zlib_ng.crc32(out, self.span_crc)
                    self._remember(out)
                    self.unparsed.append(out)
                    self.unparsed_size += len(out)
                    if self.unparsed_size >= _PARSE_BATCH:
                        self._parse()
                if inflater.at_boundary and self.inflated >= WINDOW:
                    self._at_boundary()
                    inflater = self.inflater
        finally:
            self.inflater.close()
        return self._finish(inflater.offset)

    def _parse(self) -> None:
        """Hand the tar bytes inflated since the last time to the parser (in big pieces: it takes
        a header split between two pieces the slow way)."""
        if self.unparsed:
            self.tar.feed(self.unparsed[0] if len(self.unparsed) == 1 else b"".join(self.unparsed))
            self.unparsed, self.unparsed_size = [], 0

    def _remember(self, out: bytes) -> None:
        recent = self.recent
        recent.append(out)
        self.recent_size += len(out)
        while self.recent_size - len(recent[0]) >= WINDOW:
            self.recent_size -= len(recent.pop(0))

    def _window(self) -> bytes:
        if len(self.recent) == 1 and self.recent_size == WINDOW:
            return self.recent[0]
        return b"".join(self.recent)[-WINDOW:]

    def _at_boundary(self) -> None:
        """The decoder stands at a byte-aligned block boundary: take stretches from the memo, or
        make a checkpoint when the last one is far enough behind."""
        offset = self.inflater.offset
        key = bytes(self.view[offset : offset + _KEY])
        memo = self.memo
        if memo is not None and len(key) == _KEY:
            candidates = memo.keys.get(key)
            if candidates:
                self._parse()
                window = self._window()
                position = self.tar.position()
                for number in candidates:
                    point = memo.checkpoints[number]
                    if point.window == window and _alike(point.tar, position):
                        self._follow(memo, number, offset, position)
                        return
        if self.inflated - self.span_inflated >= CHECKPOINT_GAP or not self.checkpoints:
            self._parse()
            self._checkpoint(_Checkpoint(key, self._window(), self.tar.position()), offset)

    def _checkpoint(self, point: _Checkpoint, offset: int) -> None:
        """Record ``point`` at ``offset``, closing the span that led to it."""
        self._parse()
        if self.checkpoints:
            self.spans.append(_Span(
                hashlib.sha256(self.view[self.span_offset : offset]).digest(), offset - self.span_offset,
                self.inflated - self.span_inflated, self.span_crc,
                _minus(self.tar.counters, self.span_counters), self.span_excess,
            ))
        self.crc = zlib_ng.crc32_combine(self.crc, self.span_crc, self.inflated - self.span_inflated)
        self.checkpoints.append(point)
        self._start_span(offset)

    def _follow(self, memo: ValidationMemo, number: int, offset: int, position: tuple[object, ...]) -> None:
        """The decoder stands where ``memo``'s checkpoint ``number`` does, the parser at ``position``
        (`_alike` the checkpoint's): take every following span whose compressed bytes are the
        same, then inflate on from there."""
        point = memo.checkpoints[number]
        # Inside a file that grew or shrank the parser has more or fewer bytes to skip than
        # it had: a span lying inside that file's data in both is skipped all the same.
        shift = position[2] - point.tar[2]  # type: ignore[operator]
        self._checkpoint(point if not shift else _Checkpoint(point.key, point.window, position), offset)
        limits = self.limits
        counters = self.tar.counters
        taken = 0
        while number < len(memo.spans):
            span = memo.spans[number]
            end = offset + span.length
            if shift:
                left = memo.checkpoints[number].tar[2]
                if not (left > span.inflated and left + shift > span.inflated):  # type: ignore[operator]
                    break
            if end > len(self.data) or hashlib.sha256(self.view[offset:end]).digest() != span.digest:
                break
            if (
                limits.max_ratio
                and self.inflated + span.inflated > limits.ratio_floor
                and self.inflated + span.excess > limits.max_ratio * offset
            ):
                break  # inflate it: the ratio is then checked step by step
            offset = end
            self.inflated += span.inflated
            self.crc = zlib_ng.crc32_combine(self.crc, span.crc, span.inflated)
            counters = _plus(counters, span.counters)
            self.reused += span.length
            number += 1
            self.spans.append(span)
            point = memo.checkpoints[number]
            self.checkpoints.append(point if not shift else _Checkpoint(point.key, point.window, _shifted(point.tar, shift)))
            taken += 1
        if not taken:
            return  # the decoder goes on as it was
        if self.inflated > limits.max_inflated:
            raise InflateFailed("the archive inflates beyond the limit")
        point = memo.checkpoints[number]
        self.tar.resume(_shifted(point.tar, shift), counters)
        self.recent, self.recent_size = [point.window], len(point.window)
        self.inflater.close()
        self.inflater = BlockInflater(self.data, offset, point.window)
        self._start_span(offset)

    def _finish(self, offset: int) -> Inspected | None:
        self._parse()
        limits = self.limits
        crc = zlib_ng.crc32_combine(self.crc, self.span_crc, self.inflated - self.span_inflated)
        trailer = self.data[offset:]
        if len(trailer) != _GZIP_TRAILER:
            return None  # truncated, or more after the member (padding, members): the usual way
        if int.from_bytes(trailer[:4], "little") != crc or int.from_bytes(trailer[4:], "little") != self.inflated & 0xFFFFFFFF:
            return None
        if not self.inflated:
            return None
        self.tar.finish()
        files, entries, headers = self.tar.counters
        if entries > limits.max_entries or headers > 2 * limits.max_entries + 64:
            return None
        memo = None
        if self.inflated >= MIN_MEMO_INFLATED and self.checkpoints:
            keys: dict[bytes, list[int]] = {}
            for number, point in enumerate(self.checkpoints):
                keys.setdefault(point.key, []).append(number)
            memo = ValidationMemo(self.limits, self.checkpoints, self.spans, keys)
        return Inspected(ArchiveSummary(files, self.inflated, entries), memo, self.reused)


def _alike(held: tuple[object, ...], position: tuple[object, ...]) -> bool:
    """Whether a parser at ``position`` reads what follows as one at ``held`` did, at least until
    the end of the file whose data both are in: the same position, or both inside a file's
    data (not a metadata record's) with only the bytes left to skip different."""
    if held == position:
        return True
    return (
        held[0] == position[0] == _T_DATA and held[3] is None and position[3] is None
        and held[:2] == position[:2] and held[4:] == position[4:]
    )


def _shifted(position: tuple[object, ...], shift: int) -> tuple[object, ...]:
    """``position`` with ``shift`` more bytes to skip."""
    if not shift:
        return position
    return (*position[:2], position[2] + shift, *position[3:])  # type: ignore[operator]


def _plus(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def _minus(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    return a[0] - b[0], a[1] - b[1], a[2] - b[2]


class ValidationMemos:
    """The memo of the last archive validated for each brain, least recently used out beyond ``max_bytes``.

    Held per process: an upload that lands on another worker validates in full (and leaves
    a memo there). Thread-safe.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._held = 0
        self._memos: OrderedDict[tuple[str, str], ValidationMemo] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether memos are kept at all (a budget of 0 turns validation against them off)."""
        return self._max > 0

    def get(self, user_id: str, brain_id: str) -> ValidationMemo | None:
        """The memo kept for this brain, if any."""
        with self._lock:
            memo = self._memos.get((user_id, brain_id))
            if memo is not None:
                self._memos.move_to_end((user_id, brain_id))
            return memo

    def put(self, user_id: str, brain_id: str, memo: ValidationMemo | None) -> None:
        """Keep ``memo`` for this brain (None: forget the brain's)."""
        with self._lock:
            old = self._memos.pop((user_id, brain_id), None)
            if old is not None:
                self._held -= old.held_bytes
            if memo is None or memo.held_bytes > self._max:
                return
            self._memos[(user_id, brain_id)] = memo
            self._held += memo.held_bytes
            while self._held > self._max:
                _, dropped = self._memos.popitem(last=False)
                self._held -= dropped.held_bytes
