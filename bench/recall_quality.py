#!/usr/bin/env python3
"""Recall quality on a labelled set: recall@5 and MRR@10 per category, beside the reference.

A set is a directory holding ``brain/`` (a brain directory) and ``queries.jsonl``
(see shared/fixtures/recall-quality/README.md): each query has its category, its
gold ids, the clock to recall at and what the reference `brain recall` returned
(``reference_top10``). Every mode is run one query at a time, asking for 10 hits,
with no context, as the set's README prescribes.

Usage::

    .venv/bin/python bench/recall_quality.py                       # both modes, the development set
    .venv/bin/python bench/recall_quality.py --mode hybrid PATH    # another set
    .venv/bin/python bench/recall_quality.py --json out.json --misses
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from connector.engine.archive import load_directory  # noqa: E402
from connector.engine.hybrid import MODES, HybridIndex, recall_in_mode  # noqa: E402
from connector.engine.index import BrainIndex  # noqa: E402
from connector.engine.jsvalues import parse_iso_ms  # noqa: E402
from connector.workcopy.vectors import VectorStore  # noqa: E402

DEFAULT_SET = REPO.parent / "shared" / "fixtures" / "recall-quality"
TOP = 10


def metrics(ranked: list[str], gold: list[str]) -> tuple[float, float]:
    """recall@5 (0 or 1) and reciprocal rank within the first 10 of one query."""
    wanted = set(gold)
    hit5 = float(any(memory_id in wanted for memory_id in ranked[:5]))
    rank = next((i + 1 for i, memory_id in enumerate(ranked[:10]) if memory_id in wanted), None)
    return hit5, (1.0 / rank if rank else 0.0)


def table(results: dict[str, list[tuple[float, float]]]) -> dict[str, dict[str, float]]:
    """Mean recall@5 and MRR@10 per category and overall."""
    out = {}
    for category, values in results.items():
        out[category] = {
            "queries": len(values),
            "recall@5": sum(v[0] for v in values) / len(values),
            "mrr@10": sum(v[1] for v in values) / len(values),
        }
    return out


def run(set_dir: Path, modes: list[str], show_misses: bool) -> dict[str, Any]:
    """Score each mode (and the stored reference) on the set at ``set_dir``."""
    from datetime import UTC, datetime

    queries = [json.loads(line) for line in (set_dir / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line]
    brain = load_directory(set_dir / "brain")
    index = BrainIndex.build(brain)
    per_mode: dict[str, dict[str, list[tuple[float, float]]]] = {}
    timings: dict[str, float] = {}
    reference: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for query in queries:
        value = metrics(query.get("reference_top10") or query.get("reference_top5") or [], query["gold"])
        reference[query["category"]].append(value)
        reference["overall"].append(value)
    for mode in modes:
        store = VectorStore() if mode == "hybrid" else None
        started = time.perf_counter()
        hybrid = HybridIndex.build(brain, index, store) if store is not None else None
        timings[f"{mode}_prepare_s"] = time.perf_counter() - started
        results: dict[str, list[tuple[float, float]]] = defaultdict(list)
        started = time.perf_counter()
        for query in queries:
            now = datetime.fromtimestamp(parse_iso_ms(query["now"]) / 1000, tz=UTC)
            hits = recall_in_mode(brain, query["query"], mode=mode, source=store, index=index, hybrid=hybrid, top=TOP, now=now)
            ranked = [hit["id"] for hit in hits]
            value = metrics(ranked, query["gold"])
            results[query["category"]].append(value)
            results["overall"].append(value)
            if show_misses and not value[0]:
                print(f"  miss [{mode}] {query['id']} {query['query']!r} gold={query['gold']} got={ranked[:5]}")
        timings[f"{mode}_per_query_ms"] = (time.perf_counter() - started) * 1000 / max(len(queries), 1)
        per_mode[mode] = results
    return {
        "set": str(set_dir),
        "reference": table(reference),
        **{mode: table(results) for mode, results in per_mode.items()},
        "timings": timings,
    }


def print_report(report: dict[str, Any], modes: list[str]) -> None:
    """A side-by-side table: reference, then each mode."""
    categories = [c for c in report["reference"] if c != "overall"] + ["overall"]
    columns = ["reference", *modes]
    print(f"set: {report['set']}")
    header = f"{'category':<16} {'n':>4} " + " ".join(f"{name + ' r@5':>14} {'mrr@10':>7}" for name in columns)
    print(header)
    for category in categories:
        row = f"{category:<16} {report['reference'][category]['queries']:>4} "
        row += " ".join(
            f"{report[name][category]['recall@5']:>14.3f} {report[name][category]['mrr@10']:>7.3f}" for name in columns
        )
        print(row)
    for name, value in report["timings"].items():
        print(f"{name}: {value:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set", nargs="?", type=Path, default=DEFAULT_SET, help="the set's directory")
    parser.add_argument("--mode", choices=[*MODES, "all"], default="all")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--misses", action="store_true", help="list queries whose gold is not in the top 5")
    args = parser.parse_args(argv)
    if not (args.set / "queries.jsonl").is_file():
        parser.error(f"no queries.jsonl in {args.set}")
    modes = list(MODES) if args.mode == "all" else [args.mode]
    report = run(args.set, modes, args.misses)
    print_report(report, modes)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
