"""The cluster of issue 27: three connector replicas and two store replicas on SeaweedFS behind
Caddy round robin (no sticky sessions), with the connectors' state in a shared directory or,
with no shared directory at all, in the bucket (``CONNECTOR_STATE_URL``).

Real processes only (`tests/ops/cluster.py`), one cluster per state backend for the whole
module: a full OAuth sign-in through the MCP SDK with its steps at different replicas; two
users memorizing at once, every acknowledged memory in the archive exactly once; a web app
session valid at every replica and signed out at all; a refresh token replayed at another
replica detected as reuse; a revoked token refused at every replica within the documented
bound; a held write of a replica killed with SIGKILL pushed exactly once by another; and
sign-in attempts from one address limited across the replicas to one process's budget.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from connector.oauth.state import REVOCATIONS_FRESH_S
from tests.connector.conftest import StoreUser, brains_of, download_brain
from tests.connector.oauth.live import MemoryStorage
from tests.ops.cluster import BACKENDS, CONNECTOR_REPLICAS, Cluster, running_cluster
from tests.ops.test_replicas_behind_caddy import accepts, call_tool, refresh, refused_within, sign_in
from tests.s3.servers import S3Service
from tests.support.signin import csrf_of, wrong_web_sign_ins

# One worker runs the whole module (`make test` is -n 2 --dist loadgroup): one cluster per backend, not one per worker.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300), pytest.mark.slow, pytest.mark.xdist_group("cluster")]

WRITES_PER_USER = 5
# How long a revocation may take to reach every replica (docs/replicas.md): at once on a
# shared directory; on S3 within REVOCATIONS_FRESH_S plus a round trip (1 s on a loaded machine).
REVOCATION_BOUND_S = {"directory": 0.0, "s3": REVOCATIONS_FRESH_S + 1.0}
# How long until another replica takes over a dead replica's held writes (docs/replicas.md).
TAKEOVER_BOUND_S = 60.0
SIGNIN_ATTEMPTS_PER_MIN = 10  # the connector's default, one process's budget per address and minute
HELD = "The staging database moved to the Frankfurt region in March"


@pytest.fixture(scope="module", params=BACKENDS)
def cluster(request: pytest.FixtureRequest, weed: S3Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster per state backend, shared by the module's tests (on the test process's SeaweedFS)."""
    with running_cluster(tmp_path_factory.mktemp(f"cluster-{request.param}"), weed, request.param) as running:
        yield running


def _user(cluster: Cluster) -> StoreUser:
    return cluster.add_user(f"u{secrets.token_hex(4)}")


async def _signed_in(cluster: Cluster, user: StoreUser) -> tuple[MemoryStorage, dict[str, int]]:
    return await sign_in(cluster.mcp_url, user, cluster.connectors)


def _tokens(storage: MemoryStorage) -> tuple[str, str, str]:
    """access token, refresh token, client id."""
    assert storage.tokens is not None and storage.tokens.refresh_token and storage.client is not None
    return storage.tokens.access_token, storage.tokens.refresh_token, storage.client.client_id


def _statuses(cluster: Cluster, access: str) -> list[int]:
    return [accepts(replica, access) for replica in cluster.connectors]


async def test_a_sign_in_takes_its_steps_at_different_replicas(cluster: Cluster) -> None:
    storage, where = await _signed_in(cluster, _user(cluster))
    # The page, its submission (which issues the code) and the token request (which redeems
    # it) are answered by three different replicas; registration by another than the page.
    assert len({where["/authorize"], where["/authorize/complete"], where["/token"]}) == 3, where
    assert where["/register"] != where["/authorize"], where
    access, _, _ = _tokens(storage)
    assert _statuses(cluster, access) == [200] * CONNECTOR_REPLICAS


async def _memorize(cluster: Cluster, access: str, user: StoreUser, start: asyncio.Event) -> list[tuple[str, str]]:
    """``WRITES_PER_USER`` memorize calls through the balancer; (id, content) of each acknowledged one."""
    await start.wait()
    done: list[tuple[str, str]] = []
    for number in range(WRITES_PER_USER):
        fact = f"{user.name} decided on {secrets.token_hex(6)} for release {number}"
        saved = await call_tool(cluster.front, access, "brain_memorize", {"content": fact, "origin": "user"})
        body: dict[str, Any] = saved.structured_content or {}
        assert not saved.is_error and body.get("synced") is True, saved.content
        done.append((body["stored"]["id"], fact))
    return done


def _contents(cluster: Cluster, user: StoreUser) -> dict[str, str]:
    """Every memory of the user's first brain at the store: id -> its file's text."""
    brain_id = brains_of(cluster.store.url, user.token)[0]["id"]
    brain, _ = download_brain(cluster.store.url, user.token, brain_id)
    memories = (brain.read_json("index.json") or {}).get("memories") or {}
    return {memory_id: brain.read_text(entry["path"]) for memory_id, entry in memories.items()}


async def test_two_users_memorizing_at_once_keep_every_acknowledged_memory_once(cluster: Cluster) -> None:
    users = [_user(cluster), _user(cluster)]
    accesses = [_tokens((await _signed_in(cluster, user))[0])[0] for user in users]
    go = asyncio.Event()
    writers = [asyncio.create_task(_memorize(cluster, access, user, go)) for user, access in zip(users, accesses, strict=True)]
    await asyncio.sleep(0.1)
    go.set()
    acknowledged = await asyncio.wait_for(asyncio.gather(*writers), 180)
    for user, done in zip(users, acknowledged, strict=True):
        assert len(done) == WRITES_PER_USER
        stored = _contents(cluster, user)
        for memory_id, fact in done:
            assert memory_id in stored, (user.name, memory_id)
            assert sum(fact in text for text in stored.values()) == 1, (user.name, fact)


def test_a_web_app_session_is_valid_at_every_replica_and_signed_out_at_all(cluster: Cluster) -> None:
    user = _user(cluster)
    origin = {"Origin": cluster.front.base_url}
    with httpx.Client(base_url=cluster.front.base_url, timeout=30, follow_redirects=False) as browser:
        page = browser.get("/app/signin")
        done = browser.post("/app/signin", data={"csrf": csrf_of(page.text), "token": user.token}, headers=origin)
        assert done.status_code == 303 and done.headers["location"] == "/app", done.text
        cookie = browser.cookies.get("brain-app")
        assert cookie
        for replica in cluster.connectors:
            home = httpx.get(replica.base_url + "/app", cookies={"brain-app": cookie}, timeout=30)
            assert home.status_code == 200, (replica.base_url, home.status_code)
        out = browser.post("/app/signout", data={"csrf": csrf_of(home.text)}, headers=origin)
        assert out.status_code == 303
    for replica in cluster.connectors:
        assert httpx.get(replica.base_url + "/app", cookies={"brain-app": cookie}, timeout=30).status_code == 303


async def test_a_refresh_token_replayed_at_another_replica_is_detected_as_reuse(cluster: Cluster) -> None:
    storage, _ = await _signed_in(cluster, _user(cluster))
    _, first, client_id = _tokens(storage)
    a, b, c = cluster.connectors
    renewed = refresh(a, first, client_id)
    assert renewed.status_code == 200, renewed.text
    second = refresh(b, renewed.json()["refresh_token"], client_id)
    assert second.status_code == 200, second.text
    latest, access = second.json()["refresh_token"], second.json()["access_token"]
    assert _statuses(cluster, access) == [200] * CONNECTOR_REPLICAS
    # The first token, retired two rotations ago, comes back at a third replica: a thief's copy.
    replayed = refresh(c, first, client_id)
    assert replayed.status_code == 400 and replayed.json().get("error") == "invalid_grant", replayed.text
    # The whole family ends, at every replica: the newest refresh token and its access token too.
    for replica in cluster.connectors:
        assert refresh(replica, latest, client_id).json().get("error") == "invalid_grant"
    refused_within(cluster.connectors, access, REVOCATION_BOUND_S[cluster.backend])


async def test_a_revoked_token_is_refused_at_every_replica_within_the_bound(cluster: Cluster) -> None:
    storage, _ = await _signed_in(cluster, _user(cluster))
    access, token, client_id = _tokens(storage)
    assert _statuses(cluster, access) == [200] * CONNECTOR_REPLICAS
    revoked = httpx.post(cluster.connectors[0].base_url + "/revoke", data={"token": token, "client_id": client_id},
                         timeout=30)
    assert revoked.status_code == 200
    assert accepts(cluster.connectors[0], access) == 401  # where it was revoked: at once
    refused_within(cluster.connectors, access, REVOCATION_BOUND_S[cluster.backend])
    for replica in cluster.connectors:
        assert refresh(replica, token, client_id).json().get("error") == "invalid_grant"


async def test_a_held_write_of_a_killed_replica_is_pushed_once_by_another(cluster: Cluster) -> None:
    user = _user(cluster)
    storage, _ = await _signed_in(cluster, user)
    access, _, _ = _tokens(storage)
    with cluster.extra_store("store-held") as store:
        # A fourth replica on the cluster's state, whose store goes away: its write is held.
        with cluster.extra_connector(store.base_url, CONNECTOR_REPULL_TTL_MS="200") as doomed:
            first = await call_tool(doomed, access, "brain_memorize", {"content": "Saved while the store was up"})
            assert (first.structured_content or {}).get("synced") is True, first.content
            store.stop()
            await asyncio.sleep(0.3)  # past its freshness interval: the replica has to ask the store
            held = await call_tool(doomed, access, "brain_memorize", {"content": HELD})
            body: dict[str, Any] = held.structured_content or {}
            text = " ".join(getattr(part, "text", "") for part in held.content)
            assert body.get("synced") is False and "pushed automatically" in text and "NOT saved" not in text, text
            held_id = body["stored"]["id"]
            # Acknowledged only once it is in the shared state, where the others can find it.
            assert len(cluster.held_documents()) == 1
            doomed.kill(signal.SIGKILL)
    # Its store is gone too: only the three replicas of the cluster can push it.
    deadline = time.monotonic() + TAKEOVER_BOUND_S
    while held_id not in (stored := _contents(cluster, user)):
        assert time.monotonic() < deadline, f"no replica pushed the held write within {TAKEOVER_BOUND_S}s"
        await asyncio.sleep(0.5)
    await asyncio.sleep(6)  # more than a maintenance pass (5 s): a second push would show now
    stored = _contents(cluster, user)
    assert sum(HELD in text for text in stored.values()) == 1, "the held write was pushed more than once"
    assert not cluster.held_documents(), "the journal document outlived its push"


def test_sign_in_attempts_from_one_address_are_limited_across_replicas(cluster: Cluster) -> None:
    address = f"203.0.113.{secrets.randbelow(200) + 20}"  # a stranger's, through the balancer
    attempts = SIGNIN_ATTEMPTS_PER_MIN * CONNECTOR_REPLICAS
    started = time.monotonic()
    checked, limited = wrong_web_sign_ins([cluster.front.base_url], address, attempts)
    refilled = int((time.monotonic() - started) * SIGNIN_ATTEMPTS_PER_MIN / 60) + 1
    # One process's budget (plus what refilled meanwhile), not one per replica.
    assert SIGNIN_ATTEMPTS_PER_MIN <= checked <= SIGNIN_ATTEMPTS_PER_MIN + refilled, (checked, limited)
    assert checked + limited == attempts
    # Counted per address: another one still has its budget (the balancer passed the address on).
    assert wrong_web_sign_ins([cluster.front.base_url], "198.51.100.7", 1) == (1, 0)
