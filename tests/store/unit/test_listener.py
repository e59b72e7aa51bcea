"""The listening socket of `brain-store serve`: a clean error when the port is taken, and
with several workers one socket per process that the kernel balances (SO_REUSEPORT)."""

from __future__ import annotations

import os
import select
import socket
import subprocess
from pathlib import Path

import click
import pytest

from cli.serving.workers import bind_listener
from tests.support.processes import console_script

HOST = "127.0.0.1"


def _accept_all(listeners: list[socket.socket], expected: int) -> list[int]:
    """Accept until ``expected`` connections arrived in total; how many each listener got."""
    counts = [0] * len(listeners)
    accepted: list[socket.socket] = []
    for _ in range(expected * 4):  # bounded: each round accepts at least one or times out
        if sum(counts) >= expected:
            break
        ready, _, _ = select.select(listeners, [], [], 5.0)
        assert ready, "connections were made but no listener became readable"
        for sock in ready:
            conn, _ = sock.accept()
            accepted.append(conn)
            counts[listeners.index(sock)] += 1
    for conn in accepted:
        conn.close()
    return counts


def test_workers_sockets_share_the_port_and_both_get_connections() -> None:
    first = bind_listener(HOST, 0, shared_port=True)
    port = first.getsockname()[1]
    second = bind_listener(HOST, port, shared_port=True)
    clients: list[socket.socket] = []
    try:
        for sock in (first, second):
            sock.listen(64)
        for _ in range(40):
            clients.append(socket.create_connection((HOST, port), timeout=5))
        counts = _accept_all([first, second], 40)
    finally:
        for sock in (*clients, first, second):
            sock.close()
    assert sum(counts) == 40
    # the kernel hashes each connection to one socket of the group: with one shared socket a
    # burst often went mostly to one worker; here each gets a share (all 40 on one: p = 2**-39)
    assert min(counts) >= 1, counts


def test_taken_port_is_a_clean_error() -> None:
    holder = bind_listener(HOST, 0)
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        with pytest.raises(click.ClickException, match=f"cannot listen on {HOST}:{port}"):
            bind_listener(HOST, port)
        # a second worker group cannot join a port held by a socket without SO_REUSEPORT
        with pytest.raises(click.ClickException):
            bind_listener(HOST, port, shared_port=True)
    finally:
        holder.close()


def test_serve_on_a_taken_port_exits_with_a_message(tmp_path: Path) -> None:
    holder = bind_listener(HOST, 0)
    holder.listen(1)
    port = holder.getsockname()[1]
    data = tmp_path / "data"
    env = {**os.environ, "STORE_DATA_DIR": str(data)}
    try:
        result = subprocess.run(
            [console_script("brain-store"), "serve", "--host", HOST, "--port", str(port), "--data", str(data)],
            capture_output=True, text=True, timeout=60, env=env,
        )
    finally:
        holder.close()
    assert result.returncode != 0
    assert f"cannot listen on {HOST}:{port}" in result.stderr
    assert "Traceback" not in result.stderr
