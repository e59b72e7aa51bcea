"""`brain-store serve --workers 2` spreads keep-alive connections that landed unevenly.

Connections are opened until one worker holds six of eight (the kernel places them by a
hash, so the test arranges the imbalance instead of hoping for it); then every connection
makes requests. Once it has been over its share for a second (SHED_AFTER), the crowded
worker answers some of them with ``Connection: close`` until each worker holds four; no
request fails, and once balanced nothing more is shed.
Which worker holds a connection is read from /proc (Linux only, like SO_REUSEPORT here).
"""

from __future__ import annotations

import http.client
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.harness import Store, running_store

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("store-e2e-balance")]

CONNECTIONS = 8
HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, str]]:
    with running_store(tmp_path_factory.mktemp("balance") / "data", env={"STORE_RATE_LIMITS": "off"}, workers=2) as running:
        yield running, running.add_user("balancer")


def _workers(leader: int) -> list[int]:
    """The leader and the processes it forked."""
    found = [leader]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == leader:
                found.append(int(entry.name))
    return found


def _owners(server_port: int, workers: list[int]) -> dict[int, int]:
    """Client port -> pid of the worker holding the server side of that connection."""
    inode_owner: dict[str, int] = {}
    for pid in workers:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inode_owner[target[8:-1]] = pid
    owners: dict[int, int] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        remote_port = int(fields[2].split(":")[1], 16)
        if local_port == server_port and fields[3] == "01" and fields[9] in inode_owner:
            owners[remote_port] = inode_owner[fields[9]]
    return owners


def _client_port(conn: http.client.HTTPConnection) -> int:
    assert conn.sock is not None
    return int(conn.sock.getsockname()[1])


def _placed(conns: list[http.client.HTTPConnection], port: int, workers: list[int]) -> dict[int, int]:
    """Client port -> worker, once every open connection was accepted (bounded wait)."""
    wanted = {_client_port(c) for c in conns if c.sock is not None}
    owners: dict[int, int] = {}
    for _ in range(100):
        owners = _owners(port, workers)
        if wanted <= owners.keys():
            break
        time.sleep(0.05)
    assert wanted <= owners.keys(), "the server did not accept every connection"
    return {p: owners[p] for p in wanted}


def _uneven_connections(port: int, workers: list[int]) -> list[http.client.HTTPConnection]:
    """Eight open connections, six held by one worker and two by the other."""
    held: dict[int, list[http.client.HTTPConnection]] = {pid: [] for pid in workers}
    for _ in range(200):  # bounded: each worker gets about half of them
        sizes = sorted(len(conns) for conns in held.values())
        if sizes[0] >= 2 and sizes[1] >= 6:
            break
        conn = http.client.HTTPConnection(HOST, port, timeout=30)
        conn.connect()
        held[_placed([conn], port, workers)[_client_port(conn)]].append(conn)
    crowded, other = sorted(held, key=lambda pid: len(held[pid]), reverse=True)
    assert len(held[crowded]) >= 6 and len(held[other]) >= 2, "could not arrange an uneven split"
    kept = held[crowded][:6] + held[other][:2]
    for conn in held[crowded][6:] + held[other][2:]:
        conn.close()
    for _ in range(100):  # until the workers noticed the closed ones (bounded)
        if len(_owners(port, workers)) == len(kept):
            break
        time.sleep(0.05)
    return kept


def test_uneven_keep_alive_connections_are_spread_over_both_workers(store: tuple[Store, str]) -> None:
    running, token = store
    port = int(running.url.rsplit(":", 1)[1])
    workers = _workers(running.server.process.pid)
    assert len(workers) == 2, workers
    conns = _uneven_connections(port, workers)
    headers = {"Authorization": f"Bearer {token}"}
    closed = 0
    try:
        deadline = time.monotonic() + 30  # bounded: a worker sheds after SHED_AFTER over its share,
        while time.monotonic() < deadline:  # and each reconnect lands elsewhere with probability 1/2
            for conn in conns:
                conn.request("GET", "/api/brains", headers=headers)
                response = conn.getresponse()
                assert response.status == 200, response.read()
                assert b'"name":"default"' in response.read()
                if response.getheader("Connection", "").lower() == "close":
                    closed += 1
                    conn.close()
                    conn.connect()
            spread = Counter(_placed(conns, port, workers).values())
            if sorted(spread.values()) == [4, 4]:
                break
            time.sleep(0.05)
        assert sorted(spread.values()) == [4, 4], spread
        assert closed >= 2  # at least two connections had to move

        # balanced: nothing more is shed
        for _ in range(3):
            for conn in conns:
                conn.request("GET", "/api/brains", headers=headers)
                response = conn.getresponse()
                response.read()
                assert response.status == 200
                assert response.getheader("Connection", "").lower() != "close"
    finally:
        for conn in conns:
            conn.close()
