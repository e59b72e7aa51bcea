"""Encryption at rest: streaming AES-256-GCM bound to user, brain and checksum.

Format of a sealed file (all integers big-endian)::

    header  = MAGIC (8) | version (1) | chunk_size (4) | key_id (8) | salt (16)     -- 37 bytes
    chunk i = AES-256-GCM(file_key, nonce_i, plaintext_i, aad_i) (ciphertext + 16-byte tag)

* ``file_key`` and a 7-byte nonce prefix come from HKDF-SHA256 of the per-user key
  and the random salt, so every file has its own key and nonces never repeat.
* ``nonce_i = prefix (7) | i (4) | last (1)``: chunks cannot be reordered, duplicated,
  dropped or moved between files, and a file cut at a chunk boundary is detected
  because its last chunk does not carry the ``last`` flag.
* ``aad_i`` covers the header, the user id and the brain id; the final chunk's also
  covers the archive checksum. A sealed file therefore opens only as the archive
  of that user's brain with that checksum: swapping files between brains, users or
  versions is detected.
* Every chunk but the last holds exactly ``chunk_size`` plaintext bytes; the last
  holds 0..chunk_size (0 only for an empty plaintext). The layout follows from the
  file size alone, so the reader authenticates the final chunk (and with it the
  binding) before yielding any plaintext.
* ``key_id`` (a hash of the per-user key) tells which of several master keys sealed
  the file, so the store can keep serving while ``rekey`` re-seals with a new one.

A plaintext archive starts with the gzip magic ``1f 8b``; a sealed one with
:data:`MAGIC`. :func:`is_sealed` tells them apart, so a file that should be sealed
and is not can be refused instead of served.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "CHUNK_SIZE",
    "HEADER_SIZE",
    "MAGIC",
    "SealError",
    "SealWriter",
    "derive_user_key",
    "is_sealed",
    "key_id",
    "open_sealed",
    "plaintext_length",
    "read_key_id",
    "reseal",
    "sealed_length",
]

MAGIC = b"BSTSEAL\x00"
VERSION = 1
CHUNK_SIZE = 64 * 1024
TAG_SIZE = 16
_HEADER = struct.Struct(">8sBI8s16s")
HEADER_SIZE = _HEADER.size  # 37
_MIN_CHUNK = 1024
_MAX_CHUNK = 16 * 1024 * 1024
_MAX_CHUNKS = 1 << 32  # the counter is 4 bytes


class SealError(Exception):
    """A sealed file cannot be opened: wrong key, wrong binding, tampered, truncated or not sealed."""


def derive_user_key(master: bytes, user_id: str) -> bytes:
    """The 32-byte key sealing ``user_id``'s files, derived from the master key (HKDF-SHA256)."""
    _check_key(master, "master key")
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"brain-store/user-key/v1", info=user_id.encode("utf-8")
    ).derive(master)


def key_id(key: bytes) -> bytes:
    """Public 8-byte identifier of a (per-user) key, written in each sealed file's header."""
    return hashlib.sha256(b"brain-store/key-id/v1\x00" + key).digest()[:8]


def is_sealed(first_bytes: bytes) -> bool:
    """True when a file beginning with ``first_bytes`` (8 bytes suffice) is in the sealed format."""
    return bytes(first_bytes[: len(MAGIC)]) == MAGIC


def read_key_id(first_bytes: bytes) -> bytes | None:
    """The key id in a sealed file's header (``HEADER_SIZE`` bytes), or None if not sealed."""
    if len(first_bytes) < HEADER_SIZE or not is_sealed(first_bytes):
        return None
    return _HEADER.unpack_from(first_bytes)[3]


def sealed_length(plain_length: int, chunk_size: int = CHUNK_SIZE) -> int:
    """Size of the sealed file for a plaintext of ``plain_length`` bytes."""
    chunks = max(1, -(-plain_length // chunk_size))
    return HEADER_SIZE + plain_length + chunks * TAG_SIZE


def plaintext_length(sealed_size: int, chunk_size: int = CHUNK_SIZE) -> int:
    """Plaintext size of a well-formed sealed file of ``sealed_size`` bytes (raises SealError)."""
    full, last = _layout(sealed_size, chunk_size)
    return full * chunk_size + last


class SealWriter:
    """Seal a stream into ``out``: ``write(chunk)`` any number of times, then ``close(checksum)``.

    ``key`` is the per-user key (:func:`derive_user_key`). Memory holds at most one
    chunk plus the piece being written. ``close`` writes the final chunk, bound to
    ``checksum`` (the archive's lowercase hex SHA-256); it does not close or fsync
    ``out``, which stays the caller's.
    """

    def __init__(
        self, out: BinaryIO, key: bytes, user_id: str, brain_id: str, *, chunk_size: int = CHUNK_SIZE
    ) -> None:
        _check_key(key, "key")
        if not _MIN_CHUNK <= chunk_size <= _MAX_CHUNK:
            raise ValueError(f"chunk_size must be between {_MIN_CHUNK} and {_MAX_CHUNK}")
        self._out = out
        self._chunk = chunk_size
        salt = os.urandom(16)
        self._header = _HEADER.pack(MAGIC, VERSION, chunk_size, key_id(key), salt)
        self._aead, self._prefix = _file_cipher(key, salt)
        self._aad = _aad(self._header, user_id, brain_id)
        self._buffer = bytearray()
        self._index = 0
        self._closed = False
        self.bytes_written = 0
        _write_all(out, self._header)
        self.bytes_written += HEADER_SIZE

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Add plaintext; full chunks are encrypted and written as soon as more data follows them."""
        if self._closed:
            raise ValueError("SealWriter is closed")
        self._buffer += data
        size = self._chunk
        # Keep the last (possibly full) chunk buffered: only close() knows which one is final.
        if len(self._buffer) > size:
            view = memoryview(self._buffer)
            start = 0
            try:
                while len(self._buffer) - start > size:
                    self._emit(view[start : start + size], final=False, checksum="")
                    start += size
            finally:
                view.release()
            del self._buffer[:start]

    def close(self, checksum: str) -> None:
        """Write the final chunk, binding the whole file to ``checksum``."""
        if self._closed:
            raise ValueError("SealWriter is closed")
        self._emit(bytes(self._buffer), final=True, checksum=checksum)
        self._buffer = bytearray()
        self._closed = True

    def _emit(self, plain: bytes | memoryview, *, final: bool, checksum: str) -> None:
        if self._index >= _MAX_CHUNKS - 1 and not final:
            raise ValueError("plaintext too large for the sealed format")
        nonce = _nonce(self._prefix, self._index, final)
        sealed = self._aead.encrypt(nonce, plain, _final_aad(self._aad, checksum) if final else self._aad)
        _write_all(self._out, sealed)
        self.bytes_written += len(sealed)
        self._index += 1


def open_sealed(
    f: BinaryIO, key: bytes | Sequence[bytes], user_id: str, brain_id: str, checksum: str
) -> Iterator[bytes]:
    """Plaintext chunks of the sealed file ``f`` (seekable, sealed file starting at its current position).

    ``key`` is the per-user key, or several candidates (e.g. derived from the current and
    previous master keys): the one whose id is in the header is used. A generator: on the
    first ``next()`` it reads the header and authenticates the final chunk - key, user,
    brain, checksum and length - and raises :class:`SealError` *before yielding anything*
    if any of it does not match. A chunk damaged in the middle raises :class:`SealError`
    when reached.
    """
    base = f.tell()
    header = f.read(HEADER_SIZE)
    if not is_sealed(header):
        raise SealError("the file is not sealed")
    if len(header) < HEADER_SIZE:
        raise SealError("the sealed file is truncated (incomplete header)")
    _, version, chunk_size, stored_id, salt = _HEADER.unpack(header)
    if version != VERSION:
        raise SealError(f"unsupported sealed format version {version}")
    if not _MIN_CHUNK <= chunk_size <= _MAX_CHUNK:
        raise SealError("the sealed file's header is corrupt (chunk size)")
    user_key = _pick_key(key, stored_id)
    aead, prefix = _file_cipher(user_key, salt)
    aad = _aad(header, user_id, brain_id)

    end = f.seek(0, os.SEEK_END)
    full, last_len = _layout(end - base, chunk_size)
    stride = chunk_size + TAG_SIZE
    f.seek(base + HEADER_SIZE + full * stride)
    sealed_last = f.read(last_len + TAG_SIZE)
    if len(sealed_last) != last_len + TAG_SIZE:
        raise SealError("the sealed file changed while being read")
    try:
        final_plain = aead.decrypt(_nonce(prefix, full, True), sealed_last, _final_aad(aad, checksum))
    except InvalidTag:
        raise SealError(
            "the sealed file does not open as this brain's archive (wrong key, user, brain or checksum, "
            "or it was truncated or tampered with)"
        ) from None

    f.seek(base + HEADER_SIZE)
    for index in range(full):
        sealed = f.read(stride)
        if len(sealed) != stride:
            raise SealError("the sealed file is truncated")
        try:
            yield aead.decrypt(_nonce(prefix, index, False), sealed, aad)
        except InvalidTag:
            raise SealError(f"the sealed file is damaged (chunk {index})") from None
    if final_plain:
        yield final_plain


def reseal(
    src: BinaryIO,
    dst: BinaryIO,
    *,
    old_key: bytes | Sequence[bytes] | None,
    new_key: bytes | None,
    user_id: str,
    brain_id: str,
    checksum: str,
    chunk_size: int = CHUNK_SIZE,
) -> int:
    """Copy one archive from ``src`` to ``dst`` changing its protection; return bytes written.

    ``old_key`` None means ``src`` is a plaintext archive (refused if it is sealed);
    ``new_key`` None writes plaintext. Either way the plaintext's SHA-256 must equal
    ``checksum``, so a rekey can never bind the wrong bytes to a checksum. Raises
    :class:`SealError` on any mismatch; ``dst`` is then incomplete and must be discarded.
    """
    if old_key is None:
        head = src.read(len(MAGIC))
        if is_sealed(head):
            raise SealError("the source is sealed but no key was given to open it")
        chunks: Iterator[bytes] = _chain_head(head, src, chunk_size)
    else:
        chunks = open_sealed(src, old_key, user_id, brain_id, checksum)
    digest = hashlib.sha256()
    writer = SealWriter(dst, new_key, user_id, brain_id, chunk_size=chunk_size) if new_key is not None else None
    written = 0
    for chunk in chunks:
        digest.update(chunk)
        if writer is not None:
            writer.write(chunk)
        else:
            dst.write(chunk)
            written += len(chunk)
    if not hmac.compare_digest(digest.hexdigest(), checksum.lower()):
        raise SealError("the archive's content does not match its checksum")
    if writer is not None:
        writer.close(checksum)
        written = writer.bytes_written
    return written


def _write_all(out: BinaryIO, data: bytes) -> None:
    # A raw (unbuffered) file may write less than asked; buffered ones write everything.
    written = out.write(data)
    if written is None or written >= len(data):
        return
    view = memoryview(data)
    while written < len(data):
        step = out.write(view[written:])
        if not step:
            raise OSError("short write while sealing")
        written += step


def _chain_head(head: bytes, src: BinaryIO, size: int) -> Iterator[bytes]:
    if head:
        yield head
    while chunk := src.read(size):
        yield chunk


def _check_key(key: bytes, what: str) -> None:
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        raise ValueError(f"{what} must be 32 bytes")


def _pick_key(key: bytes | Sequence[bytes], stored_id: bytes) -> bytes:
    candidates = [key] if isinstance(key, (bytes, bytearray)) else list(key)
    for candidate in candidates:
        _check_key(candidate, "key")
        if hmac.compare_digest(key_id(candidate), stored_id):
            return bytes(candidate)
    raise SealError("the file was sealed with a key that is not configured")


def _file_cipher(user_key: bytes, salt: bytes) -> tuple[AESGCM, bytes]:
    material = HKDF(algorithm=hashes.SHA256(), length=39, salt=salt, info=b"brain-store/file-key/v1").derive(user_key)
    return AESGCM(material[:32]), material[32:]


def _nonce(prefix: bytes, index: int, final: bool) -> bytes:
    return prefix + index.to_bytes(4, "big") + (b"\x01" if final else b"\x00")


def _field(value: str) -> bytes:
    raw = value.encode("utf-8")
    return len(raw).to_bytes(4, "big") + raw


def _aad(header: bytes, user_id: str, brain_id: str) -> bytes:
    # Brain ids are UUIDs; lower-case so the binding does not depend on the client's spelling.
    return b"brain-store/seal/v1\x00" + header + _field(user_id) + _field(brain_id.lower())


def _final_aad(aad: bytes, checksum: str) -> bytes:
    return aad + b"final\x00" + _field(checksum.lower())


def _layout(body_and_header: int, chunk_size: int) -> tuple[int, int]:
    """(number of full chunks before the final one, final chunk's plaintext length)."""
    body = body_and_header - HEADER_SIZE
    if body < TAG_SIZE:
        raise SealError("the sealed file is truncated")
    full, last = divmod(body - TAG_SIZE, chunk_size + TAG_SIZE)
    if last > chunk_size:
        raise SealError("the sealed file has an impossible length (truncated or padded)")
    if full >= _MAX_CHUNKS:
        raise SealError("the sealed file is too large")
    return full, last
