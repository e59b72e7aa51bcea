"""Two replicas sharing a state directory and key, and concurrent refreshes."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from .conftest import BASE, Clock, FakeStoreProvider, build_world, get_tokens, register

pytestmark = pytest.mark.anyio


async def test_replicas_share_sessions_refreshes_and_revocations(tmp_path: Path) -> None:
    key = secrets.token_bytes(32)
    clock = Clock()
    a = build_world(tmp_path / "shared", key, FakeStoreProvider(), clock)
    b = build_world(tmp_path / "shared", key, FakeStoreProvider(), clock)
    flow = register(a)
    tokens = await get_tokens(a, flow)
    assert b.server.verify_access(tokens["access_token"], BASE, now=clock.now) is not None
    # A refresh at replica B of a token replica A issued.
    refreshed = await b.server.token({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
                                      "client_id": flow.client_id})
    assert refreshed.status == 200, refreshed.body
    # Reuse of the old token at A after the grace window: detected, family revoked everywhere.
    clock.now += 61
    reuse = await a.server.token({"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
                                  "client_id": flow.client_id})
    assert reuse.status == 400
    assert b.server.verify_access(refreshed.body["access_token"], BASE, now=clock.now) is None
    assert a.server.verify_access(refreshed.body["access_token"], BASE, now=clock.now) is None


async def test_replica_without_the_state_still_accepts_access_tokens(tmp_path: Path) -> None:
    key = secrets.token_bytes(32)
    a = build_world(tmp_path / "a", key, FakeStoreProvider(), Clock())
    fresh = build_world(tmp_path / "b", key, FakeStoreProvider(), a.clock)
    tokens = await get_tokens(a, register(a))
    assert fresh.server.verify_access(tokens["access_token"], BASE, now=a.clock.now) is not None


async def test_concurrent_refreshes_of_one_token_get_the_same_successor(tmp_path: Path) -> None:
    world = build_world(tmp_path / "s", secrets.token_bytes(32), FakeStoreProvider(), Clock())
    flow = register(world)
    tokens = await get_tokens(world, flow)
    form = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": flow.client_id}
    replies = await asyncio.gather(*(world.server.token(dict(form)) for _ in range(5)))
    assert all(reply.status == 200 for reply in replies)
    assert len({reply.body["refresh_token"] for reply in replies}) == 1
    assert world.provider.renewals == 1
