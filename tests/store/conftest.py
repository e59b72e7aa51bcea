"""Shared helpers for the store's core tests: archives, a running store, users."""

from __future__ import annotations

import http.client
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from contract.conformance.archives import make_archive as conformance_archive
from tests.support.processes import ServerProcess, connection_owner, console_script, free_port, run_command, run_server


def make_archive(files: dict[str, bytes] | None = None, *, dirs: tuple[str, ...] = ()) -> bytes:
    """A gzip-compressed tar holding ``files`` (path -> content), deterministic.

    The conformance suite's builder (tests may use the suite, never the other way round).
    """
    return conformance_archive(files or {}, dirs=dirs)


def brain_files(n: int, tag: str = "") -> dict[str, bytes]:
    """``n`` small memory files."""
    return {f"memories/m{i}.md": f"---\ntitle: {tag}{i}\n---\nbody {tag}{i}\n".encode() for i in range(n)}


def cli(*args: str, data: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``brain-store`` with ``--data`` appended; fails the test on a non-zero exit."""
    result = run_command([console_script("brain-store"), *args, "--data", str(data)], timeout=60, env=env)
    assert result.returncode == 0, result.stderr + result.stdout
    return result


def add_user(data: Path, name: str, email: str = "") -> str:
    """Create a user through the CLI; returns the token (its last output line)."""
    args = ["user", "add", name] + (["--email", email] if email else [])
    return cli(*args, data=data).stdout.strip().splitlines()[-1]


@dataclass
class Store:
    """A running store process with its data dir."""

    server: ServerProcess
    data: Path
    workers: int = 1

    @property
    def url(self) -> str:
        return self.server.base_url

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def answered_by(self, method: str, path: str, token: str | None = None) -> tuple[httpx.Response, int]:
        """One request on a new connection, and the pid of the worker that accepted the
        connection (read from /proc before the request is sent: the connection is then open
        whatever the answer does to it)."""
        url = httpx.URL(self.url)
        connection = http.client.HTTPConnection(url.host, url.port, timeout=30)
        try:
            connection.connect()
            assert connection.sock is not None
            client_port = connection.sock.getsockname()[1]
            deadline = time.monotonic() + 10
            while (pid := connection_owner(self.server.process.pid, url.port or 0, client_port)) is None:
                assert time.monotonic() < deadline, f"no worker of the store took the connection from port {client_port}"
                time.sleep(0.01)
            connection.request(method, path, headers={"Authorization": f"Bearer {token}"} if token else {})
            answer = connection.getresponse()
            return httpx.Response(answer.status, headers=answer.getheaders(), content=answer.read()), pid
        finally:
            connection.close()

    def on_every_worker(self, method: str, path: str, token: str | None = None, *,
                        attempts: int = 60) -> list[httpx.Response]:
        """The same request, each time on a new connection, until every worker (the leader
        serves too: cli/serving/workers.py) has answered it, at most ``attempts`` times; fails
        the test if some worker never did. Returns every answer: the caller checks them all."""
        answers: list[httpx.Response] = []
        seen: set[int] = set()
        for _ in range(attempts):
            response, pid = self.answered_by(method, path, token)
            answers.append(response)
            seen.add(pid)
            if len(seen) == self.workers:
                return answers
        raise AssertionError(f"{method} {path}: only workers {sorted(seen)} of {self.workers} answered in {attempts} tries")


@contextmanager
def start_store(
    tmp: Path, *, workers: int = 1, env: dict[str, str] | None = None, data: Path | None = None
) -> Iterator[Store]:
    """A real ``brain-store serve`` on a free port (context manager)."""
    data = data or tmp / "data"
    port = free_port()
    argv = [console_script("brain-store"), "serve", "--port", str(port), "--data", str(data)]
    if workers > 1:
        argv += ["--workers", str(workers)]
    full_env = {"STORE_QUIET": "1", "STORE_RATE_LIMITS": "off", **(env or {})}
    with run_server(argv, port=port, log_path=tmp / f"store-{port}.log", env=full_env) as server:
        yield Store(server, data, workers)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store process per test module (tests create their own users/brains)."""
    with start_store(tmp_path_factory.mktemp("store")) as running:
        yield running


_counter = iter(range(1_000_000))


@pytest.fixture
def alice(store: Store) -> tuple[httpx.Client, str]:
    """A fresh user (client with token) and its default brain id."""
    from store.auth.users import UserRegistry

    registry = UserRegistry(store.data)
    name = f"u{next(_counter)}-{free_port()}"
    user, token = registry.add(name, f"alice+{name}@example.com")  # an address is one account's
    client = store.client(token)
    brains = client.get("/api/brains").json()
    if not brains:
        brains = [client.post("/api/brains", json={"name": "default"}).json()]
    return client, brains[0]["id"]


def upload(client: httpx.Client, brain_id: str, archive: bytes, headers: dict[str, str] | None = None,
           params: dict[str, str] | None = None) -> httpx.Response:
    """PUT an archive as the ``brain`` field."""
    return client.put(
        f"/api/brains/{brain_id}/sync",
        files={"brain": ("brain.tar.gz", archive, "application/gzip")},
        headers=headers or {},
        params=params or {},
    )
