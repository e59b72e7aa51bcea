"""A signed-in user whose store token died locks nobody else out (issue 15, item 1).

A real store and a real connector. Alice signs in, then her store token is rotated
(`brain-store user rotate`); her MCP client (the official SDK) keeps calling
brain_recall, 100 times within a minute. Meanwhile Bob memorizes and recalls through
the same connector and sees no failure. Alice's calls end in a clear "sign in
again": one tool result saying so, then the connector refuses her access token (401
with WWW-Authenticate), so her client starts a new sign-in. Before the fix every one
of her calls presented the dead token to the store, which counted a failed login
against the connector's own address per call; after 30 it answered every request
from the connector, Bob's too, with 429.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import httpx2
import pytest

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from ..conftest import RunningStore, StoreUser
from .live import MemoryStorage, memorize_and_recall, running_connector, signed_in_provider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

ALICE_CALLS = 100
CALL_PAUSE = 0.05  # seconds between Alice's calls


class SignInAgain(Exception):
    """Alice's 'browser' was sent to a sign-in page: her client must sign in again."""


def _store_answers(store: RunningStore, status: int) -> float:
    """How many requests the store has answered with ``status`` (its /metrics)."""
    text = httpx.get(store.url + "/metrics", timeout=30).text
    wanted = f'status="{status}"'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("brain_store_requests_total{") and wanted in line)


def _is_sign_in_again(exc: BaseException) -> bool:
    """True when ``exc`` (maybe wrapped in exception groups or causes) comes from a required sign-in."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, SignInAgain):
            return True
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


async def _alice_calls(url: str, alice: StoreUser, rotated: asyncio.Event, signed_in: asyncio.Event) -> tuple[list[str], list[str]]:
    """Alice signs in, waits for the rotation, then calls brain_recall; each call's outcome and the sign-in pages opened."""
    pages: list[str] = []
    provider = signed_in_provider(url, alice.token, MemoryStorage(), client_name="alice's app", attempts=pages)
    outcomes: list[str] = []
    # Her own address (through the connector's trusted loopback proxy): her calls spend her
    # share of the connector's per-address /mcp limit, not Bob's.
    headers = {"X-Forwarded-For": "198.51.100.7"}
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60), headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            await client.list_tools()
        signed_in.set()
        await rotated.wait()
        # From now on her 'browser' is away: a sign-in page opened means "sign in again".
        provider.context.redirect_handler = _away(pages)
        for _ in range(ALICE_CALLS):
            outcomes.append(await _recall_once(url, http))
            # Quick calls, as a retrying client makes them: with the old fault her dead token would
            # spend the store's 30 failed logins a minute sooner, not later; Bob works in between.
            await asyncio.sleep(CALL_PAUSE)
    return outcomes, pages


async def _recall_once(url: str, http: httpx2.AsyncClient) -> str:
    """One brain_recall in its own client session (a failed sign-in ends the SDK's session)."""
    try:
        async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
            result = await client.call_tool("brain_recall", {"query": "release"})
    except Exception as exc:  # noqa: BLE001 - classified here
        if not _is_sign_in_again(exc):
            raise
        return "sign in again"
    text = " ".join(getattr(part, "text", "") for part in result.content)
    return f"refused: {text}" if result.is_error else "ok"


def _away(pages: list[str]) -> Callable[[str], Awaitable[None]]:
    """A redirect handler for a person who is not there: notes the sign-in page, signs nobody in."""

    async def handler(authorization_url: str) -> None:
        pages.append(authorization_url)
        raise SignInAgain(authorization_url)

    return handler


@pytest.mark.slow
async def test_a_rotated_token_ends_its_sessions_and_locks_nobody_out(trusting_store: RunningStore, tmp_path: Path) -> None:
    alice, bob = trusting_store.add_user("alice"), trusting_store.add_user("bob")
    # Copies re-checked every second, so Alice's calls reach the store soon after the rotation.
    env = {"CONNECTOR_REPULL_TTL_MS": "1000"}
    with running_connector(tmp_path, trusting_store.url, state_dir=tmp_path / "state", extra_env=env) as connector:
        url = connector.base_url + "/mcp"
        rotated, alice_in, bob_in, alice_done = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()
        alice_task = asyncio.create_task(_alice_calls(url, alice, rotated, alice_in))
        bob_outcomes: list[tuple[str, str, bool]] = []
        bob_task = asyncio.create_task(memorize_and_recall(url, bob, alice_done, bob_in, bob_outcomes))
        await asyncio.wait_for(asyncio.gather(alice_in.wait(), bob_in.wait()), 120)

        loop = asyncio.get_running_loop()
        started = loop.time()
        refused_before, limited_before = _store_answers(trusting_store, 401), _store_answers(trusting_store, 429)
        new_token = await asyncio.to_thread(trusting_store.rotate, alice)
        rotated.set()
        outcomes, pages = await asyncio.wait_for(alice_task, 120)
        took = loop.time() - started
        alice_done.set()
        await asyncio.wait_for(bob_task, 120)
        refused = _store_answers(trusting_store, 401) - refused_before
        limited = _store_answers(trusting_store, 429) - limited_before

        assert len(outcomes) == ALICE_CALLS and took < 60, (len(outcomes), took)
        # Her dead token cost the store one failed login, not one per call; nobody was refused 429.
        assert refused == 1 and limited == 0, (refused, limited)
        # Bob never noticed: every write reached the store, every recall found it.
        assert len(bob_outcomes) >= 10 and all(ok for _, _, ok in bob_outcomes), bob_outcomes
        # Alice: served from her copy until it is re-checked, then told once, then asked to sign in again.
        told = [outcome for outcome in outcomes if outcome.startswith("refused")]
        assert len(told) == 1 and "sign in again" in told[0], told
        first_refusal = outcomes.index(told[0])
        assert set(outcomes[:first_refusal]) <= {"ok"}, outcomes
        assert set(outcomes[first_refusal + 1:]) == {"sign in again"}, outcomes
        # One sign-in page, the first; then one for each call refused with 401.
        assert len(pages) == 1 + outcomes.count("sign in again"), (len(pages), outcomes)

        # With the new token she signs in again and works.
        provider = signed_in_provider(url, new_token, MemoryStorage(), client_name="alice's app, again")
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                assert not (await client.call_tool("brain_status", {})).is_error


async def test_a_write_refused_for_a_rotated_token_says_not_saved_then_sign_in_again(
    trusting_store: RunningStore, tmp_path: Path
) -> None:
    carol = trusting_store.add_user("carol")
    with running_connector(tmp_path, trusting_store.url, state_dir=tmp_path / "state") as connector:
        url = connector.base_url + "/mcp"
        pages: list[str] = []
        provider = signed_in_provider(url, carol.token, MemoryStorage(), client_name="carol's app", attempts=pages)
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                saved = await client.call_tool("brain_memorize", {"content": "Saved with the old token"})
                assert not saved.is_error and (saved.structured_content or {}).get("synced") is True
            await asyncio.to_thread(trusting_store.rotate, carol)
            provider.context.redirect_handler = _away(pages)
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                refused = await client.call_tool("brain_memorize", {"content": "Written after the rotation"})
            # Held-write semantics as before: the write is refused for good, in its own result.
            text = " ".join(getattr(part, "text", "") for part in refused.content)
            assert refused.is_error and "Not saved" in text and "no longer accepts this sign-in" in text, text
            assert len(pages) == 1  # only the first sign-in so far
            # Her sign-in has ended: the next call is sent to sign in again, without asking the store.
            assert await _recall_once(url, http) == "sign in again"
            assert len(pages) == 2
