#!/usr/bin/env python3
"""The web app's pages for a brain whose memories carry huge tag lists.

An archive another client wrote may hold memories of 1,000 tags of 1,000 characters (more than
any write of the connector takes: `over_limit`). Starts a real store and a real connector on
loopback, uploads a brain of ``--memories`` such memories and one ordinary one, signs in like a
browser and times each page (the best of ``--runs`` after the first, which loads the brain and
builds its indexes), printing its size.

Usage::

    .venv/bin/python bench/webapp_tags_bench.py                      # 3 memories of 1,000 tags of 1,000 characters
    .venv/bin/python bench/webapp_tags_bench.py --tags 0              # the same brain without tags, to compare
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from connector.engine.format.archive import pack_archive  # noqa: E402
from connector.engine.format.brain import Brain  # noqa: E402
from connector.engine.writes.memorize import MemoryInput  # noqa: E402
from connector.engine.writes.ops import Memorize  # noqa: E402
from tests.connector.conftest import brains_of, running_store, upload_raw  # noqa: E402
from tests.connector.test_e2e_tools import connector  # noqa: E402
from tests.connector.webapp.conftest import signed_in_browser  # noqa: E402


def brain_with_tags(memories: int, tags: int, length: int) -> tuple[Brain, list[str]]:
    """A brain of ``memories`` memories of ``tags`` tags of ``length`` characters (also their
    context's topics, as the connector writes them), and one ordinary memory; their ids."""
    brain = Brain()
    written = []
    for number in range(memories):
        names = [f"tag{number}-{count}-".ljust(length, "x") for count in range(tags)]
        written.append(MemoryInput(title=f"Huge tags {number}", type="learning", path="notes/", tags=names,
                                   content=f"Boiler note number {number} about the heating.",
                                   encoding_context={"topics": names}))
    written.append(MemoryInput(title="Plain", type="learning", path="notes/", tags=["house"],
                               content="The boiler is serviced in October."))
    stored = Memorize(written).apply(brain, datetime.now(UTC))["stored"]
    return brain, [str(item["id"]) for item in stored]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=3)
    parser.add_argument("--tags", type=int, default=1000)
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    brain, ids = brain_with_tags(args.memories, args.tags, args.length)
    with tempfile.TemporaryDirectory(prefix="webapp-tags-bench-") as scratch:
        where = Path(scratch)
        with running_store(where) as store:
            user = store.add_user("bench")
            brain_id = brains_of(store.url, user.token)[0]["id"]
            assert upload_raw(store.url, user.token, brain_id, pack_archive(brain), {"If-None-Match": "*"}).status_code == 200
            with connector(where / "connector", store) as server:
                http = signed_in_browser(server.base_url, user.token, "127.0.0.1")
                pages = {"home": "/app", "memory": f"/app/memory/{ids[0]}", "edit": f"/app/memory/{ids[0]}/edit",
                         "search exact": "/app/search?query=boiler&mode=exact",
                         "search hybrid": "/app/search?query=boiler&mode=hybrid", "tag filter": "/app/search?tag=house"}
                print(f"{args.memories} memories of {args.tags} tags of {args.length} characters")
                for name, url in pages.items():
                    times = []
                    for _ in range(args.runs + 1):
                        began = time.perf_counter()
                        answer = http.get(url, timeout=600)
                        times.append(time.perf_counter() - began)
                    print(f"{name:14} {answer.status_code} {len(answer.content):>10,} bytes  best {min(times[1:]) * 1000:7.1f} ms"
                          f"  (first {times[0] * 1000:,.0f} ms)")


if __name__ == "__main__":
    main()
