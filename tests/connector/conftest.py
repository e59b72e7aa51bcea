"""Real processes for connector tests: a store on loopback, users made with its CLI, helpers."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.format.brain import Brain
from connector.engine.writes.ops import connector_memorize
from connector.mcp import server  # noqa: F401  (as in the app: the server assembles every tool group)
from tests.support.processes import ServerProcess, console_script, free_port, run_server
from tests.support.store_cli import brain_store

T = TypeVar("T")


@dataclass
class StoreUser:
    """A store account: its token and id."""

    name: str
    token: str
    id: str


@dataclass
class RunningStore:
    """A store process and the directory it keeps its data in."""

    server: ServerProcess
    data: Path
    port: int
    log_path: Path
    # Set on a store shared by a module's tests: a name already taken gets a suffix, so each
    # test's users are its own (``StoreUser.name`` says the name the store knows).
    shared: bool = False
    names: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return self.server.base_url

    def add_user(self, name: str) -> StoreUser:
        """Create a user with `brain-store user add`, run in this process (it gets a first brain named default)."""
        base, n = name, 1
        while self.shared and name in self.names:
            n += 1
            name = f"{base}-{n}"
        self.names.add(name)
        token = brain_store("user", "add", name, data=self.data).strip().splitlines()[-1].strip()
        me = httpx.get(self.url + "/auth/me", headers=auth(token), timeout=30).json()
        return StoreUser(name=name, token=token, id=me["user"]["id"])

    def rotate(self, user: StoreUser) -> str:
        """Give ``user`` a new token with `brain-store user rotate` (the old one dies at once); the new token."""
        return brain_store("user", "rotate", user.name, data=self.data).strip().splitlines()[-1].strip()


def auth(token: str) -> dict[str, str]:
    """The Authorization header for a store token."""
    return {"Authorization": f"Bearer {token}"}


def start_store(
    tmp_path: Path, data: Path | None = None, port: int | None = None, env: dict[str, str] | None = None
) -> tuple[RunningStore, object]:
    """Start a store process (``env`` added to its environment); returns it and the context manager to close."""
    data = data or tmp_path / "store-data"
    port = port or free_port()
    log_path = tmp_path / f"store-{port}.log"
    manager = run_server(
        [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", str(port), "--data", str(data)],
        port=port,
        log_path=log_path,
        # Tests drive many uploads per minute from one user; production limits are the store's business.
        env={"STORE_RATE_UPLOADS_PER_MIN": "100000", "STORE_RATE_REQUESTS_PER_MIN": "100000", "STORE_QUIET": "1",
             **(env or {})},
    )
    server = manager.__enter__()
    return RunningStore(server=server, data=data, port=port, log_path=log_path), manager


@contextlib.contextmanager
def running_store(tmp_path: Path, env: dict[str, str] | None = None) -> Iterator[RunningStore]:
    """A store process (``env`` added to its environment) for the length of a ``with`` block."""
    running, manager = start_store(tmp_path, env=env)
    try:
        yield running
    finally:
        manager.__exit__(None, None, None)  # type: ignore[attr-defined]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunningStore]:
    """A real store process on a free loopback port."""
    with running_store(tmp_path) as running:
        yield running


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStore]:
    """One store process for a module whose tests only look at their own users' brains.

    A module opts in by overriding ``store`` with it (see ``shared_store``); a test that
    checks store-wide state (the store's log, all users, a restart) keeps its own store."""
    with running_store(tmp_path_factory.mktemp("store")) as running:
        running.shared = True
        yield running


def shared_store(module_store: RunningStore) -> RunningStore:
    """The module's shared store as its ``store``: ``store = pytest.fixture(shared_store, name="store")``."""
    return module_store


def brains_of(store_url: str, token: str) -> list[dict]:
    """The account's brain records."""
    response = httpx.get(store_url + "/api/brains", headers=auth(token), timeout=30)
    response.raise_for_status()
    return response.json()


def download_brain(store_url: str, token: str, brain_id: str) -> tuple[Brain, str]:
    """The brain stored at the store (loaded with the engine) and its checksum."""
    response = httpx.get(f"{store_url}/api/brains/{brain_id}/sync", headers=auth(token), timeout=30)
    response.raise_for_status()
    return load_archive(response.content), response.headers["X-Checksum"]


def upload_raw(store_url: str, token: str, brain_id: str, data: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    """PUT an archive as a device would (optionally conditional)."""
    return httpx.put(
        f"{store_url}/api/brains/{brain_id}/sync",
        headers={**auth(token), **(headers or {})},
        files={"brain": ("brain.tar.gz", data, "application/gzip")},
        timeout=30,
    )


def upload_brain(store_url: str, token: str, brain: Brain) -> str:
    """Put ``brain`` at the store as the account's first (default) brain; that brain's id."""
    brain_id = brains_of(store_url, token)[0]["id"]
    assert upload_raw(store_url, token, brain_id, pack_archive(brain)).status_code == 200
    return brain_id


def device_write(store_url: str, token: str, brain_id: str, change: Callable[[Brain], T], attempts: int = 50) -> T:
    """A device writing straight to the store: pull, ``change`` the brain, push with If-Match; again on 412.

    Returns what ``change`` returned on the push that won."""
    for _ in range(attempts):
        response = httpx.get(f"{store_url}/api/brains/{brain_id}/sync", headers=auth(token), timeout=30)
        if response.status_code == 404:
            brain, condition = Brain(), {"If-None-Match": "*"}
        else:
            response.raise_for_status()
            brain = load_archive(response.content)
            condition = {"If-Match": f'"{response.headers["X-Checksum"]}"'}
        result = change(brain)
        pushed = upload_raw(store_url, token, brain_id, pack_archive(brain), condition)
        if pushed.status_code == 200:
            return result
        assert pushed.status_code == 412, pushed.text
    raise AssertionError("direct pusher never won a push")


def direct_memorize(store_url: str, token: str, brain_id: str, content: str, attempts: int = 50) -> str:
    """A command-line device: pull, memorize, push with If-Match; retry on 412. Returns the id."""

    def memorize(brain: Brain) -> str:
        result = connector_memorize(content, agent="direct-device").apply(brain, datetime.now(UTC))
        return str(result["stored"][0]["id"])

    return device_write(store_url, token, brain_id, memorize, attempts)


def memory_ids(brain: Brain) -> set[str]:
    """Ids in the brain's index.json."""
    index = brain.read_json("index.json") or {}
    return set((index.get("memories") or {}).keys())


def checksum(data: bytes) -> str:
    """SHA-256 hex."""
    return hashlib.sha256(data).hexdigest()
