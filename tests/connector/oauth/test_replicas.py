"""Two replicas sharing a state directory and key, and concurrent refreshes."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from connector.oauth.server import PageReply, RedirectReply

from .conftest import (
    BASE, GOOD_TOKEN, REDIRECT, RESOURCE, Clock, FakeStoreProvider, World, build_world, get_code, get_tokens, register,
    signed_in,
)

pytestmark = pytest.mark.anyio


def two_replicas(state_dir: Path) -> tuple[World, World, Clock]:
    """Two authorization servers on one state directory and key, and their shared clock."""
    key = secrets.token_bytes(32)
    clock = Clock()
    return (build_world(state_dir, key, FakeStoreProvider(), clock),
            build_world(state_dir, key, FakeStoreProvider(), clock), clock)


async def test_replicas_share_sessions_refreshes_and_revocations(tmp_path: Path) -> None:
    a, b, clock = two_replicas(tmp_path / "shared")
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
    flow, tokens = await signed_in(world)
    form = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": flow.client_id}
    replies = await asyncio.gather(*(world.server.token(dict(form)) for _ in range(5)))
    assert all(reply.status == 200 for reply in replies)
    assert len({reply.body["refresh_token"] for reply in replies}) == 1
    assert world.provider.renewals == 1


async def test_a_code_issued_by_one_replica_is_redeemed_once_at_any(tmp_path: Path) -> None:
    a, b, clock = two_replicas(tmp_path / "shared")
    flow = register(a)
    code = await get_code(a, flow)
    form = {"grant_type": "authorization_code", "code": code, "client_id": flow.client_id,
            "redirect_uri": REDIRECT, "code_verifier": flow.verifier, "resource": RESOURCE}
    # The binding still holds at the other replica: a wrong verifier spends the code there too.
    wrong = await b.server.token({**form, "code_verifier": "x" * 43})
    assert wrong.status == 400 and wrong.body["error"] == "invalid_grant"
    for world in (a, b):
        again = await world.server.token(form)
        assert again.status == 400 and again.body["error"] == "invalid_grant", again.body

    fresh = await get_code(a, flow)
    # A code is a random name; its record is a sealed file (no store credential in clear), 0600.
    files = [path for path in (tmp_path / "shared" / "codes").iterdir() if not path.name.startswith(".")]
    assert len(fresh) < 60 and len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
    assert GOOD_TOKEN.encode() not in files[0].read_bytes() and fresh not in files[0].name
    redeemed = await b.server.token({**form, "code": fresh})
    assert redeemed.status == 200, redeemed.body
    assert a.server.verify_access(redeemed.body["access_token"], BASE, now=clock.now) is not None
    for world in (a, b):
        replay = await world.server.token({**form, "code": fresh})
        assert replay.status == 400 and replay.body["error"] == "invalid_grant"
    # The replay, at the other replica, ended the sign-in the code started.
    assert a.server.verify_access(redeemed.body["access_token"], BASE, now=clock.now) is None
    # What is left is the redeemed code's marker: a new sealed file, with no credential in it.
    left = [path for path in (tmp_path / "shared" / "codes").iterdir() if not path.name.startswith(".")]
    assert len(left) == 1 and left != files and GOOD_TOKEN.encode() not in left[0].read_bytes()
    # A code outlives nothing: expired at every replica.
    late = await get_code(a, flow)
    clock.now += 61
    expired = await b.server.token({**form, "code": late})
    assert expired.status == 400 and expired.body["error"] == "invalid_grant"


async def test_a_sign_in_finished_at_one_replica_cannot_be_finished_again_at_another(tmp_path: Path) -> None:
    a, b, _ = two_replicas(tmp_path / "shared")
    flow = register(a)
    page = await a.server.authorize(flow.authorize_params(), BASE)
    assert isinstance(page, PageReply)
    form = {"login_id": page.view.login_id, "token": GOOD_TOKEN}
    assert isinstance(await b.server.complete(form), RedirectReply)
    replayed = await a.server.complete(form)
    assert isinstance(replayed, PageReply) and replayed.status == 400


async def test_a_sign_ins_three_wrong_tokens_count_across_replicas(tmp_path: Path) -> None:
    # Not three at each replica: behind a balancer every submission may reach another one.
    a, b, _ = two_replicas(tmp_path / "shared")
    flow = register(a)
    page = await a.server.authorize(flow.authorize_params(), BASE)
    assert isinstance(page, PageReply)
    login_id = page.view.login_id
    first = await a.server.complete({"login_id": login_id, "token": "bst_wrong"})
    assert isinstance(first, PageReply) and first.view.attempts_left == 2
    second = await b.server.complete({"login_id": login_id, "token": "bst_wrong"})
    assert isinstance(second, PageReply) and second.view.attempts_left == 1
    third = await a.server.complete({"login_id": login_id, "token": "bst_wrong"})
    assert isinstance(third, RedirectReply) and "error=access_denied" in third.location
    # Ended at every replica: the right token no longer finishes it anywhere.
    for replica in (a, b):
        late = await replica.server.complete({"login_id": login_id, "token": GOOD_TOKEN})
        assert isinstance(late, PageReply) and late.status == 400
