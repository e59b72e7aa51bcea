"""/authorize: every check in its order, errors with iss, and the sign-in page."""

from __future__ import annotations

import pytest

from connector.oauth.server import JsonReply, PageReply, RedirectReply

from .conftest import BASE, GOOD_TOKEN, REDIRECT, RESOURCE, World, query_of, register

pytestmark = pytest.mark.anyio


async def test_unknown_client_is_400_json_without_redirect(world: World) -> None:
    flow = register(world)
    reply = await world.server.authorize(flow.authorize_params(client_id="nobody"), BASE)
    assert isinstance(reply, JsonReply) and reply.status == 400 and reply.body["error"] == "invalid_client"
    reply = await world.server.authorize(flow.authorize_params(client_id=None), BASE)
    assert isinstance(reply, JsonReply) and reply.status == 400


async def test_unregistered_redirect_is_400_json_even_with_other_errors(world: World) -> None:
    flow = register(world)
    for uri in ["http://127.0.0.1:33418/other", REDIRECT + "/", "https://evil.example/callback", REDIRECT + "?x=1"]:
        reply = await world.server.authorize(flow.authorize_params(redirect_uri=uri, response_type="token"), BASE)
        assert isinstance(reply, JsonReply) and reply.status == 400, uri


async def test_missing_redirect_uses_the_single_registered_one(world: World) -> None:
    flow = register(world)
    reply = await world.server.authorize(flow.authorize_params(redirect_uri=None), BASE)
    assert isinstance(reply, PageReply)


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"response_type": None}, "unsupported_response_type"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge_method": None}, "invalid_request"),
        ({"code_challenge": None}, "invalid_request"),
        ({"code_challenge": "short"}, "invalid_request"),
        ({"resource": "http://127.0.0.1:8788/other"}, "invalid_target"),
        ({"resource": "http://evil.example/mcp"}, "invalid_target"),
        ({"resource": None}, "invalid_target"),
        ({"scope": "brain.read admin"}, "invalid_scope"),
        ({"scope": "offline_access"}, "invalid_scope"),
        ({"state": ["a", "b"]}, "invalid_request"),
        ({"resource": [RESOURCE, RESOURCE]}, "invalid_request"),
    ],
)
async def test_errors_redirect_with_iss_and_state(world: World, overrides: dict, error: str) -> None:
    flow = register(world)
    reply = await world.server.authorize(flow.authorize_params(**overrides), BASE)
    assert isinstance(reply, RedirectReply), reply
    assert reply.location.startswith(REDIRECT + "?")
    query = query_of(reply.location)
    assert query["error"] == error
    assert query["iss"] == BASE
    if "state" not in overrides:
        assert query["state"] == "st-123"


async def test_check_order_response_type_before_pkce_before_resource(world: World) -> None:
    flow = register(world)
    reply = await world.server.authorize(
        flow.authorize_params(response_type="token", code_challenge_method="plain", resource="x", scope="bad"), BASE
    )
    assert query_of(reply.location)["error"] == "unsupported_response_type"  # type: ignore[union-attr]
    reply = await world.server.authorize(flow.authorize_params(code_challenge_method="plain", resource="x", scope="bad"), BASE)
    assert query_of(reply.location)["error"] == "invalid_request"  # type: ignore[union-attr]
    reply = await world.server.authorize(flow.authorize_params(resource="x", scope="bad"), BASE)
    assert query_of(reply.location)["error"] == "invalid_target"  # type: ignore[union-attr]


async def test_page_shows_client_and_scopes_and_defaults_to_both(world: World) -> None:
    flow = register(world)
    reply = await world.server.authorize(flow.authorize_params(), BASE)
    assert isinstance(reply, PageReply) and reply.status == 200
    assert reply.view.client_name == "Test Client"
    assert reply.view.scopes == ("brain.read", "brain.write")
    assert reply.view.redirect_host == "127.0.0.1:33418"
    reply = await world.server.authorize(flow.authorize_params(scope="brain.read"), BASE)
    assert reply.view.scopes == ("brain.read",)  # type: ignore[union-attr]


async def test_three_wrong_tokens_end_the_sign_in(world: World) -> None:
    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    assert isinstance(page, PageReply)
    login_id = page.view.login_id
    first = await world.server.complete({"login_id": login_id, "token": "bst_wrong"})
    assert isinstance(first, PageReply) and first.status == 401 and first.view.attempts_left == 2
    second = await world.server.complete({"login_id": login_id, "token": "bst_wrong"})
    assert isinstance(second, PageReply) and second.view.attempts_left == 1
    third = await world.server.complete({"login_id": login_id, "token": "bst_wrong"})
    assert isinstance(third, RedirectReply)
    assert query_of(third.location)["error"] == "access_denied"
    assert query_of(third.location)["iss"] == BASE
    # The sign-in is gone: even the right token no longer completes it.
    late = await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN})
    assert isinstance(late, PageReply) and late.status == 400


async def test_wrong_token_then_right_token_succeeds(world: World) -> None:
    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    login_id = page.view.login_id  # type: ignore[union-attr]
    await world.server.complete({"login_id": login_id, "token": "bst_wrong"})
    done = await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN})
    assert isinstance(done, RedirectReply)
    query = query_of(done.location)
    assert query["code"] and query["state"] == "st-123" and query["iss"] == BASE


async def test_unreachable_store_asks_to_try_again_without_using_an_attempt(world: World) -> None:
    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    login_id = page.view.login_id  # type: ignore[union-attr]
    world.provider.down = True
    for _ in range(4):
        reply = await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN})
        assert isinstance(reply, PageReply) and reply.status == 503 and "Try again" in (reply.view.error or "")
    world.provider.down = False
    assert isinstance(await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN}), RedirectReply)


async def test_deny_redirects_access_denied(world: World) -> None:
    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    reply = await world.server.complete({"login_id": page.view.login_id, "action": "deny"})  # type: ignore[union-attr]
    assert isinstance(reply, RedirectReply) and query_of(reply.location)["error"] == "access_denied"


async def test_pending_sign_in_expires_after_ten_minutes(world: World) -> None:
    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    world.clock.now += 601
    reply = await world.server.complete({"login_id": page.view.login_id, "token": GOOD_TOKEN})  # type: ignore[union-attr]
    assert isinstance(reply, PageReply) and reply.status == 400


async def test_unknown_login_id_is_refused(world: World) -> None:
    reply = await world.server.complete({"login_id": "made-up", "token": GOOD_TOKEN})
    assert isinstance(reply, PageReply) and reply.status == 400
