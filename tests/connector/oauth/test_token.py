"""/token and /revoke: codes, PKCE, resource, refresh rotation, grace, families, revocation."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import anyio
import pytest

from connector.identity.base import Identity
from connector.oauth.pkce import s256
from connector.oauth.server import PageReply, RedirectReply

from .conftest import (BASE, GOOD_TOKEN, REDIRECT, RESOURCE, Clock, FakeStoreProvider, Flow, World, build_world,
                       get_code, get_tokens, query_of, register, signed_in)

pytestmark = pytest.mark.anyio


def code_form(flow: Flow, the_code: str, **overrides: Any) -> dict[str, Any]:
    form: dict[str, Any] = {
        "grant_type": "authorization_code",
        "code": the_code,
        "client_id": flow.client_id,
        "redirect_uri": REDIRECT,
        "code_verifier": flow.verifier,
        "resource": RESOURCE,
    }
    form.update(overrides)
    return {key: value for key, value in form.items() if value is not None}


def refresh_form(flow: Flow, refresh_token: str, **overrides: Any) -> dict[str, Any]:
    form: dict[str, Any] = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": flow.client_id}
    form.update(overrides)
    return {key: value for key, value in form.items() if value is not None}


async def test_code_exchange_answers_tokens_with_no_store(world: World) -> None:
    flow = register(world)
    code = await get_code(world, flow)
    reply = await world.server.token(code_form(flow, code))
    assert reply.status == 200
    assert reply.headers["Cache-Control"] == "no-store"
    body = reply.body
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3600
    assert body["scope"] == "brain.read brain.write"
    claims = world.server.verify_access(body["access_token"], BASE, now=world.clock.now)
    assert claims is not None and claims.sub == "static:u1" and claims.store_credential == GOOD_TOKEN
    assert claims.aud == RESOURCE and claims.client_name == "Test Client" and claims.idp == "static"


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"code_verifier": None}, "invalid_grant"),  # no PKCE at the token endpoint
        ({"code_verifier": "x" * 43}, "invalid_grant"),  # wrong verifier
        ({"code_verifier": "short"}, "invalid_grant"),
        ({"client_id": "someone-else"}, "invalid_grant"),
        ({"redirect_uri": "http://127.0.0.1:33418/other"}, "invalid_grant"),
        ({"redirect_uri": None}, "invalid_grant"),  # it was sent at /authorize, so it is required
        ({"resource": "http://127.0.0.1:9999/mcp"}, "invalid_target"),
    ],
)
async def test_code_exchange_refusals_and_the_code_is_then_spent(world: World, overrides: dict, error: str) -> None:
    flow = register(world)
    code = await get_code(world, flow)
    reply = await world.server.token(code_form(flow, code, **overrides))
    assert reply.status == 400 and reply.body["error"] == error
    assert reply.headers["Cache-Control"] == "no-store"
    # The code was deleted on lookup: even the correct request now fails.
    retry = await world.server.token(code_form(flow, code))
    assert retry.status == 400 and retry.body["error"] == "invalid_grant"


async def test_plain_pkce_is_refused_at_authorize(world: World) -> None:
    flow = register(world)
    reply = await world.server.authorize(
        flow.authorize_params(code_challenge=flow.verifier, code_challenge_method="plain"), BASE
    )
    assert isinstance(reply, RedirectReply) and query_of(reply.location)["error"] == "invalid_request"


async def test_unknown_code_refused(world: World) -> None:
    flow = register(world)
    reply = await world.server.token(code_form(flow, "not-a-code"))
    assert reply.status == 400 and reply.body["error"] == "invalid_grant"


async def test_code_is_single_use(world: World) -> None:
    flow = register(world)
    code = await get_code(world, flow)
    assert (await world.server.token(code_form(flow, code))).status == 200
    again = await world.server.token(code_form(flow, code))
    assert again.status == 400 and again.body["error"] == "invalid_grant"


async def test_a_code_used_twice_revokes_what_its_first_use_was_given(world: World) -> None:
    flow = register(world)
    code = await get_code(world, flow)
    first = await world.server.token(code_form(flow, code))
    assert first.status == 200
    # A marker's name is not a code: presenting it takes nothing away.
    sly = await world.server.token(code_form(flow, "spent:" + code))
    assert sly.status == 400 and sly.body["error"] == "invalid_grant"
    # The code leaked (RFC 6749 section 4.1.2): whoever redeemed it first must not keep the tokens.
    again = await world.server.token(code_form(flow, code))
    assert again.status == 400 and again.body["error"] == "invalid_grant"
    assert world.server.verify_access(first.body["access_token"], BASE, now=world.clock.now) is None
    refreshed = await world.server.token(refresh_form(flow, first.body["refresh_token"]))
    assert refreshed.status == 400 and refreshed.body["error"] == "invalid_grant"
    # Another sign-in of the same client is untouched.
    other = await get_tokens(world, flow)
    assert world.server.verify_access(other["access_token"], BASE, now=world.clock.now) is not None


async def test_a_code_presented_again_while_its_first_use_is_answered_ends_that_sign_in(tmp_path: Path) -> None:
    # The marker was written once the tokens were made, after the brain was looked up at the
    # store: a second use meanwhile (the same code caught by two apps at once) revoked nothing.
    looking_up, answer = anyio.Event(), anyio.Event()

    async def bind_brain(identity: Identity, brain: str) -> str:
        looking_up.set()
        await answer.wait()
        return "brain-id"

    world = build_world(tmp_path / "state", secrets.token_bytes(32), FakeStoreProvider(), Clock(),
                        bind_brain=bind_brain)
    flow = register(world)
    resource = RESOURCE + "/brains/team"
    code = await get_code(world, flow, resource=resource)
    first: list[Any] = []

    async def redeem() -> None:
        first.append(await world.server.token(code_form(flow, code, resource=resource)))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(redeem)
        await looking_up.wait()
        again = await world.server.token(code_form(flow, code, resource=resource))
        answer.set()
    assert again.status == 400 and again.body["error"] == "invalid_grant"
    [reply] = first
    assert reply.status == 400 and reply.body["error"] == "invalid_grant", reply.body
    # A later sign-in of the same client is untouched.
    other = await get_code(world, flow, resource=resource)
    assert (await world.server.token(code_form(flow, other, resource=resource))).status == 200


async def test_code_expires_after_sixty_seconds(world: World) -> None:
    flow = register(world)
    code = await get_code(world, flow)
    world.clock.now += 61
    reply = await world.server.token(code_form(flow, code))
    assert reply.status == 400 and reply.body["error"] == "invalid_grant"


async def test_resource_may_be_omitted_at_token(world: World) -> None:
    flow = register(world)
    code = await get_code(world, flow)
    reply = await world.server.token(code_form(flow, code, resource=None))
    assert reply.status == 200


async def test_unsupported_and_missing_grant_type(world: World) -> None:
    assert (await world.server.token({"grant_type": "password"})).body["error"] == "unsupported_grant_type"
    assert (await world.server.token({})).body["error"] == "invalid_request"
    assert (await world.server.token({"grant_type": ["a", "b"]})).body["error"] == "invalid_request"


async def test_access_token_for_another_audience_is_refused(world: World) -> None:
    flow, tokens = await signed_in(world)
    assert world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now) is not None
    assert world.server.verify_access(tokens["access_token"], "http://127.0.0.1:9999", now=world.clock.now) is None
    assert world.server.verify_access(tokens["access_token"], "https://connector.example", now=world.clock.now) is None


async def test_expired_access_token_is_refused(world: World) -> None:
    flow, tokens = await signed_in(world)
    assert world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now + 3599) is not None
    assert world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now + 3600) is None


async def test_refresh_rotates_and_renews_at_the_provider(world: World) -> None:
    flow, tokens = await signed_in(world)
    world.clock.now += 10
    reply = await world.server.token(refresh_form(flow, tokens["refresh_token"], resource=RESOURCE))
    assert reply.status == 200 and reply.headers["Cache-Control"] == "no-store"
    assert reply.body["refresh_token"] != tokens["refresh_token"]
    assert world.provider.renewals == 1
    assert world.server.verify_access(reply.body["access_token"], BASE, now=world.clock.now) is not None
    # The successor refreshes in turn.
    world.clock.now += 10
    again = await world.server.token(refresh_form(flow, reply.body["refresh_token"]))
    assert again.status == 200


async def test_refresh_replay_within_grace_returns_the_same_successor(world: World) -> None:
    flow, tokens = await signed_in(world)
    first = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    world.clock.now += 30
    replay = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    assert replay.status == 200
    assert replay.body["refresh_token"] == first.body["refresh_token"]
    assert world.provider.renewals == 1  # a replay does not renew again


async def test_refresh_reuse_after_grace_revokes_the_family(world: World) -> None:
    flow, tokens = await signed_in(world)
    first = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    world.clock.now += 61
    reuse = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    assert reuse.status == 400 and reuse.body["error"] == "invalid_grant"
    # The whole family is gone: the legitimate successor and its access token too.
    successor = await world.server.token(refresh_form(flow, first.body["refresh_token"]))
    assert successor.status == 400 and successor.body["error"] == "invalid_grant"
    assert world.server.verify_access(first.body["access_token"], BASE, now=world.clock.now) is None


async def test_refresh_reuse_after_successor_was_used_revokes_even_within_grace(world: World) -> None:
    flow, tokens = await signed_in(world)
    first = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    second = await world.server.token(refresh_form(flow, first.body["refresh_token"]))
    assert second.status == 200
    reuse = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    assert reuse.status == 400
    assert (await world.server.token(refresh_form(flow, second.body["refresh_token"]))).status == 400


async def test_refresh_by_another_client_and_other_resource_refused(world: World) -> None:
    flow = register(world)
    other = register(world)
    tokens = await get_tokens(world, flow)
    reply = await world.server.token(refresh_form(other, tokens["refresh_token"]))
    assert reply.status == 400 and reply.body["error"] == "invalid_grant"
    reply = await world.server.token(refresh_form(flow, tokens["refresh_token"], resource="http://127.0.0.1:1/mcp"))
    assert reply.status == 400 and reply.body["error"] == "invalid_target"
    reply = await world.server.token(refresh_form(flow, tokens["refresh_token"], scope="brain.read admin"))
    assert reply.status == 400 and reply.body["error"] == "invalid_scope"
    # None of those refusals spent the token.
    assert (await world.server.token(refresh_form(flow, tokens["refresh_token"]))).status == 200


async def test_refresh_may_narrow_scope(world: World) -> None:
    flow, tokens = await signed_in(world)
    reply = await world.server.token(refresh_form(flow, tokens["refresh_token"], scope="brain.read"))
    assert reply.status == 200 and reply.body["scope"] == "brain.read"
    claims = world.server.verify_access(reply.body["access_token"], BASE, now=world.clock.now)
    assert claims is not None and claims.scope == frozenset({"brain.read"})


async def test_expired_refresh_token_refused(world: World) -> None:
    flow, tokens = await signed_in(world)
    world.clock.now += 30 * 86400 + 1
    reply = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    assert reply.status == 400 and reply.body["error"] == "invalid_grant"


async def test_sliding_window_extends_with_each_use(world: World) -> None:
    flow, tokens = await signed_in(world)
    token = tokens["refresh_token"]
    for _ in range(3):
        world.clock.now += 20 * 86400
        reply = await world.server.token(refresh_form(flow, token))
        assert reply.status == 200
        token = reply.body["refresh_token"]


async def test_removed_store_user_at_refresh_revokes_the_family(world: World) -> None:
    flow, tokens = await signed_in(world)
    world.provider.valid.clear()  # the user was removed (or the token rotated) at the store
    reply = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    assert reply.status == 400 and reply.body["error"] == "invalid_grant"
    assert world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now) is None
    world.provider.valid[GOOD_TOKEN] = "u1"
    assert (await world.server.token(refresh_form(flow, tokens["refresh_token"]))).status == 400


async def test_store_outage_at_refresh_is_503_and_keeps_the_tokens(world: World) -> None:
    flow, tokens = await signed_in(world)
    world.provider.down = True
    reply = await world.server.token(refresh_form(flow, tokens["refresh_token"]))
    assert reply.status == 503 and reply.body["error"] == "temporarily_unavailable"
    assert world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now) is not None
    world.provider.down = False
    assert (await world.server.token(refresh_form(flow, tokens["refresh_token"]))).status == 200


async def test_revoke_refresh_token_ends_the_family(world: World) -> None:
    flow, tokens = await signed_in(world)
    reply = await world.server.revoke({"token": tokens["refresh_token"], "client_id": flow.client_id})
    assert reply.status == 200
    assert (await world.server.token(refresh_form(flow, tokens["refresh_token"]))).status == 400
    assert world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now) is None


async def test_revoke_access_token_ends_the_family_and_unknown_tokens_are_200(world: World) -> None:
    flow, tokens = await signed_in(world)
    assert (await world.server.revoke({"token": "nonsense"})).status == 200
    other = register(world)
    # Another client cannot revoke it.
    assert (await world.server.revoke({"token": tokens["access_token"], "client_id": other.client_id})).status == 200
    assert world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now) is not None
    assert (await world.server.revoke({"token": tokens["access_token"], "client_id": flow.client_id})).status == 200
    assert world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now) is None
    assert (await world.server.revoke({})).status == 400


async def test_state_survives_a_restart(world: World) -> None:
    flow, tokens = await signed_in(world)
    restarted = world.rebuild()
    # Access token still accepted, client still known, refresh still works.
    assert restarted.server.verify_access(tokens["access_token"], BASE, now=world.clock.now) is not None
    page = await restarted.server.authorize(flow.authorize_params(), BASE)
    assert isinstance(page, PageReply)
    reply = await restarted.server.token(refresh_form(flow, tokens["refresh_token"]))
    assert reply.status == 200
    # Reuse detection survives a restart too.
    again = world.rebuild()
    world.clock.now += 120
    assert (await again.server.token(refresh_form(flow, tokens["refresh_token"]))).status == 400


async def test_secrets_are_encrypted_and_tokens_hashed_at_rest(world: World) -> None:
    flow, tokens = await signed_in(world)
    for path in world.state_dir.rglob("*"):
        if path.is_dir():
            assert path.stat().st_mode & 0o777 == 0o700, path.name  # clients/ and its shards
            continue
        text = path.read_text()
        assert GOOD_TOKEN not in text, path.name
        assert tokens["refresh_token"] not in text and tokens["access_token"] not in text
        assert path.stat().st_mode & 0o777 == 0o600, path.name
    assert world.state_dir.stat().st_mode & 0o777 == 0o700
    assert len(list((world.state_dir / "clients").glob("*/bcc_*.json"))) == 1
    families = json.loads((world.state_dir / "families.json").read_text())
    assert all(record["secret"].startswith("sec1:") for record in families.values())


async def test_state_under_another_key_is_not_trusted(world: World, tmp_path) -> None:
    import secrets as _secrets

    from .conftest import build_world

    flow, tokens = await signed_in(world)
    other = build_world(world.state_dir, _secrets.token_bytes(32), world.provider, world.clock)
    assert other.server.verify_access(tokens["access_token"], BASE, now=world.clock.now) is None
    assert (await other.server.token(refresh_form(flow, tokens["refresh_token"]))).status == 400


async def test_challenge_helper_matches_rfc7636_example() -> None:
    assert s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


async def test_wrong_token_page_does_not_issue_code(world: World) -> None:
    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    reply = await world.server.complete({"login_id": page.view.login_id, "token": "bst_nope"})  # type: ignore[union-attr]
    assert isinstance(reply, PageReply)


async def test_last_session_end_is_reported_once_per_user(world: World) -> None:
    ended: list[str] = []

    async def on_end(subject: str) -> None:
        ended.append(subject)

    world.server._on_session_end = on_end  # type: ignore[attr-defined]
    flow = register(world)
    first = await get_tokens(world, flow)
    second = await get_tokens(world, flow)
    await world.server.revoke({"token": first["refresh_token"], "client_id": flow.client_id})
    assert ended == []  # the user still has another session
    await world.server.revoke({"token": second["refresh_token"], "client_id": flow.client_id})
    assert ended == ["static:u1"]


@pytest.mark.parametrize("brain", ["team", "team notes", "7c9e6679-7425-40de-944b-e07fc1f90ae7", "日本"])
async def test_a_token_for_one_brains_url_is_good_there_only(world: World, brain: str) -> None:
    from urllib.parse import quote

    flow = register(world)
    resource = f"{RESOURCE}/brains/{quote(brain, safe='')}"
    page = await world.server.authorize(flow.authorize_params(resource=resource), BASE)
    assert isinstance(page, PageReply) and page.view.brain == brain  # the sign-in page names it
    done = await world.server.complete({"login_id": page.view.login_id, "token": GOOD_TOKEN})
    assert isinstance(done, RedirectReply)
    code = query_of(done.location)["code"]
    refused = await world.server.token(code_form(flow, code, resource=RESOURCE))
    assert refused.status == 400 and refused.body["error"] == "invalid_target"
    code = await get_code(world, flow, resource=resource)
    reply = await world.server.token(code_form(flow, code, resource=resource))
    assert reply.status == 200, reply.body
    token = reply.body["access_token"]
    claims = world.server.verify_access(token, BASE, now=world.clock.now, brain=brain)
    assert claims is not None and claims.aud == resource
    assert world.server.verify_access(token, BASE, now=world.clock.now) is None  # not at /mcp
    assert world.server.verify_access(token, BASE, now=world.clock.now, brain=brain + "x") is None
    # A refresh keeps the token bound to that URL.
    refreshed = await world.server.token(refresh_form(flow, reply.body["refresh_token"]))
    assert refreshed.status == 200
    again = world.server.verify_access(refreshed.body["access_token"], BASE, now=world.clock.now, brain=brain)
    assert again is not None and again.aud == resource
    assert world.server.verify_access(refreshed.body["access_token"], BASE, now=world.clock.now) is None


async def test_a_token_for_mcp_is_good_at_every_brains_url(world: World) -> None:
    flow, tokens = await signed_in(world)
    for brain in ("team", "7c9e6679-7425-40de-944b-e07fc1f90ae7"):
        claims = world.server.verify_access(tokens["access_token"], BASE, now=world.clock.now, brain=brain)
        assert claims is not None and claims.aud == RESOURCE
