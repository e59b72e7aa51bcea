"""Leases on held-write journal documents (connector/workcopy/leases.py), over the directory backend:
a live holder keeps its lease by renewing it, a holder on another host loses it only once it
expired, and of many processes racing for an expired lease exactly one gets it."""

from __future__ import annotations

import threading
from pathlib import Path

from common.docstore import open_document_store
from connector.workcopy.leases import Holder, LeaseKeeper

LEASE_S = 30.0
KEY = "held/abc.claim"


class Clock:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _elsewhere(name: str) -> Holder:
    """A holder on another host: its death is known only from its lease's expiry."""
    return Holder(token=name, host="another-host", pid=1, start="1")


def test_a_holder_elsewhere_loses_its_lease_only_once_it_expired(tmp_path: Path) -> None:
    state, clock = open_document_store(tmp_path), Clock()
    theirs = LeaseKeeper(state, LEASE_S, clock=clock, holder=_elsewhere("theirs"))
    mine = LeaseKeeper(state, LEASE_S, clock=clock, holder=_elsewhere("mine"))
    assert theirs.acquire(KEY)
    clock.now += LEASE_S - 1
    assert not mine.acquire(KEY)  # still theirs
    clock.now += 2
    assert mine.acquire(KEY) and KEY in mine  # expired: taken over
    assert theirs.renew() == [KEY] and KEY not in theirs  # the stalled holder notices it lost it
    assert not theirs.acquire(KEY)


def test_a_live_holder_keeps_its_lease_by_renewing_it(tmp_path: Path) -> None:
    state, clock = open_document_store(tmp_path), Clock()
    holder = LeaseKeeper(state, LEASE_S, clock=clock, holder=_elsewhere("holder"))
    other = LeaseKeeper(state, LEASE_S, clock=clock, holder=_elsewhere("other"))
    assert holder.acquire(KEY)
    for _ in range(10):  # five lease lengths, renewed on every pass (as the maintenance pass does)
        clock.now += LEASE_S / 2
        assert holder.renew() == []
        assert not other.acquire(KEY)
    holder.release(KEY)
    assert state.get(KEY) is None and other.acquire(KEY)  # released: free at once


def test_a_dead_process_of_this_host_loses_its_lease_at_once(tmp_path: Path) -> None:
    state, clock = open_document_store(tmp_path), Clock()
    here = Holder.this_process()
    dead = Holder(token="dead", host=here.host, pid=here.pid, start="not-its-start-time")  # a pid reused since
    assert LeaseKeeper(state, LEASE_S, clock=clock, holder=dead).acquire(KEY)
    assert LeaseKeeper(state, LEASE_S, clock=clock).acquire(KEY)  # no need to wait for the expiry


def test_of_many_processes_racing_for_an_expired_lease_exactly_one_gets_it(tmp_path: Path) -> None:
    state, clock = open_document_store(tmp_path), Clock()
    assert LeaseKeeper(state, LEASE_S, clock=clock, holder=_elsewhere("dead")).acquire(KEY)
    clock.now += LEASE_S + 1
    racers = [LeaseKeeper(state, LEASE_S, clock=clock, holder=_elsewhere(f"r{index}")) for index in range(8)]
    won: list[bool] = [False] * len(racers)
    start = threading.Barrier(len(racers))

    def race(index: int) -> None:
        start.wait()
        won[index] = racers[index].acquire(KEY)

    threads = [threading.Thread(target=race, args=(index,)) for index in range(len(racers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sum(won) == 1
