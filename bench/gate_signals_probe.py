#!/usr/bin/env python3
"""More signals for the answer gate, read from e5 itself (issue 34, session 22).

The answer gate (connector/engine/recall/answergate.py) loses three answered synonym queries of
recall-quality whose best cosines sit at the no-answer queries' level. This probe asks whether
e5 can say more about "does the best memory answer the query" than one cosine of two pooled
vectors, with four signals no earlier session measured:

- ``sentence``: the best cosine of the query with any one sentence (or line) of e5's five best
  memories (a memory of several sentences pools them all; the answer may be one of them);
- ``tokens``: late interaction over e5's final token states (ColBERT's MaxSim, untrained): each
  query token's best cosine with any token of e5's best memory, averaged over the query's
  tokens, and the same taken over e5's three best memories;
- ``background``: how far e5's best cosine in the brain stands above the query's best cosine in
  a corpus of unrelated memories (LoCoMo's 2,760 turns; a query that finds as good a match in
  anybody's conversation asks about something common, not about this brain);
- ``symmetric``: the query embedded as a passage (e5's ``passage:`` prefix, text against text,
  where recall embeds it as a ``query:``): the gap from its best cosine with the brain's memories
  to its tenth best. Beside e5's own gap it tells a memory that answers from one that resembles.

For each it prints the area under the ROC curve between recall-quality's answered queries (the
answer in the first ten without a gate) and its 72 no-answer queries, beside the shipped
features', where the three lost queries sit among the no-answer ones, and the gate refitted with
it as a further feature (bench/gate_cv.py's ten folds, held out, and in sample at each
threshold). Results: docs/recall.md ("More signals from e5 (session 22: nothing shipped)").

Usage::

    .venv/bin/python bench/locomo.py --keep /tmp/quality/keep
    .venv/bin/python bench/gate_signals_probe.py --keep /tmp/quality/keep   # ~6 min of CPU
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402

import fusion_cv  # noqa: E402
import gate_cv  # noqa: E402
from connector.engine.recall import e5forward  # noqa: E402
from connector.engine.recall.answergate import ANSWER_GATE, FEATURES  # noqa: E402
from connector.engine.recall.e5numpy import PASSAGE_PREFIX, QUERY_PREFIX, LayerBuffer, NumpyE5  # noqa: E402

SENTENCE_END = re.compile(r"(?<=[.!?;。！？；])\s*")


def sentences(text: str) -> list[str]:
    """A memory's sentences and lines (at least three characters each; the text itself if none)."""
    found = [part.strip() for line in text.split("\n") for part in SENTENCE_END.split(line)]
    return [part for part in found if len(part) >= 3] or [text]


class TokenStates:
    """e5's final hidden state of each content token (prefix, <s> and </s> left out), unit length.

    The numpy pass pools these states (`e5forward.encode`); the probe needs them unpooled, so it
    runs the same layers over one window of one text."""

    def __init__(self, model: NumpyE5) -> None:
        self.model = model
        self._kept: dict[tuple[str, str], np.ndarray] = {}

    def __call__(self, text: str, prefix: str) -> np.ndarray:
        key = (prefix, text)
        if key not in self._kept:
            rows = self.every_state(text, prefix)
            skip = len(self.model.tokenizer.content(prefix))
            rows = rows[1 + skip : -1] if len(rows) > skip + 2 else rows[1:-1]
            self._kept[key] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return self._kept[key]

    def every_state(self, text: str, prefix: str) -> np.ndarray:
        """The final states of every token of ``prefix + text`` (its first window), <s> and </s> included:
        their mean is the numpy pass's vector before normalising."""
        weights, tokenizer = self.model.weights, self.model.tokenizer
        ids = [tokenizer.bos, *tokenizer.content(prefix + text)[: weights.positions - 2], tokenizer.eos]
        x = weights.embeddings(np.array(ids, np.int64), np.arange(len(ids), dtype=np.int64))
        state = np.ascontiguousarray(x.T)
        scratch = e5forward._Scratch(weights.shape, len(ids), len(ids))
        room = LayerBuffer(weights.shape)
        for index in range(weights.shape.layers):
            e5forward._layer(weights.shape, weights.layer(index, room), state, [(0, len(ids))], scratch, True)
        return state.T.copy()


def auc(positive: np.ndarray, negative: np.ndarray) -> float:
    """The chance that an answered query's value exceeds a no-answer query's (ties count half)."""
    above = (positive[:, None] > negative[None, :]).mean()
    return float(above + 0.5 * (positive[:, None] == negative[None, :]).mean())


def signals(data: gate_cv.Rows, model: NumpyE5) -> dict[str, np.ndarray]:
    """Per query (every set, as gate_cv's rows): each signal's value."""
    states = TokenStates(model)
    passage_vectors: dict[str, np.ndarray] = {}

    def passages(texts: list[str]) -> np.ndarray:
        missing = [text for text in texts if text not in passage_vectors]
        if missing:
            passage_vectors.update(zip(missing, model.passages(missing, threads=2)))
        return np.array([passage_vectors[text] for text in texts])

    background_texts = [text for item in {id(item): item for item, _ in data.cases}.values()
                        if item.brainset.name.startswith("locomo") for text in item.texts]
    background = model.passages(background_texts, threads=2)
    brain_vectors: dict[str, np.ndarray] = {}
    names = ("sentence", "tokens", "tokens_top3", "background", "symmetric")
    out: dict[str, list[float]] = {name: [] for name in names}
    for n, (item, case) in enumerate(data.cases):
        texts = item.texts
        positions = np.flatnonzero(case.eligible)
        best = positions[np.argsort(-case.e5[positions], kind="stable")[:5]]
        query = model.query(case.query.text)
        out["sentence"].append(max(float((passages(sentences(texts[p])) @ query).max()) for p in best))
        query_states = states(case.query.text, QUERY_PREFIX)
        maxsim = [float((query_states @ states(texts[p], PASSAGE_PREFIX).T).max(axis=1).mean()) for p in best[:3]]
        out["tokens"].append(maxsim[0])
        out["tokens_top3"].append(max(maxsim))
        # A LoCoMo question's own conversation is in the corpus: only recall-quality's values are read.
        own = item.brainset.name.startswith("locomo")
        out["background"].append(float(case.e5[best[0]]) - (0.0 if own else float((background @ query).max())))
        if item.brainset.name not in brain_vectors:
            brain_vectors[item.brainset.name] = model.passages(texts, threads=2)
        alike = np.sort(brain_vectors[item.brainset.name][positions] @ model.passages([case.query.text])[0])[::-1]
        out["symmetric"].append(float(alike[0] - alike[min(9, len(alike) - 1)]))
        if n % 100 == 0:
            print(f"  {n} of {len(data.cases)} queries", file=sys.stderr, flush=True)
    return {name: np.array(values) for name, values in out.items()}


def report(data: gate_cv.Rows, name: str, values: np.ndarray, outcomes: gate_cv.Outcomes) -> None:
    quality = data.group == "quality"
    answered, unanswerable = quality & data.found, quality & ~data.answerable
    score = np.array([ANSWER_GATE.score(row) for row in data.features])
    print(f"\n{name}: AUC {auc(values[answered], values[unanswerable]):.3f} "
          f"(answered median {np.median(values[answered]):.3f}, no-answer {np.median(values[unanswerable]):.3f})")
    no_answer = values[unanswerable]
    for index in np.flatnonzero(answered)[np.argsort(score[answered])][:5]:
        print(f"  gate {score[index]:+.2f}, above {np.mean(no_answer < values[index]):.0%} of the no-answer queries: "
              f"{data.cases[index][1].query.text}")
    shipped = data.features
    data.features = np.concatenate([shipped, values[:, None]], axis=1)
    try:
        for threshold in (None, -1.0, -1.25, -1.5):
            held = gate_cv.cross_validate(data, outcomes, 0.1, threshold, False)[0]
            label = "chosen per fold" if threshold is None else f"threshold {threshold}"
            print(f"  with it, held out ({label}): {gate_cv.describe(held)}")
        everything = np.ones(len(data.group), dtype=bool)
        for threshold in (-1.0, -1.25, -1.5):
            gate = gate_cv.fit(data, everything, 0.1, threshold, outcomes)
            fitted = outcomes.under(np.array([gate.answers(row) for row in data.features]))
            print(f"  with it, in sample (threshold {threshold}): {gate_cv.describe(gate_cv.figures(data, everything, fitted))}")
    finally:
        data.features = shipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    fusion_cv.channel_arguments(parser)
    args = parser.parse_args(argv)
    data = gate_cv.rows(fusion_cv.load(args.keep, args.cache_dir))
    outcomes = gate_cv.outcomes_of(data)
    quality = data.group == "quality"
    answered, unanswerable = quality & data.found, quality & ~data.answerable
    print(f"recall-quality: {int(answered.sum())} answered within ten without a gate, {int(unanswerable.sum())} no-answer")
    print("the shipped features, AUC: " + ", ".join(
        f"{name} {auc(data.features[answered, n], data.features[unanswerable, n]):.3f}" for n, name in enumerate(FEATURES)))
    for threshold in (None, -1.0, -1.25, -1.5):
        label = "chosen per fold" if threshold is None else f"threshold {threshold}"
        print(f"shipped features, held out ({label}): "
              f"{gate_cv.describe(gate_cv.cross_validate(data, outcomes, 0.1, threshold, False)[0])}")
    for name, values in signals(data, NumpyE5()).items():
        report(data, name, values, outcomes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
