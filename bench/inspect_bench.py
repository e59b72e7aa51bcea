#!/usr/bin/env python3
"""What validating one uploaded archive costs the store (``store.archive.inspect``), in process.

Every upload that is new to a brain is inflated and its tar headers checked before it is
committed, so this is CPU the store spends on every real push. Two archives:

* ``random``: the store bench's upload archive (1 MiB of incompressible data in 64 files):
  mostly inflating;
* ``brain``: a brain-like archive of many small Markdown files (default 2,000 files of
  ~3 KiB of text, ~1 MiB compressed): mostly tar headers, as real brains are.

Printed per archive (median of ``--runs``, CPU time): validation, inflating alone (the
floor: zlib-ng over the same bytes in the inspector's default steps) and the rest per tar entry.

Usage::

    .venv/bin/python bench/inspect_bench.py
    .venv/bin/python bench/inspect_bench.py --files 10000 --runs 9
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zlib_ng import zlib_ng  # noqa: E402

from store.archive.inspect import STEP, inspect_bytes  # noqa: E402
from store_bench import MIB, make_archive  # noqa: E402  (this folder: the script's own)

WORDS = ("memory note project meeting idea decision person place tool reason detail plan "
         "result question answer context summary link source date").split()


def brain_archive(files: int, seed: int = 1) -> bytes:
    """A tar.gz shaped like a brain: directories of small Markdown files with front matter."""
    rng = random.Random(seed)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for directory in ("memories", *(f"memories/{d:02d}" for d in range(16))):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            archive.addfile(info)
        for index in range(files):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(200, 600)))
            text = f"---\nid: m{index:06d}\ntags: [{rng.choice(WORDS)}]\n---\n{words}\n".encode()
            info = tarfile.TarInfo(f"memories/{index % 16:02d}/m{index:06d}-{rng.choice(WORDS)}.md")
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text))
    return buffer.getvalue()


def inflate(data: bytes, step: int = STEP) -> int:
    """Inflate ``data`` as the inspector does (bounded steps in and out); the tar size."""
    gz, size = zlib_ng.decompressobj(wbits=31), 0
    for start in range(0, len(data), step):
        piece = data[start : start + step]
        while True:
            out = gz.decompress(piece, step)
            size += len(out)
            piece = gz.unconsumed_tail
            if not piece and len(out) < step:
                break
    return size


def median_ms(action: Callable[[], object], runs: int) -> float:
    """Median CPU time of ``action`` in milliseconds (process time: other load on the machine counts less)."""
    times = []
    for _ in range(runs):
        started = time.process_time()
        action()
        times.append(time.process_time() - started)
    return statistics.median(times) * 1000


def measure(path: Path, runs: int) -> str:
    """One table row for the archive in ``path``."""
    data = path.read_bytes()
    summary = inspect_bytes(data)
    validate = median_ms(lambda: inspect_bytes(data), runs)
    floor = median_ms(lambda: inflate(data), runs)
    per_entry = (validate - floor) / summary.entries * 1000
    return (f"{path.stem:<8} {len(data):>11,} {summary.inflated_bytes:>11,} {summary.entries:>8,} "
            f"{validate:>7.1f}ms {floor:>6.1f}ms {per_entry:>8.1f}us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000, help="files in the brain-like archive (default 2000)")
    parser.add_argument("--runs", type=int, default=15, help="runs per archive, median printed (default 15)")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # internal: one archive, in a child
    args = parser.parse_args(argv)
    if args.measure:
        print(measure(args.measure, args.runs), flush=True)
        return 0
    print(f"{'archive':<8} {'compressed':>11} {'tar':>11} {'entries':>8} {'validate':>9} {'inflate':>8} "
          f"{'rest/entry':>10}", flush=True)
    with tempfile.TemporaryDirectory(prefix="inspect-bench-") as tmp:
        for name, data in (("random", make_archive(MIB, 64, seed=100)), ("brain", brain_archive(args.files))):
            path = Path(tmp) / f"{name}.tgz"
            path.write_bytes(data)
            # Each archive in a fresh process: what was allocated before (here, building the
            # archives) changes how malloc hands out inflate's buffers, by up to 1.8x.
            subprocess.run([sys.executable, __file__, "--measure", str(path), "--runs", str(args.runs)], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
