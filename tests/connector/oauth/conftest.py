"""Building blocks for authorization-server tests: a fake provider, a clock, a client."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from connector.identity.base import Identity, ProviderRefused, ProviderUnavailable
from connector.oauth.clients import ClientRegistry, MetadataDocumentFetcher
from connector.oauth.codes import CODE_KIND, CODE_TTL_S, CODES_PLACE, MAX_CODES, CodeStore
from connector.oauth.grants import RefreshGrants
from connector.oauth.pending import ATTEMPTS_KIND, ATTEMPTS_PLACE, ATTEMPTS_TTL_S, MAX_TRACKED_SIGN_INS, SignInAttempts
from connector.oauth.pkce import s256
from connector.oauth.server import AuthorizationServer, PageReply, RedirectReply
from connector.oauth.state import OAuthState
from connector.oauth.tokens import AccessTokenCodec

from ..conftest import RunningStore, running_store

BASE = "http://127.0.0.1:8788"
RESOURCE = BASE + "/mcp"
REDIRECT = "http://127.0.0.1:33418/callback"
GOOD_TOKEN = "bst_" + "a" * 43


class Clock:
    """A settable clock."""

    def __init__(self, now: float = 1_900_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeStoreProvider:
    """A page provider: GOOD_TOKEN is user u1; ``down`` simulates an unreachable store."""

    kind: str = "static"
    mode: str = "page"
    valid: dict[str, str] = field(default_factory=lambda: {GOOD_TOKEN: "u1"})
    down: bool = False
    renewals: int = 0
    addresses: list[str | None] = field(default_factory=list)

    async def sign_in(self, token: str | None, client_address: str | None = None) -> Identity:
        self.addresses.append(client_address)
        if self.down:
            raise ProviderUnavailable("down")
        user = self.valid.get(token or "")
        if user is None:
            raise ProviderRefused("no")
        return Identity(subject=f"static:{user}", store_credential=token or "", renewal_secret=token or "")

    async def renew(self, subject: str, renewal_secret: str) -> Identity:
        self.renewals += 1
        identity = await self.sign_in(renewal_secret)
        if identity.subject != subject:
            raise ProviderRefused("other user")
        return identity

    async def aclose(self) -> None:
        return None


@dataclass
class World:
    """An authorization server over a state directory, with its fakes."""

    server: AuthorizationServer
    provider: FakeStoreProvider
    clock: Clock
    state_dir: Path
    key: bytes
    rebuild: Callable[[], World]


def build_world(state_dir: Path, key: bytes, provider: FakeStoreProvider, clock: Clock, grace_s: float = 60.0,
                bind_brain: Callable[[Identity, str], Awaitable[str]] | None = None) -> World:
    state = OAuthState(state_dir, key)
    server = AuthorizationServer(
        clients=ClientRegistry(state.clients, clock=clock),
        documents=MetadataDocumentFetcher(allow_http_loopback=True),
        grants=RefreshGrants(state, ttl_s=30 * 86400, grace_s=grace_s),
        codec=AccessTokenCodec(key),
        provider=provider,
        clock=clock,
        box=state.box,
        once=state.once,
        codes=CodeStore(state.sealed(CODES_PLACE, CODE_KIND, ttl_s=CODE_TTL_S, capacity=MAX_CODES, clock=clock)),
        attempts=SignInAttempts(state.sealed(ATTEMPTS_PLACE, ATTEMPTS_KIND, ttl_s=ATTEMPTS_TTL_S,
                                             capacity=MAX_TRACKED_SIGN_INS, clock=clock)),
        bind_brain=bind_brain,
    )
    return World(server, provider, clock, state_dir, key,
                 lambda: build_world(state_dir, key, provider, clock, grace_s, bind_brain))


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path / "state", secrets.token_bytes(32), FakeStoreProvider(), Clock())


def query_of(location: str) -> dict[str, str]:
    """The query of a redirect as a flat dict."""
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


@dataclass
class Flow:
    """A registered client partway through the code flow."""

    client_id: str
    verifier: str = field(default_factory=lambda: secrets.token_urlsafe(48))

    def authorize_params(self, **overrides: Any) -> dict[str, Any]:
        params: dict[str, Any] = {
            "client_id": self.client_id,
            "redirect_uri": REDIRECT,
            "response_type": "code",
            "code_challenge": s256(self.verifier),
            "code_challenge_method": "S256",
            "resource": RESOURCE,
            "state": "st-123",
        }
        params.update(overrides)
        return {key: value for key, value in params.items() if value is not None}


def register(world: World, redirect: str = REDIRECT) -> Flow:
    reply = world.server.register({"redirect_uris": [redirect], "client_name": "Test Client"})
    assert reply.status == 201, reply.body
    return Flow(reply.body["client_id"])


async def get_code(world: World, flow: Flow, token: str = GOOD_TOKEN, **overrides: Any) -> str:
    page = await world.server.authorize(flow.authorize_params(**overrides), BASE)
    assert isinstance(page, PageReply), page
    done = await world.server.complete({"login_id": page.view.login_id, "token": token})
    assert isinstance(done, RedirectReply), done
    query = query_of(done.location)
    assert query["iss"] == BASE and query["state"] == "st-123"
    return query["code"]


async def get_tokens(world: World, flow: Flow) -> dict[str, Any]:
    code = await get_code(world, flow)
    reply = await world.server.token(
        {
            "grant_type": "authorization_code",
            "code": code,
            "client_id": flow.client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": flow.verifier,
            "resource": RESOURCE,
        }
    )
    assert reply.status == 200, reply.body
    return reply.body


async def signed_in(world: World) -> tuple[Flow, dict[str, Any]]:
    """A newly registered client signed in: its flow and its first tokens."""
    flow = register(world)
    return flow, await get_tokens(world, flow)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def trusting_store(tmp_path: Path) -> Iterator[RunningStore]:
    """A store that believes X-Forwarded-For from loopback (where the connector runs), with its default limits."""
    with running_store(tmp_path, env={"STORE_TRUST_PROXY": "loopback"}) as running:
        yield running
