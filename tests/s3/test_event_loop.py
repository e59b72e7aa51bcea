"""A slow object store must not stall other requests: S3 calls run off the event loop.

The store talks to moto through a loopback proxy that holds every request for ``DELAY``
seconds. Concurrent requests that each wait on S3 then overlap (about one delay in all)
instead of queueing behind each other on the event loop (one delay each).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.contract.harness import running_store
from tests.s3.servers import S3Service, wait_for_token

DELAY = 0.4
CONCURRENT = 8


class DelayingProxy:
    """TCP proxy on 127.0.0.1 that waits ``delay`` seconds before passing on each read from a client."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay = 0.0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        with client, server:
            try:
                self._relay(client, server)
            except OSError:
                return  # either side reset the connection (a client's pool closing it): the pipe ends

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        while not self._closed.is_set():
            ready, _, _ = select.select([client, server], [], [], 0.5)
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                if sock is client:
                    if self.delay:
                        time.sleep(self.delay)
                    server.sendall(data)
                else:
                    client.sendall(data)

    def close(self) -> None:
        """Stop accepting and end every open connection (the service looks gone)."""
        self._closed.set()
        self._listener.close()


@contextmanager
def slow_s3(moto: S3Service) -> Iterator[DelayingProxy]:
    target = urlsplit(moto.endpoint)
    proxy = DelayingProxy((target.hostname or "127.0.0.1", target.port or 80))
    try:
        yield proxy
    finally:
        proxy.close()


def _timed_lists(url: str, token: str, count: int) -> float:
    """Seconds for ``count`` concurrent GET /api/brains (each must answer 200)."""
    headers = {"Authorization": f"Bearer {token}"}

    def one(_: int) -> int:
        return httpx.get(url + "/api/brains", headers=headers, timeout=60).status_code

    started = time.monotonic()
    with ThreadPoolExecutor(count) as pool:
        codes = list(pool.map(one, range(count)))
    assert codes == [200] * count
    return time.monotonic() - started


def test_concurrent_requests_overlap_their_s3_waits(moto: S3Service, tmp_path: Path) -> None:
    with slow_s3(moto) as proxy:
        env = {**moto.store_env(moto.new_bucket()), "STORE_S3_ENDPOINT_URL": proxy.endpoint}
        with running_store(tmp_path / "spool", env=env) as store:
            token = store.add_user("patient")
            wait_for_token(store.url, token)
            # warm: brain created, records cached, a pooled S3 connection per concurrent call
            assert _timed_lists(store.url, token, CONCURRENT) < 60
            proxy.delay = DELAY
            single = min(_timed_lists(store.url, token, 1) for _ in range(2))
            assert single >= DELAY  # the list really waits on S3
            # best of two: a loaded machine may stall one round, never halve a serial one
            together = min(_timed_lists(store.url, token, CONCURRENT) for _ in range(2))
    # serialised on the event loop this would be at least CONCURRENT x single
    assert together < 4 * single, f"{CONCURRENT} concurrent lists took {together:.2f}s, one {single:.2f}s"


def test_ready_checks_the_bucket(moto: S3Service, tmp_path: Path) -> None:
    with slow_s3(moto) as proxy:
        env = {**moto.store_env(moto.new_bucket()), "STORE_S3_ENDPOINT_URL": proxy.endpoint}
        with running_store(tmp_path / "spool", env=env) as store:
            ready = httpx.get(store.url + "/health/ready", timeout=30)
            assert ready.status_code == 200, ready.text
            proxy.close()
            started = time.monotonic()
            gone = httpx.get(store.url + "/health/ready", timeout=30)
            assert gone.status_code == 503
            assert gone.json()["error"] == "object store bucket is not reachable"
            assert time.monotonic() - started < 15  # short probe timeout, no retries
            assert httpx.get(store.url + "/health/live", timeout=10).status_code == 200
