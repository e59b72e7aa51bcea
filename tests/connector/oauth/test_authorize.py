"""/authorize: every check in its order, errors with iss, and the sign-in page."""

from __future__ import annotations

import pytest

from connector.oauth.server import JsonReply, PageReply, RedirectReply

from .conftest import BASE, GOOD_TOKEN, REDIRECT, RESOURCE, World, get_code, query_of, register

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
        # One brain's URL: one path segment, written as the connector writes it (its metadata's resource).
        ({"resource": RESOURCE + "/brains/"}, "invalid_target"),
        ({"resource": RESOURCE + "/brains/a/b"}, "invalid_target"),
        ({"resource": RESOURCE + "/brains/team notes"}, "invalid_target"),
        ({"resource": RESOURCE + "/brains/%20team"}, "invalid_target"),
        ({"resource": RESOURCE + "/brains/a%0Ab"}, "invalid_target"),
        ({"resource": RESOURCE + "/other/team"}, "invalid_target"),
        ({"resource": "http://evil.example/mcp/brains/team"}, "invalid_target"),
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


async def test_the_registered_redirect_query_comes_back_byte_for_byte(world: World) -> None:
    # RFC 6749 section 3.1.2: the query of a redirect URI is kept when parameters are added.
    uri = REDIRECT + "?flag&x=%FF&a=b%20c;d"
    flow = register(world, uri)
    refused = await world.server.authorize(flow.authorize_params(redirect_uri=uri, response_type="token"), BASE)
    assert isinstance(refused, RedirectReply)
    assert refused.location.startswith(uri + "&error=unsupported_response_type&"), refused.location
    code = await get_code(world, flow, redirect_uri=uri)
    page = await world.server.authorize(flow.authorize_params(redirect_uri=uri), BASE)
    assert isinstance(page, PageReply)
    done = await world.server.complete({"login_id": page.view.login_id, "token": GOOD_TOKEN})
    assert isinstance(done, RedirectReply) and done.location.startswith(uri + "&code="), done.location
    assert code and query_of(done.location)["state"] == "st-123"


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


# -- pending sign-ins cost no server capacity; wrong tokens are limited per sign-in and address --


async def test_twenty_thousand_started_sign_ins_leave_room_for_a_real_one(world: World) -> None:
    flow = register(world)
    for _ in range(20_000):  # twice what the old in-memory table held
        assert isinstance(await world.server.authorize(flow.authorize_params(), BASE), PageReply)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    done = await world.server.complete({"login_id": page.view.login_id, "token": GOOD_TOKEN})  # type: ignore[union-attr]
    assert isinstance(done, RedirectReply) and query_of(done.location)["code"]


async def test_sealed_sign_in_cannot_be_altered_or_opened_under_another_key(world: World, tmp_path) -> None:
    import secrets as _secrets

    from .conftest import Clock, FakeStoreProvider, build_world

    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    login_id = page.view.login_id  # type: ignore[union-attr]
    assert flow.client_id not in login_id and "st-123" not in login_id  # sealed, not merely signed
    flipped = login_id[:-5] + ("A" if login_id[-5] != "A" else "B") + login_id[-4:]
    for bad in (flipped, login_id[:-1], login_id + "A", "sec1:" + "A" * 80, "x" * 20_000):
        reply = await world.server.complete({"login_id": bad, "token": GOOD_TOKEN})
        assert isinstance(reply, PageReply) and reply.status == 400, bad[:20]
    other = build_world(tmp_path / "other", _secrets.token_bytes(32), FakeStoreProvider(), Clock(world.clock.now))
    reply = await other.server.complete({"login_id": login_id, "token": GOOD_TOKEN})
    assert isinstance(reply, PageReply) and reply.status == 400
    # A replica on the same state key completes it: nothing about it was kept in the first process.
    twin = world.rebuild()
    assert isinstance(await twin.server.complete({"login_id": login_id, "token": GOOD_TOKEN}), RedirectReply)


async def test_a_completed_sign_in_cannot_be_replayed(world: World) -> None:
    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    login_id = page.view.login_id  # type: ignore[union-attr]
    assert isinstance(await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN}), RedirectReply)
    again = await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN})
    assert isinstance(again, PageReply) and again.status == 400


async def test_sign_in_attempts_are_limited_per_address_before_the_store_is_asked(world: World) -> None:
    flow = register(world)

    async def wrong(address: str) -> int:
        page = await world.server.authorize(flow.authorize_params(), BASE)
        reply = await world.server.complete({"login_id": page.view.login_id, "token": "bst_wrong"}, address)  # type: ignore[union-attr]
        assert isinstance(reply, PageReply)
        return reply.status

    assert [await wrong("198.51.100.7") for _ in range(10)] == [401] * 10
    asked = len(world.provider.addresses)
    blocked = await world.server.authorize(flow.authorize_params(), BASE)
    reply = await world.server.complete({"login_id": blocked.view.login_id, "token": GOOD_TOKEN}, "198.51.100.7")  # type: ignore[union-attr]
    assert isinstance(reply, PageReply) and reply.status == 429 and "Wait" in (reply.view.error or "")
    assert len(world.provider.addresses) == asked  # refused without asking the store
    # Another address is not affected, and the person's address is what the store is told.
    done = await world.server.complete({"login_id": blocked.view.login_id, "token": GOOD_TOKEN}, "198.51.100.8")  # type: ignore[union-attr]
    assert isinstance(done, RedirectReply) and world.provider.addresses[-1] == "198.51.100.8"
    # IPv6: one /64 is one client, whatever the host part.
    statuses = [await wrong(f"2001:db8:7:7::{n:x}") for n in range(1, 12)]
    assert statuses == [401] * 10 + [429]
    assert await wrong("2001:db8:7:8::1") == 401


async def test_store_refusing_to_check_counts_as_a_wrong_token(world: World) -> None:
    from connector.identity.base import ProviderThrottled

    flow = register(world)
    page = await world.server.authorize(flow.authorize_params(), BASE)
    login_id = page.view.login_id  # type: ignore[union-attr]

    async def throttled(token: str | None, client_address: str | None = None) -> None:
        raise ProviderThrottled("429")

    world.provider.sign_in = throttled  # type: ignore[method-assign]
    first = await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN}, "192.0.2.1")
    assert isinstance(first, PageReply) and first.status == 429 and first.view.attempts_left == 2
    await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN}, "192.0.2.1")
    third = await world.server.complete({"login_id": login_id, "token": GOOD_TOKEN}, "192.0.2.1")
    assert isinstance(third, RedirectReply) and query_of(third.location)["error"] == "access_denied"


async def test_first_sign_in_keeps_the_registration_and_an_unused_one_expires(world: World) -> None:
    kept, dropped = register(world), register(world)
    await get_code(world, kept)
    assert not world.server.clients.is_unused(kept.client_id)
    assert world.server.clients.is_unused(dropped.client_id)
    world.server.clients._clock = lambda: world.clock.now + 86_401  # type: ignore[attr-defined]
    assert isinstance(await world.server.authorize(kept.authorize_params(), BASE), PageReply)
    gone = await world.server.authorize(dropped.authorize_params(), BASE)
    assert isinstance(gone, JsonReply) and gone.body["error"] == "invalid_client"
