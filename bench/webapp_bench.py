#!/usr/bin/env python3
"""Benchmark of the web app at /app: search page, memory page, page weight.

Starts a real store and a real connector (``brain-connector serve``) on loopback,
puts a brain of N memories (default 10,000, written with our engine) in the store,
signs in through the sign-in form like a browser (cookie + CSRF), warms the
working copy and the recall index, then measures:

* the search page (``GET /app/search?query=...``, 1-3 random words) and the
  memory page (``GET /app/memory/<random id>``): p50/p95 of the server's own time
  per request, read from the connector's request log (its ``ms`` field, measured
  around the whole ASGI app), beside the wall time seen by the client on loopback;
* the history diff: what changed between the store's snapshot (the brain as first
  uploaded) and the brain now (a second upload with one memory added and one pinned),
  both N memories: the snapshot downloaded, loaded and compared (server time);
* the Review page (``GET /app/review``): 50 pairs of similar memories waiting in the
  brain's queue file, the first 20 shown side by side with both texts (server p50/p95);
* the weight of a first visit: the home page's HTML plus every file it loads
  (stylesheet, icon), and the search page's HTML with 25 results.

Targets (issue #18): search page p50 <= 50 ms and memory page p50 <= 30 ms at
10,000 memories, Review page p50 <= 50 ms (issue #28), history diff of two 10,000-memory snapshots <= 1 s, first page
weight <= 150 KB. Figures are noisy on a shared machine.

Usage::

    .venv/bin/python bench/webapp_bench.py            # 10,000 memories, 200 requests per page
    .venv/bin/python bench/webapp_bench.py --quick    # 2,000 memories, 50 requests
    .venv/bin/python bench/webapp_bench.py --brain-cache /tmp/brains   # reuse the generated brain
    .venv/bin/python bench/webapp_bench.py --mode hybrid --brain-cache /tmp/brains   # searches in hybrid mode

``--mode`` is the search page's recall mode (``mode=`` in its address; default: none,
i.e. the server's, exact). In hybrid mode the first search also embeds every memory.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402

from connector.engine.format.archive import load_archive, pack_archive  # noqa: E402
from connector.engine.tending.review import Flag, FlagPairs  # noqa: E402
from connector.engine.writes.ops import Pin, connector_memorize  # noqa: E402
from connector_bench import add_users, percentiles, query, row, upload  # noqa: E402
from engine_bench import brain_archive  # noqa: E402
from tests.support.processes import console_script, free_port, run_server  # noqa: E402

TARGET_SEARCH_MS = 50.0
TARGET_MEMORY_MS = 30.0
TARGET_FIRST_PAGE_KB = 150.0
TARGET_DIFF_MS = 1000.0
TARGET_REVIEW_MS = 50.0
REVIEW_PAIRS = 50
DIFF_REQUESTS = 5


def sign_in(http: httpx.Client, token: str) -> None:
    """The sign-in form, as a browser fills it in."""
    page = http.get("/app/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    done = http.post("/app/signin", data={"csrf": csrf, "token": token, "access": "write"})
    if done.status_code != 303:
        raise RuntimeError(f"sign-in failed: {done.status_code}")


def server_ms(log: Path, path_prefix: str, since_line: int) -> list[float]:
    """The ``ms`` of each logged request to ``path_prefix`` after line ``since_line``, in seconds."""
    samples = []
    for line in log.read_text().splitlines()[since_line:]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == "request" and str(entry.get("path", "")).startswith(path_prefix):
            samples.append(float(entry["ms"]) / 1000)
    return samples


def timed_pages(http: httpx.Client, paths: list[str]) -> list[float]:
    samples = []
    for path in paths:
        began = time.perf_counter()
        response = http.get(path)
        samples.append(time.perf_counter() - began)
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code}")
    return samples


def first_visit_bytes(http: httpx.Client, path: str) -> tuple[int, int]:
    """(HTML bytes, HTML + every stylesheet/icon it links) of one page."""
    html = http.get(path).content
    total = len(html)
    for linked in re.findall(rb'<link[^>]+href="([^"]+)"', html):
        total += len(http.get(linked.decode()).content)
    return len(html), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="2,000 memories, 50 requests")
    parser.add_argument("--brain-cache", type=Path, default=None, metavar="DIR",
                        help="keep/reuse the generated brain archive here (shared format with engine_bench.py)")
    parser.add_argument("--mode", choices=("exact", "hybrid"), default=None,
                        help="the search page's recall mode (default: the server's, exact)")
    args = parser.parse_args()
    if args.quick:
        args.memories, args.requests = 2000, 50

    print(f"web app benchmark: {args.memories} memories, {args.requests} requests per page"
          + (f", {args.mode} search" if args.mode else ""))
    mode = f"&mode={args.mode}" if args.mode else ""
    archive, _ = brain_archive(args.memories, datetime.now(UTC), args.brain_cache)
    ids = list((load_archive(archive).read_json("index.json") or {})["memories"])
    rnd = random.Random(11)

    with tempfile.TemporaryDirectory(prefix="webapp-bench-") as tmp:
        work = Path(tmp)
        store_port, connector_port = free_port(), free_port()
        store_env = {"STORE_RATE_UPLOADS_PER_MIN": "100000", "STORE_RATE_REQUESTS_PER_MIN": "100000", "STORE_QUIET": "1"}
        with run_server(
            [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", str(store_port),
             "--data", str(work / "store")],
            port=store_port, log_path=work / "store.log", env=store_env,
        ) as store:
            [(token, _)] = add_users(work / "store", ["bench"])
            upload(store.base_url, token, archive)
            # A second version: the first becomes the store's snapshot, for the history diff.
            changed = load_archive(archive)
            connector_memorize("A change for the history diff.").apply(changed, datetime.now(UTC))
            Pin(ids[0]).apply(changed, datetime.now(UTC))
            # Pairs of similar memories waiting for review (as flagged writes would leave them).
            FlagPairs([Flag(ids[2 * k + 1], ids[2 * k + 2], "duplicate", 0.9) for k in range(REVIEW_PAIRS)],
                      []).apply(changed, datetime.now(UTC))
            upload(store.base_url, token, pack_archive(changed))
            env = {"CONNECTOR_STORE_URL": store.base_url, "CONNECTOR_IDP": "static",
                   "CONNECTOR_STATE_DIR": str(work / "state"), "CONNECTOR_PORT": str(connector_port),
                   "CONNECTOR_LOG_LEVEL": "info"}
            log = work / "connector.log"
            with run_server([console_script("brain-connector"), "serve"], port=connector_port, env=env,
                            log_path=log, health_path="/health/live") as connector:
                # Long enough for the first hybrid search to embed 10,000 memories on a loaded machine.
                with httpx.Client(base_url=connector.base_url, timeout=900) as http:
                    sign_in(http, token)
                    began = time.perf_counter()
                    warm = http.get(f"/app/search?query=warm+up{mode}")
                    warm.raise_for_status()
                    if args.mode:  # the page searched in (and shows) the mode asked for
                        assert f'<option value="{args.mode}" selected>' in warm.text, "recall mode not applied"
                    row("first search (pull + index build" + (", embedding" if args.mode == "hybrid" else "") + ")", f"{(time.perf_counter() - began) * 1000:.0f} ms")
                    for path, target, label in (
                        ("/app/search", TARGET_SEARCH_MS, "search page"),
                        ("/app/memory/", TARGET_MEMORY_MS, "memory page"),
                        ("/app/review", TARGET_REVIEW_MS, "review page"),
                    ):
                        paths = ([f"/app/search?query={query(rnd).replace(' ', '+')}{mode}" for _ in range(args.requests)]
                                 if label == "search page" else
                                 ["/app/review"] * args.requests if label == "review page" else
                                 [f"/app/memory/{rnd.choice(ids)}" for _ in range(args.requests)])
                        since = len(log.read_text().splitlines())
                        wall = timed_pages(http, paths)
                        server = server_ms(log, path, since)
                        s50, s95 = percentiles(server)
                        w50, w95 = percentiles(wall)
                        verdict = "meets" if s50 <= target else "misses"
                        row(f"{label}: server time p50 / p95", f"{s50:.1f} / {s95:.1f} ms",
                            f"{verdict} target {target:.0f} ms (client wall {w50:.1f} / {w95:.1f} ms)")
                    version = re.search(r"/app/history/diff\?version=([^\"]+)\"", http.get("/app/history").text).group(1)  # type: ignore[union-attr]
                    since = len(log.read_text().splitlines())
                    timed_pages(http, [f"/app/history/diff?version={version}"] * DIFF_REQUESTS)
                    d50, d95 = percentiles(server_ms(log, "/app/history/diff", since))
                    row("history diff (snapshot vs now): server p50 / p95", f"{d50:.0f} / {d95:.0f} ms",
                        f"{'meets' if d50 <= TARGET_DIFF_MS else 'misses'} target {TARGET_DIFF_MS:.0f} ms")
                    html, total = first_visit_bytes(http, "/app")
                    row("first page (home): HTML / with CSS and icon", f"{html / 1024:.1f} / {total / 1024:.1f} KB",
                        f"target {TARGET_FIRST_PAGE_KB:.0f} KB")
                    html, total = first_visit_bytes(http, "/app/search?query=" + query(rnd).replace(" ", "+") + mode)
                    row("search page, 25 results: HTML / with CSS and icon", f"{html / 1024:.1f} / {total / 1024:.1f} KB")


if __name__ == "__main__":
    main()
