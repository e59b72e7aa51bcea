"""Two connector replicas behind Caddy (round robin, no sticky sessions), on one state directory.

Real components only: a store process (local disk, then S3 on SeaweedFS), two
`brain-connector serve` processes sharing a temporary state directory and state key,
Caddy's `reverse_proxy` with `lb_policy round_robin` in front of them, and the official
MCP client SDK signing in with OAuth through Caddy (and, once, with the state in a SeaweedFS
bucket instead of a directory: nothing shared but the bucket). Each replica's /metrics (asked
directly, not through Caddy) shows which one answered each step of a sign-in: the
page and its submission, the submission and the token request, land on different
replicas. Then two users memorize at once through Caddy and every acknowledged memory
is in the store's archive; a browser signs in to the web app and loads pages at both
replicas, and its sign-out holds at both; a refresh token is rotated at one replica and then the
other; a code is redeemed once across replicas; a refresh token replayed at the other
replica ends the sign-in at both; a revocation at one replica ends the sign-in at both; and a store token rotated
with `brain-store user rotate` stops working on both replicas.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from connector.oauth.pkce import s256
from connector.oauth.state import REVOCATIONS_FRESH_S
from connector.workcopy.core import SIGN_IN_AGAIN
from tests.connector.conftest import StoreUser, brains_of, download_brain, memory_ids, running_store
from tests.connector.oauth.live import MemoryStorage, flat_query, login_id_of, running_connector, signed_in_provider
from tests.s3.servers import S3Service, wait_for_token
from tests.support.caddy import caddy_round_robin, run_caddy_on_deploy
from tests.support.processes import REPO_ROOT, ServerProcess, console_script, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

SIGN_IN_ROUTES = ("/register", "/authorize", "/authorize/complete", "/token")
WRITES_PER_USER = 6
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


@dataclass
class Store:
    """A store process and how its command line reaches the same data (disk, or the bucket)."""

    url: str
    data: Path
    env: dict[str, str]

    def cli(self, *args: str) -> str:
        done = subprocess.run([console_script("brain-store"), *args, "--data", str(self.data)], capture_output=True,
                              text=True, timeout=60, env={**os.environ, **self.env}, check=True)
        return done.stdout.strip().splitlines()[-1].strip()

    def add_user(self, name: str) -> StoreUser:
        token = self.cli("user", "add", name)
        wait_for_token(self.url, token)  # on S3 the store learns of users within a poll interval
        me = httpx.get(self.url + "/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
        return StoreUser(name=name, token=token, id=me["user"]["id"])

    def rotate(self, user: StoreUser) -> None:
        """`brain-store user rotate`, then until the store refuses the old token (on S3: a poll interval)."""
        self.cli("user", "rotate", user.name)
        deadline = time.monotonic() + 10
        while httpx.get(self.url + "/auth/me", headers={"Authorization": f"Bearer {user.token}"},
                        timeout=30).status_code != 401:
            assert time.monotonic() < deadline, "the store kept accepting the rotated token"
            time.sleep(0.1)


def served(replica: ServerProcess) -> Counter[str]:
    """Requests a replica answered, by route (its own /metrics)."""
    counts: Counter[str] = Counter()
    for line in httpx.get(replica.base_url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("brain_connector_requests_total{"):
            route = line.split('route="', 1)[1].split('"', 1)[0]
            counts[route] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def accepts(replica: ServerProcess, access_token: str) -> int:
    """The HTTP status of an MCP initialize sent straight to ``replica`` with ``access_token``."""
    return httpx.post(replica.base_url + "/mcp", json=INITIALIZE, timeout=30, headers={
        "Authorization": f"Bearer {access_token}", "Accept": "application/json, text/event-stream"}).status_code


def refresh(replica: ServerProcess, refresh_token: str, client_id: str) -> httpx.Response:
    """A refresh_token grant sent straight to ``replica``."""
    return httpx.post(replica.base_url + "/token", timeout=30, data={
        "grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id})


async def sign_in(mcp_url: str, user: StoreUser, replicas: list[ServerProcess]) -> tuple[MemoryStorage, dict[str, int]]:
    """``user`` signs in through Caddy with the SDK; the tokens and which replica answered each step."""
    before = [served(replica) for replica in replicas]
    storage = MemoryStorage()
    provider = signed_in_provider(mcp_url, user.token, storage, client_name=f"{user.name}'s app")
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
            await client.list_tools()
    after = [served(replica) for replica in replicas]
    where: dict[str, int] = {}
    for route in SIGN_IN_ROUTES:
        answered = [index for index in range(len(replicas)) if after[index][route] - before[index][route] == 1]
        assert len(answered) == 1 and sum(after[i][route] - before[i][route] for i in range(len(replicas))) == 1, route
        where[route] = answered[0]
    return storage, where


async def memorize_many(mcp_url: str, user: StoreUser, storage: MemoryStorage, start: asyncio.Event) -> list[str]:
    """``WRITES_PER_USER`` memorize calls through Caddy (already signed in); the ids acknowledged as synced."""
    provider = signed_in_provider(mcp_url, user.token, storage, client_name=f"{user.name}'s app")
    stored: list[str] = []
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
            await start.wait()
            for number in range(WRITES_PER_USER):
                fact = f"{user.name} decided on {secrets.token_hex(4)} for release {number}"
                saved = await client.call_tool("brain_memorize", {"content": fact, "origin": "user"})
                body: dict[str, Any] = saved.structured_content or {}
                assert not saved.is_error and body.get("synced") is True, saved.content
                stored.append(body["stored"]["id"])
    return stored


def web_session(caddy: ServerProcess, replicas: list[ServerProcess], user: StoreUser) -> None:
    """A browser signs in to the web app through Caddy, loads pages, signs out; the cookie then
    opens nothing at either replica."""
    with httpx.Client(base_url=caddy.base_url, timeout=30, follow_redirects=False) as browser:
        page = browser.get("/app/signin")
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        done = browser.post("/app/signin", data={"csrf": csrf, "token": user.token},
                            headers={"Origin": caddy.base_url})
        assert done.status_code == 303 and done.headers["location"] == "/app", done.text
        for _ in range(4):
            home = browser.get("/app")
            assert home.status_code == 200, home.status_code
        cookie = browser.cookies.get("brain-app")
        csrf = home.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        out = browser.post("/app/signout", data={"csrf": csrf}, headers={"Origin": caddy.base_url})
        assert out.status_code == 303
    assert cookie
    for replica in replicas:
        assert httpx.get(replica.base_url + "/app", cookies={"brain-app": cookie}, timeout=30).status_code == 303


async def call_tool(replica: ServerProcess, access_token: str, name: str, arguments: dict[str, Any]) -> Any:
    """One MCP tool call straight at ``replica`` with ``access_token``."""
    headers = {"Authorization": f"Bearer {access_token}"}
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(60), headers=headers) as http:
        async with Client(streamable_http_client(replica.base_url + "/mcp", http_client=http)) as client:  # type: ignore[arg-type]
            return await client.call_tool(name, arguments)


async def write_refused(replica: ServerProcess, access_token: str) -> str:
    """brain_memorize straight at ``replica`` with a dead store token (a write always reaches the store)."""
    result = await call_tool(replica, access_token, "brain_memorize", {"content": "Written after the rotation."})
    assert result.is_error, result.content
    return " ".join(getattr(part, "text", "") for part in result.content)


def refused_within(replicas: list[ServerProcess], access_token: str, bound_s: float) -> None:
    """Every replica refuses ``access_token`` within ``bound_s`` (0: at once)."""
    deadline = time.monotonic() + bound_s
    while (answers := [accepts(replica, access_token) for replica in replicas]) != [401] * len(replicas):
        assert time.monotonic() < deadline, answers
        time.sleep(0.05)


def code_redeemed_once(replicas: list[ServerProcess], public_url: str, user: StoreUser) -> None:
    """A sign-in by hand with each step at the other replica; its code redeemed at one replica is
    refused at the other."""
    redirect, verifier = "http://127.0.0.1:1/callback", secrets.token_urlsafe(48)
    first, second = replicas[0].base_url, replicas[1].base_url
    client_id = httpx.post(first + "/register", json={"redirect_uris": [redirect], "client_name": "by hand"},
                           timeout=30).json()["client_id"]
    page = httpx.get(second + "/authorize", timeout=30, params={
        "response_type": "code", "client_id": client_id, "redirect_uri": redirect, "state": "s",
        "code_challenge": s256(verifier), "code_challenge_method": "S256", "resource": public_url + "/mcp"})
    assert page.status_code == 200, page.text
    done = httpx.post(first + "/authorize/complete", timeout=30,
                      data={"login_id": login_id_of(page.text), "token": user.token, "action": "allow"})
    assert done.status_code == 303, done.text
    code = flat_query(done.headers["location"])["code"]
    exchange = {"grant_type": "authorization_code", "code": code, "client_id": client_id, "redirect_uri": redirect,
                "code_verifier": verifier, "resource": public_url + "/mcp"}
    assert httpx.post(second + "/token", data=exchange, timeout=30).status_code == 200
    again = httpx.post(first + "/token", data=exchange, timeout=30)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant", again.text


async def run_scenario(store: Store, tmp_path: Path, state: dict[str, str] | None = None) -> None:
    """``state``: where the replicas keep their state (CONNECTOR_STATE_URL...); default a shared directory."""
    alice, bob, carol = store.add_user("alice"), store.add_user("bob"), store.add_user("carol")
    state_dir = tmp_path / "shared-state" if state is None else None
    # A state in a bucket: revocations reach the other replica within REVOCATIONS_FRESH_S (docs/replicas.md).
    bound_s = 0.0 if state is None else REVOCATIONS_FRESH_S + 1.0  # plus a round trip on a loaded machine
    # Default freshness: copies and brain lists are cached.
    env = {"CONNECTOR_STATE_KEY": secrets.token_hex(32), **(state or {})}
    ports = [free_port(), free_port()]
    public_url = f"http://127.0.0.1:{free_port()}"  # Caddy's address, chosen before Caddy starts
    with ExitStack() as stack:
        replicas = [stack.enter_context(running_connector(
            tmp_path, store.url, state_dir=state_dir, port=port,
            extra_env={**env, "CONNECTOR_PUBLIC_URL": public_url})) for port in ports]
        caddy = stack.enter_context(caddy_round_robin(tmp_path, replicas, port=int(public_url.rsplit(":", 1)[1])))
        mcp_url = caddy.base_url + "/mcp"
        started = time.monotonic()

        # Sign-ins through Caddy: the page and its submission, the submission (which issues the
        # code) and the token request (which redeems it) are answered by different replicas.
        alice_tokens, alice_where = await sign_in(mcp_url, alice, replicas)
        bob_tokens, bob_where = await sign_in(mcp_url, bob, replicas)
        for where in (alice_where, bob_where):
            assert where["/authorize"] != where["/authorize/complete"] != where["/token"], where

        # Both write at once through Caddy; every acknowledged memory is in the store's archive.
        go = asyncio.Event()
        writers = [asyncio.create_task(memorize_many(mcp_url, user, tokens, go))
                   for user, tokens in ((alice, alice_tokens), (bob, bob_tokens))]
        await asyncio.sleep(0.2)
        go.set()
        acknowledged = await asyncio.wait_for(asyncio.gather(*writers), 90)
        for user, ids in zip((alice, bob), acknowledged, strict=True):
            assert len(ids) == WRITES_PER_USER
            brain_id = brains_of(store.url, user.token)[0]["id"]
            brain, _ = download_brain(store.url, user.token, brain_id)
            assert set(ids) <= memory_ids(brain), (user.name, set(ids) - memory_ids(brain))
        for replica in replicas:
            assert served(replica)["/mcp"] > WRITES_PER_USER // 2  # the writes went to both

        # The web app through Caddy: signed in at one replica, every page at either, signed out at both.
        web_before = [served(replica)["other"] for replica in replicas]
        await asyncio.to_thread(web_session, caddy, replicas, alice)
        assert all(served(replica)["other"] - before >= 3 for replica, before in zip(replicas, web_before, strict=True))

        # Refresh at the replica that did not issue the tokens, then at the one that did.
        assert alice_tokens.tokens is not None and alice_tokens.client is not None
        client_id, token = alice_tokens.client.client_id, alice_tokens.tokens.refresh_token
        assert token is not None
        issuer = alice_where["/token"]
        for replica in (replicas[1 - issuer], replicas[issuer]):
            renewed = refresh(replica, token, client_id)
            assert renewed.status_code == 200, renewed.text
            token, access = renewed.json()["refresh_token"], renewed.json()["access_token"]
            assert [accepts(other, access) for other in replicas] == [200, 200]

        await asyncio.to_thread(code_redeemed_once, replicas, public_url, carol)

        # A refresh token replayed at the other replica after its successor was used: reuse, the
        # whole sign-in ends at both replicas.
        carol_tokens, _ = await sign_in(mcp_url, carol, replicas)
        assert carol_tokens.tokens is not None and carol_tokens.client is not None
        first = carol_tokens.tokens.refresh_token
        assert first is not None
        second = refresh(replicas[0], first, carol_tokens.client.client_id).json()["refresh_token"]
        third = refresh(replicas[1], second, carol_tokens.client.client_id).json()
        replayed = refresh(replicas[1], first, carol_tokens.client.client_id)
        assert replayed.status_code == 400 and replayed.json()["error"] == "invalid_grant", replayed.text
        refused_within(replicas, third["access_token"], bound_s)
        assert refresh(replicas[0], third["refresh_token"], carol_tokens.client.client_id).status_code == 400

        # Revoked at one replica: refused at both, the refresh token too.
        revoked = httpx.post(replicas[0].base_url + "/revoke", data={"token": token, "client_id": client_id}, timeout=30)
        assert revoked.status_code == 200
        assert accepts(replicas[0], access) == 401
        refused_within(replicas, access, bound_s)
        assert refresh(replicas[1], token, client_id).json().get("error") == "invalid_grant"

        # Bob's store token rotated at the store: noticed by one replica, refused by both.
        assert bob_tokens.tokens is not None
        bob_access = bob_tokens.tokens.access_token
        assert [accepts(replica, bob_access) for replica in replicas] == [200, 200]
        store.rotate(bob)
        told = await write_refused(replicas[0], bob_access)
        # Refused before the write was applied (the brain list is asked first), or when it was pushed
        # (and the write dropped): one of the two refusals the manager words, nothing else.
        assert SIGN_IN_AGAIN in told or "the store no longer accepts this sign-in's writes" in told, told
        # The other replica refuses it without asking the store: the sign-in ended in the shared state.
        refused_within(replicas[1:], bob_access, bound_s)
        bob_refresh = bob_tokens.tokens.refresh_token
        assert bob_refresh is not None and bob_tokens.client is not None
        assert refresh(replicas[1], bob_refresh, bob_tokens.client.client_id).status_code == 400
        assert time.monotonic() - started < 60


def test_the_replicas_caddyfile_example_validates(tmp_path: Path) -> None:
    example = REPO_ROOT / "deploy" / "Caddyfile.replicas"
    done = run_caddy_on_deploy("validate", "Caddyfile.replicas", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lb_policy round_robin" in example.read_text() and "respond /metrics 404" in example.read_text()


async def test_replicas_on_a_local_store(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    with running_store(tmp_path / "store") as running:
        await run_scenario(Store(running.url, running.data, {}), tmp_path)


@pytest.mark.slow
async def test_replicas_on_a_store_on_seaweedfs(weed: S3Service, tmp_path: Path) -> None:
    env = weed.store_env(weed.new_bucket())
    (tmp_path / "store").mkdir()
    with running_store(tmp_path / "store", env=env) as running:
        await run_scenario(Store(running.url, running.data, env), tmp_path)


@pytest.mark.slow
async def test_replicas_sharing_nothing_but_a_bucket(weed: S3Service, tmp_path: Path) -> None:
    """The store and the connectors' state on one SeaweedFS bucket (two prefixes), no shared directory:
    the connectors have only CONNECTOR_STATE_URL."""
    bucket = weed.new_bucket()
    env = weed.store_env(bucket)
    (tmp_path / "store").mkdir()
    state = {**{k: v for k, v in env.items() if k.startswith("AWS_")},
             "CONNECTOR_STATE_URL": f"s3://{bucket}/connector", "CONNECTOR_S3_ENDPOINT_URL": weed.endpoint}
    with running_store(tmp_path / "store", env=env) as running:
        await run_scenario(Store(running.url, running.data, env), tmp_path, state)
    # Nothing of the connectors' state is on disk; it is all in the bucket, under its prefix.
    assert not (tmp_path / "shared-state").exists()
    listed = weed.client().list_objects_v2(Bucket=bucket, Prefix="connector/")
    names = {item["Key"].split("/")[1] for item in listed.get("Contents", [])}
    assert {"clients", "families.json", "refresh.json", "revoked.json", "once"} <= names, names


async def test_a_brain_chosen_at_one_replica_is_written_at_the_other(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    with running_store(tmp_path / "store") as running:
        store = Store(running.url, running.data, {})
        bob = store.add_user("bob")
        public_url = f"http://127.0.0.1:{free_port()}"
        env = {"CONNECTOR_STATE_KEY": secrets.token_hex(32), "CONNECTOR_PUBLIC_URL": public_url}
        with ExitStack() as stack:
            a, b = (stack.enter_context(running_connector(tmp_path, store.url, state_dir=tmp_path / "state",
                                                          port=free_port(), extra_env=env)) for _ in range(2))
            caddy = stack.enter_context(caddy_round_robin(tmp_path, [a, b], port=int(public_url.rsplit(":", 1)[1])))
            storage, _ = await sign_in(caddy.base_url + "/mcp", bob, [a, b])
            assert storage.tokens is not None
            access = storage.tokens.access_token
            # b lists bob's brains (one) and keeps the list; the new brain is chosen at a.
            first = await call_tool(b, access, "brain_memorize", {"content": "Home notes go here."})
            assert not first.is_error, first.content
            work = httpx.post(store.url + "/api/brains", json={"name": "work"}, timeout=30,
                              headers={"Authorization": f"Bearer {bob.token}"}).json()
            used = await call_tool(a, access, "brain_use", {"brain": "work"})
            assert not used.is_error, used.content
            saved = await call_tool(b, access, "brain_memorize", {"content": "Work notes go here."})
            assert not saved.is_error and (saved.structured_content or {}).get("synced") is True, saved.content
            found = httpx.get(f"{store.url}/api/brains/{work['id']}/sync", timeout=30,
                              headers={"Authorization": f"Bearer {bob.token}"})
            assert found.status_code == 200, "the write at the other replica did not land in the chosen brain"
