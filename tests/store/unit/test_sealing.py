"""Encryption at rest: round trips, bindings, tampering, truncation, rekey."""

from __future__ import annotations

import hashlib
import io
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.storage.sealing import (
    CHUNK_SIZE,
    HEADER_SIZE,
    MAGIC,
    TAG_SIZE,
    SealError,
    SealWriter,
    derive_user_key,
    is_sealed,
    key_id,
    open_sealed,
    plaintext_length,
    read_key_id,
    reseal,
    sealed_length,
)

MASTER = bytes(range(32))
OTHER_MASTER = bytes(range(1, 33))
USER = "u-1f3a"
BRAIN = "6f1c2a7e-93a4-4c44-9d0e-2b5b0f3a9e10"
SMALL = 1024  # smallest chunk size: many chunks with little data


def checksum_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal(
    data: bytes,
    *,
    key: bytes | None = None,
    user: str = USER,
    brain: str = BRAIN,
    checksum: str | None = None,
    chunk_size: int = CHUNK_SIZE,
    piece: int = 10_000,
) -> bytes:
    out = io.BytesIO()
    writer = SealWriter(out, key or derive_user_key(MASTER, user), user, brain, chunk_size=chunk_size)
    for start in range(0, len(data), piece):
        writer.write(data[start : start + piece])
    writer.close(checksum if checksum is not None else checksum_of(data))
    return out.getvalue()


def unseal(
    sealed: bytes,
    *,
    key: bytes | list[bytes] | None = None,
    user: str = USER,
    brain: str = BRAIN,
    checksum: str | None = None,
    plain_for_checksum: bytes | None = None,
) -> bytes:
    if checksum is None:
        checksum = checksum_of(plain_for_checksum or b"")
    stream = open_sealed(io.BytesIO(sealed), key or derive_user_key(MASTER, user), user, brain, checksum)
    return b"".join(stream)


def first_chunk_or_error(sealed: bytes, checksum: str, **kwargs: object) -> None:
    stream = open_sealed(io.BytesIO(sealed), kwargs.get("key") or derive_user_key(MASTER, USER), kwargs.get("user", USER), kwargs.get("brain", BRAIN), checksum)  # type: ignore[arg-type]
    with pytest.raises(SealError):
        next(stream)


# ---------------------------------------------------------------- keys


def test_user_keys_are_distinct_and_deterministic() -> None:
    a = derive_user_key(MASTER, "alice")
    assert a == derive_user_key(MASTER, "alice")
    assert len(a) == 32
    assert a != derive_user_key(MASTER, "bob")
    assert a != derive_user_key(OTHER_MASTER, "alice")
    assert a != MASTER


@pytest.mark.parametrize("bad", [b"", b"short", bytes(31), bytes(33)])
def test_bad_master_key_refused(bad: bytes) -> None:
    with pytest.raises(ValueError):
        derive_user_key(bad, "alice")
    with pytest.raises(ValueError):
        SealWriter(io.BytesIO(), bad, USER, BRAIN)


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    "size",
    [0, 1, SMALL - 1, SMALL, SMALL + 1, 2 * SMALL, 2 * SMALL + 1, 7 * SMALL + 5, CHUNK_SIZE, CHUNK_SIZE + 1],
)
@pytest.mark.parametrize("piece", [1, 333, SMALL, 100_000])
def test_round_trip_at_chunk_boundaries(size: int, piece: int) -> None:
    if piece == 1 and size > 4 * SMALL:
        piece = 7  # byte-by-byte writes only for small sizes
    data = os.urandom(size)
    sealed = seal(data, chunk_size=SMALL, piece=piece)
    assert len(sealed) == sealed_length(size, SMALL)
    assert plaintext_length(len(sealed), SMALL) == size
    assert unseal(sealed, plain_for_checksum=data) == data


def test_round_trip_large_with_default_chunks() -> None:
    data = os.urandom(5 * 1024 * 1024 + 12345)
    sealed = seal(data, piece=1 << 20)
    assert len(sealed) == sealed_length(len(data))
    chunks = list(open_sealed(io.BytesIO(sealed), derive_user_key(MASTER, USER), USER, BRAIN, checksum_of(data)))
    assert all(len(c) == CHUNK_SIZE for c in chunks[:-1])
    assert b"".join(chunks) == data


def test_ciphertext_is_not_plaintext_and_differs_each_time() -> None:
    data = b"secret memory " * 1000
    a, b = seal(data), seal(data)
    assert a != b
    assert b"secret memory" not in a
    assert unseal(a, plain_for_checksum=data) == unseal(b, plain_for_checksum=data) == data


def test_reads_from_current_position() -> None:
    data = b"abc" * 5000
    f = io.BytesIO(b"PREFIX" + seal(data))
    f.seek(6)
    assert b"".join(open_sealed(f, derive_user_key(MASTER, USER), USER, BRAIN, checksum_of(data))) == data


def test_brain_id_case_does_not_matter_but_checksum_case_neither() -> None:
    data = b"x" * 3000
    sealed = seal(data, brain=BRAIN.upper())
    assert unseal(sealed, brain=BRAIN, checksum=checksum_of(data).upper()) == data


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=6000), st.integers(min_value=1, max_value=3000))
def test_round_trip_property(data: bytes, piece: int) -> None:
    sealed = seal(data, chunk_size=SMALL, piece=piece)
    assert unseal(sealed, plain_for_checksum=data) == data


# ---------------------------------------------------------------- bindings


DATA = os.urandom(5 * SMALL + 77)
SEALED = seal(DATA, chunk_size=SMALL)
SUM = checksum_of(DATA)


def test_wrong_user_brain_checksum_or_key_refused_before_any_plaintext() -> None:
    cases = [
        dict(user="someone-else", key=derive_user_key(MASTER, USER)),
        dict(brain="00000000-0000-0000-0000-000000000000"),
        dict(key=derive_user_key(OTHER_MASTER, USER)),
        dict(key=derive_user_key(MASTER, "someone-else")),
    ]
    for case in cases:
        first_chunk_or_error(SEALED, SUM, **case)
    first_chunk_or_error(SEALED, checksum_of(b"another version"))


def test_file_swapped_between_versions_or_brains_is_detected() -> None:
    other_version = os.urandom(len(DATA))
    sealed_other = seal(other_version, chunk_size=SMALL)
    first_chunk_or_error(sealed_other, SUM)  # the metadata says SUM; the file holds another version
    sealed_other_brain = seal(DATA, brain="11111111-2222-3333-4444-555555555555", chunk_size=SMALL)
    first_chunk_or_error(sealed_other_brain, SUM)


def test_user_key_mismatch_says_key_not_configured() -> None:
    stream = open_sealed(io.BytesIO(SEALED), derive_user_key(OTHER_MASTER, USER), USER, BRAIN, SUM)
    with pytest.raises(SealError, match="key"):
        next(stream)


def test_candidate_keys_pick_by_key_id() -> None:
    keys = [derive_user_key(OTHER_MASTER, USER), derive_user_key(MASTER, USER)]
    assert unseal(SEALED, key=keys, checksum=SUM) == DATA
    assert read_key_id(SEALED[:HEADER_SIZE]) == key_id(derive_user_key(MASTER, USER))
    assert read_key_id(b"\x1f\x8b" + bytes(60)) is None


# ---------------------------------------------------------------- tampering


def chunk_span(index: int) -> slice:
    start = HEADER_SIZE + index * (SMALL + TAG_SIZE)
    return slice(start, start + SMALL + TAG_SIZE)


def test_every_single_bit_flip_position_class_is_detected() -> None:
    positions = list(range(0, HEADER_SIZE)) + [
        HEADER_SIZE,  # first chunk ciphertext
        HEADER_SIZE + SMALL + 3,  # first chunk tag
        HEADER_SIZE + 2 * (SMALL + TAG_SIZE) + 100,  # middle chunk
        len(SEALED) - 1,  # final chunk tag
        len(SEALED) - TAG_SIZE - 5,  # final chunk ciphertext
    ]
    for position in positions:
        damaged = bytearray(SEALED)
        damaged[position] ^= 0x04
        with pytest.raises(SealError):
            unseal(bytes(damaged), checksum=SUM)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0), st.integers(min_value=1, max_value=255))
def test_random_byte_damage_is_detected(position: int, mask: int) -> None:
    damaged = bytearray(SEALED)
    damaged[position % len(damaged)] ^= mask
    with pytest.raises(SealError):
        unseal(bytes(damaged), checksum=SUM)


def test_truncation_anywhere_is_detected() -> None:
    for cut in [0, 5, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 10, chunk_span(1).start, chunk_span(3).stop, len(SEALED) - 1]:
        with pytest.raises(SealError):
            unseal(SEALED[:cut], checksum=SUM)


def test_dropping_whole_chunks_is_detected() -> None:
    without_middle = SEALED[: chunk_span(2).start] + SEALED[chunk_span(2).stop :]
    with pytest.raises(SealError):
        unseal(without_middle, checksum=SUM)
    without_final = SEALED[: chunk_span(5).start]  # cut exactly at a chunk boundary
    with pytest.raises(SealError):
        unseal(without_final, checksum=SUM)


def test_reordered_or_duplicated_chunks_are_detected() -> None:
    c1, c2 = SEALED[chunk_span(1)], SEALED[chunk_span(2)]
    swapped = bytearray(SEALED)
    swapped[chunk_span(1)] = c2
    swapped[chunk_span(2)] = c1
    with pytest.raises(SealError):
        unseal(bytes(swapped), checksum=SUM)
    duplicated = SEALED[: chunk_span(2).stop] + c2 + SEALED[chunk_span(2).stop :]
    with pytest.raises(SealError):
        unseal(duplicated, checksum=SUM)


def test_chunks_from_another_file_of_the_same_brain_are_detected() -> None:
    other = seal(DATA, chunk_size=SMALL)  # same plaintext, same binding, new salt
    mixed = bytearray(SEALED)
    mixed[chunk_span(1)] = other[chunk_span(1)]
    with pytest.raises(SealError):
        unseal(bytes(mixed), checksum=SUM)
    # The other file's final chunk on this file's body, and vice versa for headers.
    with pytest.raises(SealError):
        unseal(SEALED[: chunk_span(5).start] + other[chunk_span(5).start :], checksum=SUM)
    with pytest.raises(SealError):
        unseal(other[:HEADER_SIZE] + SEALED[HEADER_SIZE:], checksum=SUM)


def test_damaged_middle_chunk_fails_when_reached() -> None:
    damaged = bytearray(SEALED)
    damaged[chunk_span(3).start + 7] ^= 1
    stream = open_sealed(io.BytesIO(bytes(damaged)), derive_user_key(MASTER, USER), USER, BRAIN, SUM)
    got = [next(stream), next(stream), next(stream)]
    assert b"".join(got) == DATA[: 3 * SMALL]
    with pytest.raises(SealError, match="chunk 3"):
        next(stream)


# ---------------------------------------------------------------- unsealed files


def test_is_sealed_tells_formats_apart() -> None:
    assert is_sealed(SEALED)
    assert is_sealed(SEALED[:8])
    assert is_sealed(memoryview(SEALED)[:64])
    assert not is_sealed(b"\x1f\x8b\x08\x00" + bytes(60))
    assert not is_sealed(b"")
    assert not is_sealed(MAGIC[:7])


def test_unsealed_file_is_refused() -> None:
    plain = b"\x1f\x8b\x08\x00" + os.urandom(5000)
    stream = open_sealed(io.BytesIO(plain), derive_user_key(MASTER, USER), USER, BRAIN, checksum_of(plain))
    with pytest.raises(SealError, match="not sealed"):
        next(stream)


def test_unknown_version_and_bad_chunk_size_refused() -> None:
    for position, value in [(8, 2), (9, 0xFF)]:
        damaged = bytearray(SEALED)
        damaged[position] = value
        with pytest.raises(SealError):
            unseal(bytes(damaged), checksum=SUM)


# ---------------------------------------------------------------- rekey


def test_reseal_to_a_new_master_key() -> None:
    old, new = derive_user_key(MASTER, USER), derive_user_key(OTHER_MASTER, USER)
    out = io.BytesIO()
    written = reseal(io.BytesIO(SEALED), out, old_key=old, new_key=new, user_id=USER, brain_id=BRAIN, checksum=SUM)
    assert written == len(out.getvalue()) == sealed_length(len(DATA))
    assert read_key_id(out.getvalue()) == key_id(new)
    assert unseal(out.getvalue(), key=new, checksum=SUM) == DATA
    with pytest.raises(SealError):
        unseal(out.getvalue(), key=old, checksum=SUM)


def test_reseal_from_and_to_plaintext() -> None:
    key = derive_user_key(MASTER, USER)
    sealed = io.BytesIO()
    reseal(io.BytesIO(DATA), sealed, old_key=None, new_key=key, user_id=USER, brain_id=BRAIN, checksum=SUM)
    assert unseal(sealed.getvalue(), checksum=SUM) == DATA
    plain = io.BytesIO()
    reseal(io.BytesIO(sealed.getvalue()), plain, old_key=[key], new_key=None, user_id=USER, brain_id=BRAIN, checksum=SUM)
    assert plain.getvalue() == DATA


def test_reseal_refuses_wrong_checksum_and_sealed_source_without_key() -> None:
    key = derive_user_key(MASTER, USER)
    with pytest.raises(SealError, match="checksum"):
        reseal(io.BytesIO(DATA), io.BytesIO(), old_key=None, new_key=key, user_id=USER, brain_id=BRAIN, checksum=checksum_of(b"x"))
    with pytest.raises(SealError, match="sealed"):
        reseal(io.BytesIO(SEALED), io.BytesIO(), old_key=None, new_key=key, user_id=USER, brain_id=BRAIN, checksum=SUM)
    with pytest.raises(SealError):
        reseal(io.BytesIO(SEALED), io.BytesIO(), old_key=key, new_key=key, user_id=USER, brain_id="other", checksum=SUM)


class _Trickle(io.RawIOBase):
    """A raw file that accepts at most 1000 bytes per write."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[no-untyped-def, override]
        piece = bytes(b[:1000])
        self.data += piece
        return len(piece)


def test_short_writes_are_completed() -> None:
    out = _Trickle()
    writer = SealWriter(out, derive_user_key(MASTER, USER), USER, BRAIN, chunk_size=SMALL)  # type: ignore[arg-type]
    writer.write(DATA)
    writer.close(SUM)
    assert writer.bytes_written == len(out.data) == len(SEALED)
    assert unseal(bytes(out.data), checksum=SUM) == DATA


def test_writer_misuse() -> None:
    writer = SealWriter(io.BytesIO(), derive_user_key(MASTER, USER), USER, BRAIN)
    writer.close(SUM)
    with pytest.raises(ValueError):
        writer.write(b"more")
    with pytest.raises(ValueError):
        writer.close(SUM)
    with pytest.raises(ValueError):
        SealWriter(io.BytesIO(), derive_user_key(MASTER, USER), USER, BRAIN, chunk_size=10)
