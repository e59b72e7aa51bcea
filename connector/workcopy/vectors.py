"""Where hybrid recall's vectors live: in memory, and sealed in the connector's state (directory or S3).

A vector is computed once per memory *content* within one brain (key: a keyed
BLAKE2b of the brain id over `embedding.content_hash` of the model and the embedded
text), whichever device or version it comes from: a pull of an unchanged brain, or
of a brain where a few memories changed, embeds only what it has never seen. Vectors
are never shared between brains, even for the same text: a shared cache would let
one user time whether another user's brain holds a text (a hit is ~6x faster than a
miss). `VectorStore.for_brain(brain_id)` is the view the connector hands to hybrid
recall; the store used bare (no brain: the command line, benchmarks) keys by content
alone. Nothing is written into the brain archive, so the reference `brain` command
line reads and writes it as before.

With a state (a directory, or S3 with ``CONNECTOR_STATE_URL``), new vectors are
appended under ``vectors/`` there as segment documents sealed with AES-256-GCM under
a key derived from the state key (memory text can be partly inferred from its
embedding, so vectors are treated like the secrets beside them); in a directory,
files 0600 in a 0700 directory. Many small segments are merged into one from time
to time. A segment that cannot be opened (other key, damaged) is ignored: its
vectors are computed again when needed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from common.docstore import DocumentStore, DocumentStoreError
from connector.engine.recall.embedding import Embedder, Quantized, content_hash, default_embedder, quantize
from connector.engine.recall.hybrid import HybridIndex
from connector.engine.recall.judge import JudgeEmbedder, JudgeUnavailable, default_judge
from connector.workcopy.longlived import give_back_memory

log = logging.getLogger("connector.vectors")

_KEY_INFO = b"brain-connector vector cache v1"
_MAGIC = b"BVEC2\n"  # keys per brain; BVEC1 segments (keyed by content alone) are deleted when seen
_OLD_MAGIC = b"BVEC1\n"
_HASH_BYTES = 16
# Texts embedded per model call: enough for the model's threads and its sharing of work
# between repeated tokens (~35 micro-batches of 4,096 tokens), few enough that new
# vectors are kept (and saved, one segment per call) as they come: a few seconds each.
_BATCH = 1024
# Segments beyond this many are merged into one at the next write.
_MAX_SEGMENTS = 16
_PREFIX = "vectors/"
# The e5 channel's segments (connector/engine/recall/e5.py): a folder of their own.
E5_PREFIX = "vectors/e5/"
# The judge's segments (connector/engine/recall/judge.py): a folder of their own.
JUDGE_PREFIX = "vectors/judge/"
# Texts per e5 call: its vectors are kept and saved as they come (a few seconds of work
# each), so a background embedding shows progress and a restart loses little.
E5_BATCH = 64


class VectorStore:
    """Vectors by content hash, for every brain this process serves (thread-safe).

    ``vectors(hashes, texts)`` is the whole API hybrid recall needs: known vectors
    are looked up, missing ones embedded in batches, kept, and persisted.
    ``embedded`` counts texts sent to the model (tests and benchmarks read it).
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        state: DocumentStore | None = None,
        state_key: bytes | None = None,
        *,
        prefix: str = _PREFIX,
        batch: int = _BATCH,
        prune_unreadable: bool = False,
    ):
        """``prefix``: where in the state this model's segments live (one folder per model: a
        store never reads, merges or deletes another model's segments). ``batch``: texts per
        model call (each call's vectors are kept and saved as they come). ``prune_unreadable``:
        delete a segment that cannot be opened instead of ignoring it at every load (for a
        state only this key ever writes, like the command line's cache: such a segment is
        damaged for good)."""
        self.embedder = embedder or default_embedder()
        self.prefix = prefix
        self.batch = batch
        self.prune_unreadable = prune_unreadable
        self.model_id = self.embedder.model_id
        self.dimensions = self.embedder.dimensions
        self.state = state if state is not None and state_key is not None else None
        self._aead = (
            AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KEY_INFO).derive(state_key))
            if self.state is not None and state_key is not None
            else None
        )
        self._rows: dict[bytes, int] = {}
        self._codes = np.zeros((0, self.dimensions), dtype=np.int8)
        self._scales = np.zeros(0, dtype=np.float32)
        self._lock = threading.RLock()
        self._loaded_from_disk = self.state is None
        self.embedded = 0

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        """Memory held by the stored vectors (codes and scales, including spare rows)."""
        return int(self._codes.nbytes + self._scales.nbytes)

    def embed_query(self, text: str) -> np.ndarray:
        """The unit vector of a query (not stored); a model with a query form of its own (e5) uses it."""
        embed_query = getattr(self.embedder, "embed_query", None)
        return embed_query(text) if embed_query is not None else self.embedder.embed([text])[0]

    def embed_query_as_passage(self, text: str) -> np.ndarray:
        """The unit vector of a query embedded as a memory is (not stored): the same as
        `embed_query` for a model with one form for both (USE)."""
        embed = getattr(self.embedder, "embed_query_as_passage", None)
        return embed(text) if embed is not None else self.embedder.embed([text])[0]

    def for_brain(self, brain_id: str | None) -> BrainVectors:
        """The vectors of one brain: a `VectorSource` that never sees another brain's vectors."""
        return BrainVectors(self, brain_id)

    def get(self, digest: bytes, brain_id: str | None = None) -> np.ndarray | None:
        """The (dequantised) vector kept for one content hash (of ``brain_id``), or None when never computed."""
        key = _keys([digest], brain_id)[0]
        with self._lock:
            self._load_once()
            row = self._rows.get(key)
            return None if row is None else self._codes[row].astype(np.float32) * self._scales[row]

    def vectors(self, hashes: Sequence[bytes], texts: Sequence[str], brain_id: str | None = None) -> Quantized:
        """Vectors of ``texts`` keyed by ``hashes`` (within ``brain_id``), one row each in order, embedding only unknown ones."""
        keys = _keys(hashes, brain_id)
        with self._lock:
            self._load_once()
            missing: dict[bytes, str] = {}
            for key, text in zip(keys, texts):
                if key not in self._rows and key not in missing:
                    missing[key] = text
        if missing:
            self._embed_and_keep(missing)
        with self._lock:
            rows = np.fromiter(map(self._rows.__getitem__, keys), dtype=np.int64, count=len(keys))
            return Quantized(self._codes[rows], self._scales[rows])

    def known(self, hashes: Sequence[bytes], brain_id: str | None = None) -> tuple[Quantized, np.ndarray]:
        """The vectors already kept for ``hashes`` (zero rows elsewhere) and which are, never embedding."""
        keys = _keys(hashes, brain_id)
        with self._lock:
            self._load_once()
            rows = np.fromiter((self._rows.get(key, -1) for key in keys), dtype=np.int64, count=len(keys))
            found = rows >= 0
            codes = np.zeros((len(keys), self.dimensions), dtype=np.int8)
            scales = np.zeros(len(keys), dtype=np.float32)
            codes[found] = self._codes[rows[found]]
            scales[found] = self._scales[rows[found]]
        return Quantized(codes, scales), found

    # ----- computing --------------------------------------------------------

    def keep(self, hashes: Sequence[bytes], vectors: Quantized, brain_id: str | None = None, *, persist: bool = True) -> None:
        """Keep vectors computed elsewhere for ``hashes`` of ``brain_id`` (benchmarks seed many
        copies of one brain this way); known ones are left as they are. Without ``persist``
        they are kept in memory only until the next merge of the segments writes them."""
        with self._lock:
            self._load_once()
            self._keep(_keys(hashes, brain_id), vectors, persist=persist)

    def _embed_and_keep(self, missing: dict[bytes, str]) -> None:
        digests = list(missing)
        for start in range(0, len(digests), self.batch):
            batch = digests[start : start + self.batch]
            packed = quantize(self.embedder.embed([missing[digest] for digest in batch]))
            with self._lock:
                self.embedded += len(batch)
                self._keep(batch, packed)

    def _keep(self, keys: list[bytes], packed: Quantized, *, persist: bool = True) -> None:
        """Append and save the rows of ``keys`` not known yet (under the lock)."""
        fresh: dict[bytes, int] = {}
        for position, key in enumerate(keys):
            if key not in self._rows and key not in fresh:
                fresh[key] = position
        if not fresh:
            return
        picked = np.fromiter(fresh.values(), dtype=np.int64, count=len(fresh))
        self._append(list(fresh), packed.codes[picked], packed.scales[picked])
        if persist:
            self._persist(list(fresh), packed.codes[picked], packed.scales[picked])

    def _append(self, digests: list[bytes], codes: np.ndarray, scales: np.ndarray) -> None:
        used = len(self._rows)
        needed = used + len(digests)
        if needed > len(self._codes):
            capacity = max(needed, 2 * len(self._codes), 1024)
            grown = np.zeros((capacity, self.dimensions), dtype=np.int8)
            grown[:used] = self._codes[:used]
            grown_scales = np.zeros(capacity, dtype=np.float32)
            grown_scales[:used] = self._scales[:used]
            self._codes, self._scales = grown, grown_scales
        self._codes[used:needed] = codes
        self._scales[used:needed] = scales
        for offset, digest in enumerate(digests):
            self._rows[digest] = used + offset

    # ----- disk -------------------------------------------------------------

    def _seal(self, digests: list[bytes], codes: np.ndarray, scales: np.ndarray) -> bytes:
        assert self._aead is not None
        header = _MAGIC + struct.pack("<II", len(digests), self.dimensions)
        payload = header + b"".join(digests) + scales.astype("<f4").tobytes() + codes.astype(np.int8).tobytes()
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, payload, self.model_id.encode())

    def _open(self, sealed: bytes) -> tuple[list[bytes], np.ndarray, np.ndarray] | None:
        assert self._aead is not None
        try:
            payload = self._aead.decrypt(sealed[:12], sealed[12:], self.model_id.encode())
        except (InvalidTag, ValueError):
            return None
        if not payload.startswith(_MAGIC):
            if payload.startswith(_OLD_MAGIC):
                raise _OldFormat
            return None
        count, dimensions = struct.unpack_from("<II", payload, len(_MAGIC))
        if dimensions != self.dimensions:
            return None
        at = len(_MAGIC) + 8
        expected = at + count * (_HASH_BYTES + 4 + dimensions)
        if len(payload) != expected:
            return None
        digests = [payload[at + i * _HASH_BYTES : at + (i + 1) * _HASH_BYTES] for i in range(count)]
        at += count * _HASH_BYTES
        scales = np.frombuffer(payload, dtype="<f4", count=count, offset=at).astype(np.float32)
        at += 4 * count
        codes = np.frombuffer(payload, dtype=np.int8, count=count * dimensions, offset=at).reshape(count, dimensions)
        return digests, codes, scales

    def _segments(self) -> list[str]:
        assert self.state is not None
        return [key for key in self.state.list(self.prefix) if key.startswith(self.prefix + "seg-") and key.endswith(".bin")]

    def _load_once(self) -> None:
        if self._loaded_from_disk:
            return
        self._loaded_from_disk = True
        assert self.state is not None
        try:
            segments = self._segments()
        except (DocumentStoreError, OSError) as exc:
            log.warning("vector cache unavailable: %s", exc)
            self.state = None
            return
        self._read_segments(segments)

    def _read_segments(self, segments: list[str]) -> None:
        """Keep the vectors of ``segments`` not known yet (unreadable ones are skipped)."""
        assert self.state is not None
        for key in segments:
            # A read that fails leaves nothing to judge: the segment is skipped, never removed
            # (judged by the previous one's document, it was; the first one raised).
            found = None
            try:
                found = self.state.get(key)
                opened = self._open(found.data) if found is not None else None
            except (DocumentStoreError, OSError):
                opened = None
            except _OldFormat:
                # Keyed by content alone (shared across brains): dropped, recomputed per brain.
                self._delete(key)
                continue
            if opened is None:
                if found is not None and self.prune_unreadable and self._delete(key):
                    log.warning("removed unreadable vector cache segment %s (its vectors are computed again)",
                                key[len(self.prefix) :])
                elif found is not None:
                    log.warning("ignoring unreadable vector cache segment %s", key[len(self.prefix) :])
                continue
            digests, codes, scales = opened
            fresh = [i for i, digest in enumerate(digests) if digest not in self._rows]
            if fresh:
                picked = np.asarray(fresh, dtype=np.int64)
                self._append([digests[i] for i in fresh], codes[picked], scales[picked])

    def _delete(self, key: str) -> bool:
        """Remove one segment; False (said in the log) when it could not be."""
        assert self.state is not None
        try:
            self.state.delete(key)
        except (DocumentStoreError, OSError) as exc:
            log.warning("could not delete a vector cache segment: %s", exc)
            return False
        return True

    def _persist(self, digests: list[bytes], codes: np.ndarray, scales: np.ndarray) -> None:
        if self.state is None:
            return
        try:
            segments = self._segments()
            if len(segments) >= _MAX_SEGMENTS:
                # Merge into one file everything known plus those segments' vectors (another
                # process sharing the state may have written some since we read it).
                self._read_segments(segments)
                used = len(self._rows)
                ordered = sorted(self._rows, key=self._rows.__getitem__)
                self._write_segment(ordered, self._codes[:used], self._scales[:used])
                for old in segments:
                    self._delete(old)
            else:
                self._write_segment(digests, codes, scales)
        except (DocumentStoreError, OSError) as exc:  # a full disk or S3 away costs recomputation later, nothing else
            log.warning("could not save vectors: %s", exc)

    def _write_segment(self, digests: list[bytes], codes: np.ndarray, scales: np.ndarray) -> None:
        assert self.state is not None
        # A fresh random name: created once, never replaced (no condition needed).
        self.state.put(f"{self.prefix}seg-{secrets.token_hex(8)}.bin", self._seal(digests, codes, scales))


def e5_store(
    state: DocumentStore | None = None, state_key: bytes | None = None, *, fast_queries: bool = False,
    prune_unreadable: bool = False,
) -> VectorStore | None:
    """The e5 channel's vector store beside the USE one (same state, own folder), or None
    where the e5 engine cannot load (recall then runs without it). ``fast_queries`` (a server,
    answering many queries) starts building the int8 query kernels in the background (~1-2 s
    of CPU once: not worth it for a command line's one query)."""
    from connector.engine.recall.e5 import e5_embedder

    embedder = e5_embedder()
    if embedder is None:
        return None
    if fast_queries:
        embedder.prepare_queries(timeout=0)
    return VectorStore(embedder, state=state, state_key=state_key, prefix=E5_PREFIX, batch=E5_BATCH,
                       prune_unreadable=prune_unreadable)


def judge_store(
    state: DocumentStore | None = None, state_key: bytes | None = None, *, prune_unreadable: bool = False
) -> VectorStore:
    """The judge's vectors (connector/engine/recall/judge.py): its channel's, kept in the state
    beside e5's (own folder) when one is given, or a doubtful query's handful in memory. Its
    model loads when first asked (`JudgeEmbedder.embed`), or in the background once started
    (`JudgeEmbedder.start`: a server, which asks it only once it is `ready`)."""
    return VectorStore(default_judge(), state=state, state_key=state_key, prefix=JUDGE_PREFIX, batch=E5_BATCH,
                       prune_unreadable=prune_unreadable)


class WhenReady:
    """One brain's judge vectors for a server, which never waits for the judge's model: asked
    before the model is ready, it starts loading it in the background and raises
    `JudgeUnavailable` (hybrid recall's gate then decides without the judge). So the model loads
    at the first query the gate doubts, in a process that has one (a `VectorSource`).

    ``kept``: the judge's channel store (the e5 background's, `judge_store` with a state), read
    first: right after a write, until the background has read its new memory, the gate asks
    about memories that store already has. What it lacks is embedded into ``store`` (in memory)."""

    def __init__(self, store: VectorStore, brain_id: str | None, kept: VectorStore | None = None) -> None:
        self._store = store
        self._vectors = store.for_brain(brain_id)
        self._model = cast(JudgeEmbedder, store.embedder)
        self._kept = kept
        self._brain_id = brain_id
        self.model_id = store.model_id

    def _ready(self) -> None:
        if not self._model.ready:
            self._model.start()
            raise JudgeUnavailable("the judge is loading")

    def vectors(self, hashes: Sequence[bytes], texts: Sequence[str]) -> Quantized:
        """Vectors of ``texts`` keyed by ``hashes`` (see `BrainVectors.vectors`), once the model is ready."""
        self._ready()
        if self._kept is None:
            return self._embedded(hashes, texts)
        vectors, found = self._kept.known(hashes, self._brain_id)
        if not found.all():
            missing = np.flatnonzero(~found)
            fresh = self._embedded([hashes[i] for i in missing], [texts[i] for i in missing])
            vectors.codes[missing], vectors.scales[missing] = fresh.codes, fresh.scales
        return vectors

    def _embedded(self, hashes: Sequence[bytes], texts: Sequence[str]) -> Quantized:
        embedded = self._store.embedded
        found = self._vectors.vectors(hashes, texts)
        if self._store.embedded != embedded:
            # The model's working buffers of a long memory (~40 MB at 256 tokens) stay in the
            # heap once freed: given back, a worker keeps only the model (~25 MB).
            give_back_memory()
        return found

    def embed_query(self, text: str) -> np.ndarray:
        """The unit vector of a query, once the model is ready."""
        self._ready()
        return self._vectors.embed_query(text)


class _OldFormat(Exception):
    """A segment of the first format, keyed by content alone (shared across brains)."""


def _keys(hashes: Sequence[bytes], brain_id: str | None) -> list[bytes]:
    """Cache keys of content hashes within one brain (the hashes themselves without a brain)."""
    if brain_id is None:
        return list(hashes)
    # Keyed BLAKE2b: the brain id is the key, so equal texts of two brains never share a key.
    scope = hashlib.sha256(b"brain-connector vectors of brain\0" + brain_id.encode("utf-8", "surrogatepass")).digest()
    blake = hashlib.blake2b
    return [blake(digest, key=scope, digest_size=_HASH_BYTES).digest() for digest in hashes]


class BrainVectors:
    """One brain's view of a `VectorStore` (a `VectorSource` for `HybridIndex.build`)."""

    def __init__(self, store: VectorStore, brain_id: str | None) -> None:
        self.store = store
        self.brain_id = brain_id
        self.model_id = store.model_id
        self.dimensions = store.dimensions

    def vectors(self, hashes: Sequence[bytes], texts: Sequence[str]) -> Quantized:
        """Vectors of ``texts`` keyed by ``hashes`` within this brain, embedding only unknown ones."""
        return self.store.vectors(hashes, texts, self.brain_id)

    def get(self, digest: bytes) -> np.ndarray | None:
        """The vector kept for one content hash of this brain, or None."""
        return self.store.get(digest, self.brain_id)

    def keep_text(self, text: str, vector: np.ndarray) -> None:
        """Keep the unit ``vector`` computed elsewhere for the memory text ``text`` of this brain
        (the similar check's embedding of a memory about to be written: not embedded again).
        In memory: no file is written on the write's path; the next merge of the segments
        saves it, and the hybrid index cache holds it meanwhile."""
        self.store.keep([content_hash(self.model_id, text)], quantize(np.asarray(vector, dtype=np.float32)[None, :]),
                        self.brain_id, persist=False)

    def embed_query(self, text: str) -> np.ndarray:
        """The unit vector of a query (not stored)."""
        return self.store.embed_query(text)

    def embed_query_as_passage(self, text: str) -> np.ndarray:
        """The unit vector of a query embedded as a memory is (not stored)."""
        return self.store.embed_query_as_passage(text)


class QueryVectors:
    """Recent query vectors, per brain and model, keyed by the query's text (bounded LRU, thread-safe).

    Embedding a query costs ~3 ms of CPU with USE and ~10-20 ms with e5, and the same query
    comes back: a mental model's question at every staleness check, a search page reloaded, a
    model asking again. Scoped (recall: by asker and brain): a shared entry would let one user
    time whether another recently asked the same words. Keys are hashes of the text, so a long
    query costs its vector and a digest, not its text.
    """

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._items: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def embedder(self, scope: str | None, model_id: str, embed: Callable[[str], np.ndarray]) -> Callable[[str], np.ndarray]:
        """``embed`` (a query's unit vector from one model) answered from this cache within ``scope``
        (a brain, or an asker and a brain: entries are never shared between scopes)."""
        key_of_scope = hashlib.sha256(f"{scope or ''}\0{model_id}\0".encode("utf-8", "surrogatepass")).digest()

        def cached(text: str) -> np.ndarray:
            key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=20, key=key_of_scope).digest()
            with self._lock:
                found = self._items.get(key)
                if found is not None:
                    self._items.move_to_end(key)
                    return found
            vector = np.asarray(embed(text), dtype=np.float32)
            vector.setflags(write=False)  # shared by later calls: nobody may change it
            with self._lock:
                self._items[key] = vector
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
            return vector

        return cached


class HybridCache:
    """A small LRU of hybrid indexes keyed by content key (an archive checksum), thread-safe.

    One build per key at a time: a second recall of a brain being prepared waits for
    the first instead of embedding the same memories again.
    """

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, HybridIndex] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def _cached(self, key: str) -> HybridIndex | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def keys(self) -> list[str]:
        """The keys cached now (a copy)."""
        with self._lock:
            return list(self._items)

    def peek(self, key: str) -> HybridIndex | None:
        """The index cached for ``key``, or None (never builds)."""
        with self._lock:
            return self._items.get(key)

    def put(self, key: str, hybrid: HybridIndex) -> None:
        """Cache an index made elsewhere (followed from an older version after a write)."""
        with self._lock:
            self._put(key, hybrid)

    def rename(self, old_key: str, new_key: str) -> HybridIndex | None:
        """The index of ``old_key`` is now the one of ``new_key`` (same content); it, or None."""
        with self._lock:
            found = self._items.pop(old_key, None)
            if found is not None:
                self._put(new_key, found)
            return found

    def _put(self, key: str, hybrid: HybridIndex) -> None:
        """Add ``hybrid`` as the most recently used (lock held)."""
        self._items[key] = hybrid
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def newest(self, prefix: str) -> HybridIndex | None:
        """The most recently used index whose key starts with ``prefix`` (one brain's), or None."""
        with self._lock:
            for key in reversed(self._items):
                if key.startswith(prefix):
                    return self._items[key]
        return None

    def get_or_build(self, key: str | None, build: Callable[[], HybridIndex]) -> HybridIndex:
        """The index for ``key``, built with ``build`` on a miss (never cached without a key)."""
        if key is None:
            return build()
        found = self._cached(key)
        if found is not None:
            return found
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:
            found = self._cached(key)
            if found is not None:
                return found
            built = build()
            with self._lock:
                self._put(key, built)
                self._building.pop(key, None)
            return built
