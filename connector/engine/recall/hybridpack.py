"""A hybrid index as bytes and back, so that a restart need not rebuild it.

What costs a rebuild is the text index (most of it: ~0.5 s CPU at 10,000 memories),
then reading every memory's text and hashing it, then looking its vector up. All of
it depends only on the brain's content, so it is kept per content key (see
connector/workcopy/indexdisk.py) as one MessagePack document: numpy arrays as raw
bytes with their dtype and shape, term lists in number order. Loading one takes a few
milliseconds of parsing plus the arrays' copies.

`unpack` checks what it reads (format, model, array shapes, the memory ids of the
brain index it is for) and answers None for anything else: a damaged or foreign
document is rebuilt, never trusted. Pure logic: no I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from connector.engine.recall.embedding import Quantized
from connector.engine.recall.hybrid import HybridIndex
from connector.engine.recall.index import BrainIndex
from connector.engine.recall.textmatch import Bm25Index, FuzzyWords, Postings, TextIndex

# 2: with the words and their holders, so that a read-back index can follow writes;
# 3: CJK bigrams of traditional Chinese folded to simplified (older files hold them unfolded);
# 4: with the abbreviations each memory writes in capitals (a query may write them out);
# 5: without BM25's weights and idf (computed from the postings: weights per term when asked).
FORMAT = 5
_HASH_BYTES = 16


class _Damaged(Exception):
    """The document does not describe a usable index."""


def _array(value: np.ndarray) -> dict[str, Any]:
    value = np.ascontiguousarray(value)
    return {"d": value.dtype.str, "s": list(value.shape), "b": value.tobytes()}


def _unarray(part: Any, dtype: str, dimensions: int = 1) -> np.ndarray:
    if not isinstance(part, dict) or part.get("d") != dtype or not isinstance(part.get("b"), bytes):
        raise _Damaged
    shape = part.get("s")
    if not isinstance(shape, list) or len(shape) != dimensions or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise _Damaged
    expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if len(part["b"]) != expected:
        raise _Damaged
    # A copy, writable and aligned (the document's bytes are dropped after loading).
    return np.frombuffer(part["b"], dtype=dtype).reshape(shape).copy()


def _terms(vocabulary: dict[str, int]) -> list[str]:
    ordered: list[str] = [""] * len(vocabulary)
    for term, number in vocabulary.items():
        ordered[number] = term
    return ordered


def _postings(postings: Postings) -> dict[str, Any]:
    return {
        "terms": _terms(postings.vocabulary),
        "offsets": _array(postings.offsets),
        "docs": _array(postings.docs),
        "counts": _array(postings.counts),
        "lengths": _array(postings.lengths),
        "count": postings.count,
    }


def _unpostings(part: Any) -> Postings:
    if not isinstance(part, dict):
        raise _Damaged
    terms = part.get("terms")
    count = part.get("count")
    if not isinstance(terms, list) or not all(isinstance(term, str) for term in terms) or not isinstance(count, int):
        raise _Damaged
    offsets = _unarray(part.get("offsets"), "<i8")
    docs = _unarray(part.get("docs"), "<i4")
    counts = _unarray(part.get("counts"), "<f8")
    lengths = _unarray(part.get("lengths"), "<f8")
    if len(offsets) != len(terms) + 1 or len(counts) != len(docs) or len(lengths) != count:
        raise _Damaged
    if len(offsets) and (offsets[0] != 0 or offsets[-1] != len(docs) or np.any(np.diff(offsets) < 0)):
        raise _Damaged
    if len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= max(count, 1)):
        raise _Damaged
    vocabulary = {term: number for number, term in enumerate(terms)}
    if len(vocabulary) != len(terms):
        raise _Damaged
    return Postings(vocabulary, offsets, docs, counts, lengths, count)


def pack(hybrid: HybridIndex, model_id: str) -> bytes:
    """``hybrid`` (built with vectors of ``model_id``) as one document."""
    text = hybrid.text
    return msgspec.msgpack.encode({
        "format": FORMAT,
        "model": model_id,
        "ids": hybrid.ids,
        "hashes": b"".join(hybrid.hashes),
        "words": _postings(text.words.postings),
        "stems": text.fuzzy.stems,
        "sizes": _array(text.fuzzy.sizes),
        "grams": _postings(text.fuzzy.grams),
        "initials": None if text.initials is None else _postings(text.initials),
        "fuzzy_words": text.fuzzy.words,
        "holders": None if text.holders is None else _postings(text.holders),
        "capitals": None if text.capitals is None else _postings(text.capitals),
        "spelled_out": text.spelled_out,
        "codes": _array(hybrid.vectors.codes),
        "scales": _array(hybrid.vectors.scales),
        "hubness": [[position, value] for position, value in dict(hybrid.hubness_known).items()],
    })


def unpack(data: bytes, index: BrainIndex, model_id: str) -> HybridIndex | None:
    """The hybrid index in ``data`` when it is one of ``model_id`` for exactly the memories of
    ``index`` (same ids, same order); None for anything else (damaged, older format, other brain)."""
    try:
        return _unpack(msgspec.msgpack.decode(data), index, model_id)
    except (msgspec.DecodeError, _Damaged, ValueError, TypeError, KeyError, OverflowError):
        return None


def _unpack(document: Any, index: BrainIndex, model_id: str) -> HybridIndex:
    if not isinstance(document, dict) or document.get("format") != FORMAT or document.get("model") != model_id:
        raise _Damaged
    ids = [record.id for record in index.memories]
    if document.get("ids") != ids:
        raise _Damaged
    count = len(ids)
    raw_hashes = document.get("hashes")
    if not isinstance(raw_hashes, bytes) or len(raw_hashes) != count * _HASH_BYTES:
        raise _Damaged
    hashes = [raw_hashes[i * _HASH_BYTES : (i + 1) * _HASH_BYTES] for i in range(count)]
    words = _unpostings(document.get("words"))
    if words.count != count:
        raise _Damaged
    stems = document.get("stems")
    grams = _unpostings(document.get("grams"))
    sizes = _unarray(document.get("sizes"), "<f8")
    if not isinstance(stems, list) or not all(isinstance(stem, str) for stem in stems):
        raise _Damaged
    if grams.count != len(stems) or len(sizes) != len(stems):
        raise _Damaged
    words_of_fuzzy = document.get("fuzzy_words")
    if not isinstance(words_of_fuzzy, list) or not all(isinstance(word, str) for word in words_of_fuzzy):
        raise _Damaged
    if len(words_of_fuzzy) != len(stems):
        raise _Damaged
    holders = None if document.get("holders") is None else _unpostings(document.get("holders"))
    if holders is not None and holders.count != count:
        raise _Damaged
    initials = None if document.get("initials") is None else _unpostings(document.get("initials"))
    capitals = None if document.get("capitals") is None else _unpostings(document.get("capitals"))
    if capitals is not None and capitals.count != count:
        raise _Damaged
    spelled_out = document.get("spelled_out")
    if spelled_out is not None and not (
        isinstance(spelled_out, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in spelled_out.items())
    ):
        raise _Damaged
    codes = _unarray(document.get("codes"), "|i1", 2)
    scales = _unarray(document.get("scales"), "<f4")
    if codes.shape[0] != count or len(scales) != count:
        raise _Damaged
    hubness: dict[int, float] = {}
    for item in document.get("hubness") or []:
        position, value = item
        if not isinstance(position, int) or not 0 <= position < count or not isinstance(value, float):
            raise _Damaged
        hubness[position] = value
    text = TextIndex(Bm25Index.of_postings(words), FuzzyWords(stems, sizes, grams, words_of_fuzzy), initials,
                     spelled_out, holders, capitals)
    newer = [position for position, record in enumerate(index.memories) if record.has_newer_fields]
    return HybridIndex(ids, hashes, text, Quantized(codes, scales), newer, hubness)
