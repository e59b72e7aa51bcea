"""Wrong tokens on the sign-in page lock nobody else out (issue 15, item 1).

A real store (with the connector among its trusted proxies) and a real connector:
200 wrong tokens from 50 addresses (X-Forwarded-For through the connector's
trusted loopback proxy) within a minute, while two signed-in users memorize and
recall through the official MCP client SDK. They see no failure, every write
reaches the store, and a new sign-in still succeeds. Before the fix the store
counted every wrong token against the connector's own address and answered
every user's requests with 429 for minutes.
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import httpx
import httpx2
import pytest

from connector.oauth.pkce import s256
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from ..conftest import RunningStore, brains_of, download_brain, memory_ids, start_store
from .live import MemoryStorage, login_id_of, memorize_and_recall, running_connector, signed_in_provider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

ATTACKERS = [f"203.0.113.{n}" for n in range(1, 51)]
# CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN here (the three real sign-ins from loopback fit in it too): one
# attempt comes back every 15 s, far longer than one address's few submissions take even on a busy
# machine, so "the next one is refused" is exact.
WRONG_PER_ADDRESS = 4
REDIRECT = "http://127.0.0.1:1/callback"


def _authorize_params(base: str, client_id: str) -> dict[str, str]:
    return {
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "response_type": "code",
        "code_challenge": s256(secrets.token_urlsafe(48)),
        "code_challenge_method": "S256",
        "resource": base + "/mcp",
        "state": "s",
    }


async def _wrong_tokens(http: httpx.AsyncClient, base: str, client_id: str, address: str, count: int) -> list[int]:
    """Type ``count`` wrong tokens on sign-in pages from ``address``; the statuses of the submissions."""
    headers = {"X-Forwarded-For": address}
    statuses: list[int] = []
    login_id: str | None = None
    while len(statuses) < count:
        if login_id is None:
            page = await http.get("/authorize", params=_authorize_params(base, client_id), headers=headers)
            assert page.status_code == 200, page.text
            login_id = login_id_of(page.text)
        form = {"login_id": login_id, "token": "bst_" + secrets.token_urlsafe(32), "action": "allow"}
        done = await http.post("/authorize/complete", data=form, headers=headers)
        statuses.append(done.status_code)
        if done.status_code == 303:  # three wrong tokens end a sign-in: start another
            login_id = None
    return statuses


async def test_wrong_tokens_from_many_addresses_lock_nobody_else_out(trusting_store: RunningStore, tmp_path: Path) -> None:
    alice, bob, carol = (trusting_store.add_user(name) for name in ("alice", "bob", "carol"))
    with running_connector(tmp_path, trusting_store.url, state_dir=tmp_path / "state",
                           extra_env={"CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN": str(WRONG_PER_ADDRESS)}) as connector:
        base = connector.base_url
        url = base + "/mcp"
        registered = httpx.post(base + "/register", json={"redirect_uris": [REDIRECT], "client_name": "attacker"})
        assert registered.status_code == 201
        client_id = registered.json()["client_id"]

        attack_done = asyncio.Event()
        ready = [asyncio.Event(), asyncio.Event()]
        outcomes: list[tuple[str, str, bool]] = []
        users = [
            asyncio.create_task(memorize_and_recall(url, user, attack_done, event, outcomes))
            for user, event in zip((alice, bob), ready, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in ready)), 120)

        loop = asyncio.get_running_loop()
        started = loop.time()
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            # Past its budget the next wrong token from an address is refused by the connector before
            # the store is asked: the first address sends one more right after its own, then the others.
            first = await _wrong_tokens(http, base, client_id, ATTACKERS[0], WRONG_PER_ADDRESS + 1)
            extra = [first.pop()]
            statuses = [first, *await asyncio.gather(
                *(_wrong_tokens(http, base, client_id, address, WRONG_PER_ADDRESS) for address in ATTACKERS[1:])
            )]
            took = loop.time() - started
        attack_done.set()
        stored = await asyncio.wait_for(asyncio.gather(*users), 180)

        failures = [outcome for outcome in outcomes if not outcome[2]]
        assert not failures, failures
        sent = [status for per_address in statuses for status in per_address]
        assert len(sent) == 200 and took < 60, (len(sent), took)
        assert set(sent) <= {401, 303}, sorted(set(sent))  # every one refused as a wrong token, none "try again"
        assert extra == [429]
        assert all(len(ids) >= 3 for ids in stored), [len(ids) for ids in stored]
        for user, ids in zip((alice, bob), stored, strict=True):
            brain, _ = download_brain(trusting_store.url, user.token, brains_of(trusting_store.url, user.token)[0]["id"])
            assert set(ids) <= memory_ids(brain)

        # A legitimate new sign-in (from an address nobody attacked from) still succeeds.
        storage = MemoryStorage()
        provider = signed_in_provider(url, carol.token, storage, client_name="carol's app")
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http2:
            async with Client(streamable_http_client(url, http_client=http2)) as client:  # type: ignore[arg-type]
                status = await client.call_tool("brain_status", {})
                assert not status.is_error
        assert storage.tokens is not None


async def test_a_store_429_at_sign_in_counts_as_a_wrong_token(tmp_path: Path) -> None:
    running, manager = start_store(tmp_path, env={"STORE_TRUST_PROXY": "loopback", "STORE_RATE_FAILED_LOGINS_PER_MIN": "2"})
    try:
        alice = running.add_user("alice")
        with running_connector(tmp_path, running.url, state_dir=tmp_path / "state") as connector:
            base = connector.base_url
            client_id = httpx.post(base + "/register", json={"redirect_uris": [REDIRECT]}).json()["client_id"]
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                # Two wrong tokens from one address spend the store's budget for it ...
                assert await _wrong_tokens(http, base, client_id, "198.51.100.20", 2) == [401, 401]
                headers = {"X-Forwarded-For": "198.51.100.20"}
                page = await http.get("/authorize", params=_authorize_params(base, client_id), headers=headers)
                login_id = login_id_of(page.text)
                # ... so even the right token is refused there, and that uses up an attempt: no free retries.
                statuses = []
                for _ in range(3):
                    done = await http.post("/authorize/complete", headers=headers,
                                           data={"login_id": login_id, "token": alice.token, "action": "allow"})
                    statuses.append(done.status_code)
                    if done.status_code == 429:
                        assert "refuses more attempts" in done.text and " left." in done.text
                assert statuses == [429, 429, 303]
                assert "error=access_denied" in done.headers["location"]
                # From another address the same person signs in at once.
                other = {"X-Forwarded-For": "198.51.100.21"}
                page = await http.get("/authorize", params=_authorize_params(base, client_id), headers=other)
                done = await http.post("/authorize/complete", headers=other,
                                       data={"login_id": login_id_of(page.text), "token": alice.token, "action": "allow"})
                assert done.status_code == 303 and "code=" in done.headers["location"]
    finally:
        manager.__exit__(None, None, None)  # type: ignore[attr-defined]
