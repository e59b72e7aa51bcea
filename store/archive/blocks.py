"""Raw deflate inflated block by block, telling where the decoder's state is fully known.

zlib's Python API inflates a stream but never says where its deflate blocks end. The
incremental validation (`store.archive.resume`) needs exactly that: at a block boundary
that falls on a byte boundary (no bits of the next byte consumed, not after the final
block) the decoder's whole state is the last 32 KiB it produced, so two streams
whose decoders stand at such points with equal windows decode equal bytes that follow
into equal output. zlib's ``inflate(Z_BLOCK)`` stops at each block boundary and reports
this in ``data_type`` (bits 0-5: bits left in the bit buffer, 64: the final block was
read, 128: at a block boundary, 256: inside a stored block or a length-distance copy).

zlib-ng's own ``zng_inflate`` is used (the one the ``zlib_ng`` package we inflate with
already carries, ~2x system zlib's speed on text), through ctypes; where its symbols
cannot be found, `available()` is False and callers validate the usual way.
"""

from __future__ import annotations

import ctypes
import mmap

from zlib_ng import zlib_ng

__all__ = ["WINDOW", "BlockInflater", "InflateFailed", "available"]

WINDOW = 1 << 15  # deflate's window: how far back a match may reach
_Z_OK, _Z_STREAM_END, _Z_BLOCK, _Z_BUF_ERROR = 0, 1, 5, -5
_AT_BOUNDARY, _FINAL_READ, _IN_COPY = 128, 64, 256
_PENDING_BITS = 63


Buffer = bytes | bytearray | mmap.mmap


def address(source: Buffer, held: object) -> int:
    """Where ``source``'s bytes start (``held``: its bytes object, or a ctypes array over it)."""
    if isinstance(source, bytes):
        return ctypes.cast(ctypes.c_char_p(source), ctypes.c_void_p).value or 0
    return ctypes.addressof(held)  # type: ignore[arg-type]


class InflateFailed(Exception):
    """The deflate data is corrupt, truncated, or the inflater could not be used."""


class _Stream(ctypes.Structure):
    # zng_stream of zlib-ng 2.x (zlib-ng.h): the native API's field types.
    _fields_ = [
        ("next_in", ctypes.c_void_p),
        ("avail_in", ctypes.c_uint32),
        ("total_in", ctypes.c_size_t),
        ("next_out", ctypes.c_void_p),
        ("avail_out", ctypes.c_uint32),
        ("total_out", ctypes.c_size_t),
        ("msg", ctypes.c_char_p),
        ("state", ctypes.c_void_p),
        ("zalloc", ctypes.c_void_p),
        ("zfree", ctypes.c_void_p),
        ("opaque", ctypes.c_void_p),
        ("data_type", ctypes.c_int),
        ("adler", ctypes.c_uint32),
        ("reserved", ctypes.c_ulong),
    ]


def _load() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL(zlib_ng.__file__)
        lib.zlibng_version.restype = ctypes.c_char_p
        if not lib.zlibng_version().startswith(b"2."):
            return None
        for name in ("zng_inflateInit2", "zng_inflate", "zng_inflateEnd", "zng_inflateSetDictionary"):
            getattr(lib, name).restype = ctypes.c_int32
        lib.zng_inflateInit2.argtypes = [ctypes.POINTER(_Stream), ctypes.c_int32]
        lib.zng_inflate.argtypes = [ctypes.POINTER(_Stream), ctypes.c_int32]
        lib.zng_inflateEnd.argtypes = [ctypes.POINTER(_Stream)]
        lib.zng_inflateSetDictionary.argtypes = [ctypes.POINTER(_Stream), ctypes.c_void_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return lib


_LIB = _load()


def available() -> bool:
    """Whether block-by-block inflation can be used here."""
    return _LIB is not None


class BlockInflater:
    """A raw deflate decoder over ``source`` (bytes, or a writable buffer such as a copy-on-write
    mmap) from ``offset``.

    ``window``: what the decoder has in its window at ``offset`` (the last 32 KiB before it),
    for a decoder started at a byte-aligned block boundary inside a stream.
    """

    def __init__(self, source: Buffer, offset: int, window: bytes = b"", out_size: int = 1 << 20) -> None:
        self._open = False
        if _LIB is None:
            raise InflateFailed("block-by-block inflation is not available")
        # Holds the buffer (and, for a writable one, an export of it) while the decoder points into it.
        self._source: object = source if isinstance(source, bytes) else (ctypes.c_char * len(source)).from_buffer(source)
        self._base = address(source, self._source)
        self._end = len(source)
        self._out = ctypes.create_string_buffer(out_size)
        self._out_size = out_size
        self._stream = _Stream()
        self.offset = offset
        self.finished = False
        self.at_boundary = False
        if _LIB.zng_inflateInit2(ctypes.byref(self._stream), -15) != _Z_OK:
            raise InflateFailed("the inflater could not start")
        self._open = True
        if window and _LIB.zng_inflateSetDictionary(ctypes.byref(self._stream), ctypes.c_char_p(window), len(window)) != _Z_OK:
            self.close()
            raise InflateFailed("the inflater did not take the window")

    def step(self) -> bytes:
        """Inflate until the next block boundary, the end of the stream or a full output buffer.

        Returns what it produced. Afterwards ``offset`` is where the input stands,
        ``at_boundary`` whether the decoder's state is only its window (byte-aligned block
        boundary, not after the final block), ``finished`` whether the stream ended.
        Raises `InflateFailed` on corrupt or truncated data.
        """
        stream = self._stream
        available_in = min(self._end - self.offset, 0xFFFFFFFF)
        stream.next_in = self._base + self.offset
        stream.avail_in = available_in
        stream.next_out = ctypes.addressof(self._out)
        stream.avail_out = self._out_size
        result = _LIB.zng_inflate(ctypes.byref(stream), _Z_BLOCK)  # type: ignore[union-attr]
        consumed = available_in - stream.avail_in
        produced = self._out_size - stream.avail_out
        self.offset += consumed
        if result == _Z_STREAM_END:
            self.finished = True
        elif result != _Z_OK and not (result == _Z_BUF_ERROR and (consumed or produced)):
            raise InflateFailed("the deflate data is corrupt or truncated")
        if not (consumed or produced or self.finished):
            raise InflateFailed("the deflate data is truncated")
        flags = stream.data_type
        self.at_boundary = (
            not self.finished
            and bool(flags & _AT_BOUNDARY)
            and not flags & (_FINAL_READ | _IN_COPY | _PENDING_BITS)
        )
        return ctypes.string_at(self._out, produced)

    def close(self) -> None:
        """Free the decoder and let go of the buffer (safe to call more than once)."""
        if self._open:
            self._open = False
            _LIB.zng_inflateEnd(ctypes.byref(self._stream))  # type: ignore[union-attr]
        self._source = None

    def __del__(self) -> None:
        self.close()
