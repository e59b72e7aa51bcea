"""The shared table of open connections per worker, and when a worker sheds one."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cli.serving.balance import ConnectionTable, should_shed
from common.workers import pid_alive


@pytest.mark.parametrize(
    ("mine", "others", "shed"),
    [
        (5, [3], True),  # 8 connections, share 4
        (6, [2], True),
        (4, [4], False),
        (5, [4], False),  # 9 connections: share 5, nobody above it
        (2, [1], False),  # 3 connections: share 2
        (1, [0], False),  # a single connection stays where it is
        (3, [0, 0], True),  # three workers, share 1
        (3, [3, 2], False),  # 8 over three workers: share 3
        (4, [2, 2], True),
        (4, [4, 0], True),  # 8 over three workers: share 3, and one worker has none
        (7, [], False),  # no other live worker: nowhere to send it
    ],
)
def test_should_shed(mine: int, others: list[int], shed: bool) -> None:
    assert should_shed(mine, others) is shed


def test_counts_are_shared_with_forked_workers() -> None:
    table = ConnectionTable(2)
    table.join(0)
    table.add(3)
    with _other_worker(table, slot=1, connections=5) as pid:
        assert sorted(table.counts()) == sorted([(os.getpid(), 3), (pid, 5)])
        assert not table.over_share()  # 3 of 8 is under the share
        table.add(4)  # 7 against 5: over the share of 6, and the other is under it
        assert table.over_share()
    assert table.counts() == [(os.getpid(), 7)]  # the worker that left is not counted
    assert not table.over_share()


def test_a_worker_that_died_without_leaving_gets_no_connections() -> None:
    table = ConnectionTable(2)
    table.join(0)
    pid = os.fork()
    if pid == 0:  # killed outright: its slot still says zero connections
        table.join(1)
        os._exit(0)
    os.waitpid(pid, 0)
    table.add(6)
    assert (pid, 0) in table.counts()
    assert not table.over_share()  # six against a dead zero: keep them


def test_a_killed_worker_not_yet_reaped_gets_no_connections() -> None:
    """`serve` reaps its workers only at shutdown: one killed before stays a zombie till then."""
    table = ConnectionTable(2)
    table.join(0)
    pid = os.fork()
    if pid == 0:
        table.join(1)
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while pid_alive(pid):  # exited, and not reaped until the finally below: a zombie
            assert time.monotonic() < deadline, "a zombie still counts as alive"
            time.sleep(0.01)
        table.add(6)
        assert not table.over_share()  # six against a zombie's zero: keep them
    finally:
        os.waitpid(pid, 0)


def test_only_a_lasting_imbalance_sheds() -> None:
    table = ConnectionTable(2, shed_after=1.0)
    table.join(0)
    with _other_worker(table, slot=1, connections=2):
        table.add(6)
        assert table.over_share()
        assert not table.shed_now(100.0)  # just went over: wait
        assert not table.shed_now(100.9)
        assert table.shed_now(101.0)  # over for a second: shed
        table.add(-3)  # 3 against 2: at the share
        assert not table.shed_now(101.5)
        table.add(3)  # over again: the wait starts afresh
        assert not table.shed_now(102.0)
        assert table.shed_now(103.0)


@contextmanager
def _other_worker(table: ConnectionTable, *, slot: int, connections: int) -> Iterator[int]:
    """A forked process holding ``slot`` with ``connections`` open until the block ends."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            table.join(slot)
            table.add(connections)
            os.write(ready_w, b"x")
            os.read(go_r, 1)
            table.leave()
            code = 0
        finally:
            os._exit(code)
    try:
        assert os.read(ready_r, 1) == b"x"
        yield pid
    finally:
        os.write(go_w, b"x")
        os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, go_r, go_w):
            os.close(fd)
