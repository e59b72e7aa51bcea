"""The static provider's reading of the store's GET /auth/me."""

from __future__ import annotations

import httpx
import pytest

from connector.identity.base import ProviderRefused, ProviderThrottled, ProviderUnavailable
from connector.identity.static import StaticTokenProvider
from tests.support.processes import free_port

pytestmark = pytest.mark.anyio
TOKEN = "bst_" + "k" * 43


def _provider(handler) -> StaticTokenProvider:  # type: ignore[no-untyped-def]
    return StaticTokenProvider("http://store.invalid", client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


async def test_accepted_token_names_the_user() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        assert request.url.path == "/auth/me"
        return httpx.Response(200, json={"user": {"id": "u-42", "email": ""}, "storage_used": 0})

    identity = await _provider(handler).sign_in("  " + TOKEN + "\n")
    assert identity.subject == "static:u-42" and identity.store_credential == TOKEN
    assert seen == [f"Bearer {TOKEN}"]


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_tokens(status: int) -> None:
    with pytest.raises(ProviderRefused):
        await _provider(lambda request: httpx.Response(status, json={"error": "no"})).sign_in(TOKEN)


@pytest.mark.parametrize("answer", [httpx.Response(500), httpx.Response(502), httpx.Response(200, text="<html>"),
                                    httpx.Response(200, json={"user": {}}), httpx.Response(200, json=[1])])
async def test_store_trouble_is_unavailable(answer: httpx.Response) -> None:
    with pytest.raises(ProviderUnavailable):
        await _provider(lambda request: answer).sign_in(TOKEN)


async def test_store_429_at_sign_in_is_a_refusal_not_a_free_retry() -> None:
    with pytest.raises(ProviderThrottled) as caught:
        await _provider(lambda request: httpx.Response(429, headers={"Retry-After": "60"})).sign_in(TOKEN, "203.0.113.9")
    assert isinstance(caught.value, ProviderRefused)


async def test_store_429_at_renewal_keeps_the_session() -> None:
    with pytest.raises(ProviderUnavailable):
        await _provider(lambda request: httpx.Response(429)).renew("static:u-42", TOKEN)


@pytest.mark.parametrize(
    ("address", "forwarded"),
    [("203.0.113.9", "203.0.113.9"), ("2001:db8::7", "2001:db8::7"), ("[2001:db8::7]:443", "2001:db8::7"),
     (None, None), ("unknown", None), ("1.2.3.4, 5.6.7.8", None), ("evil\r\nX-Injected: 1", None)],
)
async def test_sign_in_names_the_person_address_to_the_store(address: str | None, forwarded: str | None) -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("x-forwarded-for"))
        return httpx.Response(200, json={"user": {"id": "u-42"}})

    await _provider(handler).sign_in(TOKEN, address)
    assert seen == [forwarded]


async def test_unreachable_store_is_unavailable() -> None:
    provider = StaticTokenProvider(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(ProviderUnavailable):
        await provider.sign_in(TOKEN)
    await provider.aclose()


@pytest.mark.parametrize("typed", ["", "   ", "bst_ a b", "x" * 5000, "bst_é"])
async def test_junk_is_refused_without_asking_the_store(typed: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("the store must not be asked")

    with pytest.raises(ProviderRefused):
        await _provider(handler).sign_in(typed)


async def test_renewal_refuses_a_token_that_now_names_someone_else() -> None:
    provider = _provider(lambda request: httpx.Response(200, json={"user": {"id": "other"}}))
    with pytest.raises(ProviderRefused):
        await provider.renew("static:u-42", TOKEN)
