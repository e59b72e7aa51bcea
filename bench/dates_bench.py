#!/usr/bin/env python3
"""What hybrid recall's date channel costs (connector/engine/recall/dates.py).

A query that names a date is parsed (`dateparser`), and the dates of the fusion's first
``CANDIDATES`` memories are read from their texts, once per text and process. This prints,
on LoCoMo development conversations (``../shared/fixtures/locomo-dev``, one memory per turn,
every turn carrying its session's date: the costliest kind of brain for this), medians of:

- reading one memory's dates (its text searched around its numbers);
- a hybrid recall of a dated question with no memory's dates known yet (the first dated
  question on a brain), again (dates known), and the same question without its date.

Vectors come from the command line's cache (``--cache-dir``): only a first run embeds.

Usage::

    .venv/bin/python bench/dates_bench.py --conversations 26 42 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import locomo  # noqa: E402

from connector.engine.recall import dates  # noqa: E402
from connector.engine.recall.hybrid import HybridIndex, memory_texts, recall_in_mode  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.workcopy.vectorcache import cached_stores  # noqa: E402


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", nargs="+", default=["26", "42"])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (medians)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="vector cache (default: the command line's)")
    args = parser.parse_args(argv)
    use_store, e5_store, _ = cached_stores(args.cache_dir)
    for brainset in locomo.locomo_sets(conversations=args.conversations):
        brain = brainset.brain
        index = BrainIndex.build(brain)
        texts = memory_texts(brain, index)
        parse = []
        for text in texts[: 40 * args.runs]:
            began = time.perf_counter()
            dates.named_dates(text, brainset.queries[0].now)
            parse.append(time.perf_counter() - began)
        hybrid = HybridIndex.build(brain, index, use_store)
        dated = [query for query in brainset.queries if dates.query_dates(query.text, query.now)]
        if not dated:
            print(f"{brainset.name}: no dated question")
            continue
        first, again, undated = [], [], []
        for run in range(args.runs):
            query = dated[run % len(dated)]
            plain = query.text
            for named in sorted({text for text in _spans(query.text)}, key=len, reverse=True):
                plain = plain.replace(named, "")
            for samples, text, clear in ((first, query.text, True), (again, query.text, False), (undated, plain, False)):
                if clear:
                    dates._text_dates.cache_clear()
                began = time.perf_counter()
                recall_in_mode(brain, text, mode="hybrid", source=use_store, e5_source=e5_store, index=index,
                               hybrid=hybrid, top=10, now=query.now)
                samples.append(time.perf_counter() - began)
        print(f"{brainset.name}: {len(texts)} memories, {len(dated)} dated questions")
        print(f"  one memory's dates read:                  {_ms(parse)}")
        print(f"  dated question, no dates known yet:       {_ms(first)}")
        print(f"  the same, dates known:                    {_ms(again)}")
        print(f"  the same question without its date:       {_ms(undated)}")
    return 0


def _spans(text: str) -> list[str]:
    """The parts of a question that name its date (to ask it again without them)."""
    from dateparser.search import search_dates

    return [span for span, _ in search_dates(text, languages=dates.LANGUAGES) or []]


if __name__ == "__main__":
    raise SystemExit(main())
