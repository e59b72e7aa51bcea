"""Both servers keep an idle keep-alive connection longer than their HTTP clients do.

Whoever closes an idle connection first must be the client: a request sent on a
connection the server is just closing fails (httpx raises ReadError; a proxy answers
502). httpx, which the MCP SDK's client and the connector's store client use, drops
idle connections after 5 s, uvicorn's own default; so the servers keep them longer
(`cli.serving.KEEP_ALIVE_SECONDS`), and this checks it on real processes.
"""

from __future__ import annotations

import http.client
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cli.serving import KEEP_ALIVE_SECONDS
from tests.connector.conftest import running_store
from tests.connector.oauth.live import running_connector

HTTPX_KEEPALIVE_EXPIRY_S = 5.0  # httpx.Limits' default keepalive_expiry


def get_twice(port: int, path: str, pause_s: float) -> list[int]:
    """Two GETs on one connection, ``pause_s`` apart: their statuses (0: the connection was closed)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    statuses = []
    try:
        for number in range(2):
            if number:
                time.sleep(pause_s)
                assert conn.sock is not None, "the first answer closed the connection"
                sock = conn.sock
            try:
                conn.request("GET", path)
                answer = conn.getresponse()
                answer.read()
                statuses.append(answer.status)
            except (http.client.RemoteDisconnected, ConnectionError):
                statuses.append(0)
            if number:
                assert conn.sock is sock, "the client opened a new connection"
    finally:
        conn.close()
    return statuses


@pytest.mark.slow
def test_idle_connections_outlive_an_httpx_clients(tmp_path: Path) -> None:
    assert KEEP_ALIVE_SECONDS > HTTPX_KEEPALIVE_EXPIRY_S + 1
    (tmp_path / "store").mkdir()
    with running_store(tmp_path / "store") as store:
        with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as connector:
            ports = [store.port, int(connector.base_url.rsplit(":", 1)[1])]
            # Both servers' connections idle at once (the pause is the test's whole length).
            with ThreadPoolExecutor(len(ports)) as pool:
                answers = list(pool.map(lambda port: get_twice(port, "/health/live", HTTPX_KEEPALIVE_EXPIRY_S + 1), ports))
            for port, statuses in zip(ports, answers, strict=True):
                assert statuses == [200, 200], port
