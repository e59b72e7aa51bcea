"""A brain-store cluster on loopback, as `deploy/compose.cluster.yml` lays it out.

SeaweedFS (S3), two store replicas on one bucket behind a Caddy round robin, three
connector replicas behind another (no sticky sessions), all real processes. The
connectors share their state either in a directory (``backend="directory"``, the state
directory every replica names) or in the bucket under another prefix (``backend="s3"``,
``CONNECTOR_STATE_URL``, no shared directory at all). Used by `tests/ops/test_cluster.py`
and `bench/cluster_bench.py`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.connector.conftest import StoreUser, running_store
from tests.connector.oauth.live import running_connector
from tests.ops.test_replicas_behind_caddy import Store
from tests.s3.servers import S3Service, wait_for_token
from tests.support.caddy import caddy_sites
from tests.support.processes import ServerProcess, free_port

BACKENDS = ("directory", "s3")
CONNECTOR_REPLICAS = 3
STORE_REPLICAS = 2
CONNECTOR_PREFIX = "connector"


@dataclass
class Cluster:
    """The running cluster and what a test needs to reach into it."""

    backend: str
    tmp: Path
    s3: S3Service
    bucket: str
    store: Store  # the stores' balancer, and the store command line on the bucket
    stores: list[ServerProcess]
    connectors: list[ServerProcess]
    front: ServerProcess  # the connectors' balancer: the public URL
    connector_env: dict[str, str]  # what every connector replica is started with
    state_dir: Path | None  # the shared state directory (directory backend only)

    @property
    def mcp_url(self) -> str:
        return self.front.base_url + "/mcp"

    def add_user(self, name: str) -> StoreUser:
        """A store user made with `brain-store user add`, known to every store replica."""
        token = self.store.cli("user", "add", name)
        # Each store replica learns of users within its poll interval: wait for all of them before
        # asking who the token is through the balancer (which may pick either).
        for replica in self.stores:
            wait_for_token(replica.base_url, token)
        me = httpx.get(self.store.url + "/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
        return StoreUser(name=name, token=token, id=me["user"]["id"])

    def held_documents(self) -> list[str]:
        """The held-write journal's documents in the shared state (``held/*.held``)."""
        if self.state_dir is not None:
            return sorted(path.name for path in (self.state_dir / "held").glob("*.held"))
        keys = self.s3.keys(self.bucket, f"{CONNECTOR_PREFIX}/held/")
        return sorted(key for key in keys if key.endswith(".held"))

    @contextmanager
    def extra_store(self, name: str) -> Iterator[ServerProcess]:
        """Another store replica on the bucket, outside the balancer (a test may stop it)."""
        (self.tmp / name).mkdir()
        with running_store(self.tmp / name, env=self.store.env) as running:
            yield running.server

    @contextmanager
    def extra_connector(self, store_url: str, **env: str) -> Iterator[ServerProcess]:
        """Another connector replica on the cluster's state, outside the balancer, using ``store_url``."""
        with running_connector(self.tmp, store_url, state_dir=self.state_dir, port=free_port(),
                               extra_env={**self.connector_env, "CONNECTOR_STORE_URL": store_url, **env}) as server:
            yield server


def connector_state_env(backend: str, s3: S3Service, bucket: str) -> dict[str, str]:
    """The settings that put the connectors' state on S3 (nothing for the directory backend)."""
    if backend == "directory":
        return {}
    store_env = s3.store_env(bucket)
    credentials = {key: value for key, value in store_env.items() if key.startswith("AWS_")}
    return {**credentials, "CONNECTOR_STATE_URL": f"s3://{bucket}/{CONNECTOR_PREFIX}",
            "CONNECTOR_S3_ENDPOINT_URL": s3.endpoint, "CONNECTOR_S3_REGION": "us-east-1"}


@contextmanager
def running_cluster(tmp: Path, s3: S3Service, backend: str, **connector_env: str) -> Iterator[Cluster]:
    """Start the cluster on ``s3`` (a fresh bucket) with the connectors' state on ``backend``."""
    assert backend in BACKENDS, backend
    bucket = s3.new_bucket()
    # The stores believe the balancer in front of them, so wrong tokens count per person's address.
    store_env = {**s3.store_env(bucket), "STORE_TRUST_PROXY": "loopback"}
    state_dir = tmp / "shared-state" if backend == "directory" else None
    with ExitStack() as stack:
        stores = []
        for index in range(STORE_REPLICAS):
            (tmp / f"store-{index}").mkdir()
            stores.append(stack.enter_context(running_store(tmp / f"store-{index}", env=store_env)).server)
        (tmp / "store-front").mkdir()
        store_port = free_port()
        store_front = stack.enter_context(caddy_sites(tmp / "store-front", {store_port: stores}))[store_port]
        (tmp / "cli").mkdir()
        store = Store(store_front.base_url, tmp / "cli", store_env)

        front_port = free_port()
        env = {"CONNECTOR_STATE_KEY": secrets.token_hex(32), "CONNECTOR_PUBLIC_URL": f"http://127.0.0.1:{front_port}",
               "CONNECTOR_STORE_URL": store_front.base_url, **connector_state_env(backend, s3, bucket), **connector_env}
        connectors = [stack.enter_context(running_connector(tmp, store_front.base_url, state_dir=state_dir,
                                                            port=free_port(), extra_env=env))
                      for _ in range(CONNECTOR_REPLICAS)]
        (tmp / "front").mkdir()
        # Caddy keeps an X-Forwarded-For sent from loopback: a test speaks for other addresses.
        front = stack.enter_context(caddy_sites(tmp / "front", {front_port: connectors}, trust_loopback=True))[front_port]
        yield Cluster(backend, tmp, s3, bucket, store, stores, connectors, front, env, state_dir)
