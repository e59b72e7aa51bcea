"""Working copies and indexes are kept out of the cyclic collector's walks; drops give back what it froze."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator

import pytest

from connector.workcopy.longlived import LongLivedObjects
from tests.support.processes import REPO_ROOT


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_loaded_freezes_and_settle_is_rate_limited() -> None:
    clock = [100.0]
    objects = LongLivedObjects(settle_every_s=60.0, monotonic=lambda: clock[0])
    kept = [{"memory": number} for number in range(10_000)]  # a copy's long-lived objects
    objects.loaded()
    assert gc.get_freeze_count() >= len(kept)
    assert not objects.maybe_settle()  # nothing dropped: nothing to do
    objects.dropped()
    assert objects.maybe_settle()
    objects.dropped()
    clock[0] += 30.0
    assert not objects.maybe_settle()  # within the interval: later
    clock[0] += 31.0
    assert objects.maybe_settle()


def test_a_cycle_frozen_by_accident_is_collected_after_a_drop() -> None:
    objects = LongLivedObjects(settle_every_s=0.0)

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # type: ignore[attr-defined]
    alive = weakref.ref(cycle)
    objects.loaded()
    del cycle
    gc.collect()
    assert alive() is not None  # frozen: ordinary collections leave it
    objects.dropped()
    assert objects.maybe_settle()
    assert alive() is None


_DROP_AND_MEASURE = """
import gc, random, sys
from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.format.brain import Brain
from connector.workcopy.longlived import give_back_memory

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])

# Memory files of varied sizes, as in a real brain: glibc keeps the holes they leave.
rnd = random.Random(1)
text = " ".join(f"word{n}" for n in range(600)).encode()
archive = pack_archive(Brain({f"memories/m{n:05d}.md": text[: rnd.randint(300, 3000)] for n in range(20_000)}))
before = rss()
copies = [load_archive(archive) for _ in range(4)]
loaded = rss()
del copies
gc.collect()
dropped = rss()
if sys.argv[1] == "trim":
    give_back_memory()
print(before, loaded, dropped, rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc")
def test_memory_of_dropped_copies_goes_back_to_the_system() -> None:
    def measure(mode: str) -> list[int]:
        done = subprocess.run([sys.executable, "-c", _DROP_AND_MEASURE, mode], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
        assert done.returncode == 0, done.stderr
        return [int(value) for value in done.stdout.split()]

    before, loaded, dropped, trimmed = measure("trim")
    grown = loaded - before
    assert grown > 50_000  # KiB: four copies of 20,000 small files
    # Without handing it back, most of it stays resident (glibc keeps freed small blocks) ...
    assert dropped - before > grown / 4
    # ... with it, at most a quarter does.
    assert trimmed - before < grown / 4, (before, loaded, dropped, trimmed)
