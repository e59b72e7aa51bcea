"""The OAuth routes as Litestar handlers, and ``build_oauth`` wiring them from settings.

Routes stay thin: rate limit, parse, ask the AuthorizationServer, turn its reply
into a response. ``build_oauth`` chooses the identity provider (failing closed
when there is none) and returns an ``OAuthMount`` the app mounts: its
``route_handlers`` and ``verify_access(token, base_url)`` for /mcp.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

import anyio.to_thread
from litestar import Request, Response, get, post
from litestar.enums import MediaType

from common.docstore import DocumentStore
from common.limits import TrustedProxies, client_address, limit_key, request_limiter
from connector.identity.base import Identity, IdentityProvider
from connector.identity.dev import DEV_WARNING, DevProvider
from connector.identity.static import StaticTokenProvider
from connector.mcp.http import last_segment_as_sent, peer_address, request_base_url
from connector.oauth.clients import ClientRegistry, MetadataDocumentFetcher
from connector.oauth.codes import CODE_KIND, CODE_TTL_S, CODES_PLACE, MAX_CODES, CodeStore
from connector.oauth.grants import RefreshGrants
from connector.oauth.metadata import authorization_server_metadata, protected_resource_metadata
from connector.oauth.pending import ATTEMPTS_KIND, ATTEMPTS_PLACE, ATTEMPTS_TTL_S, MAX_TRACKED_SIGN_INS, SignInAttempts
from connector.oauth.server import (
    SIGNIN_ATTEMPTS_PER_MIN,
    AuthorizationServer,
    JsonReply,
    PageReply,
    RedirectReply,
    Reply,
    valid_brain_segment,
)
from connector.oauth.signin_limit import SignInChecks
from connector.oauth.state import OAuthState
from connector.oauth.tokens import AccessClaims, AccessTokenCodec
from connector.web.page import page_headers, render_signin

log = logging.getLogger("connector.oauth")

MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 64
# Requests per minute per client address (connector.md section 1).
RATE_LIMITS = {"register": 10, "authorize": 30, "token": 60}
# Where the replicas count them together, in the shared state ("<prefix>-<group>/").
LIMITS_PREFIX = "limits/oauth"
# Public clients hold no cookies here, so any origin may read these answers (browser-based
# MCP clients). Preflight (OPTIONS) answers are the app's CORS configuration.
_CORS = {"Access-Control-Allow-Origin": "*"}


class ConfigurationError(RuntimeError):
    """The connector must not start with these settings."""


def choose_provider(settings: Any) -> IdentityProvider:
    """The identity provider the settings ask for; refuse to start without one."""
    if getattr(settings, "dev", False):
        log.warning(DEV_WARNING)
        return DevProvider(getattr(settings, "dev_store_token", None))
    idp = getattr(settings, "idp", None)
    if idp == "static":
        return StaticTokenProvider(settings.store_url, timeout_s=float(getattr(settings, "store_timeout_s", 10.0)))
    if idp == "oidc":
        from connector.identity.oidc import OidcProvider

        try:
            return OidcProvider(
                issuer=settings.oidc_issuer,
                client_id=settings.oidc_client_id,
                client_secret=settings.oidc_client_secret,
                scopes=settings.oidc_scopes,
                auth_params=dict(settings.oidc_auth_params or {}),
                allowed_domains=tuple(settings.oidc_allowed_domains),
                allowed_emails=tuple(settings.oidc_allowed_emails),
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc).replace("STORE_OIDC_", "OIDC_")) from None
    raise ConfigurationError(
        "no identity provider: set CONNECTOR_IDP=static (store tokens) or CONNECTOR_IDP=oidc, "
        "or start with --dev for local development only"
    )


class _RateLimits:
    """Per-address limits of the OAuth routes (common/limits; an IPv6 address counts with its /64),
    counted across the replicas sharing ``state`` when there is one (synced every second)."""

    def __init__(self, trust_proxy: tuple[str, ...], state: DocumentStore | None = None) -> None:
        self._trusted = TrustedProxies.parse(trust_proxy)
        self._limiters = {group: request_limiter(rate, state, f"{LIMITS_PREFIX}-{group}")
                          for group, rate in RATE_LIMITS.items()}

    def address(self, request: Request[Any, Any, Any]) -> str:
        """The client's address: the right-most untrusted X-Forwarded-For hop behind a trusted proxy."""
        return client_address(peer_address(request.scope), request.headers.get("x-forwarded-for"), self._trusted)

    def retry_after(self, group: str, request: Request[Any, Any, Any]) -> float | None:
        return self._limiters[group].hit(limit_key(self.address(request)))


@dataclass
class OAuthMount:
    """What the app mounts: the routes, and the access-token check for /mcp."""

    server: AuthorizationServer
    provider: IdentityProvider
    route_handlers: list[Any]

    def verify_access(self, token: str, base_url: str, brain: str | None = None) -> AccessClaims | None:
        """The claims of a valid access token for ``<base_url>/mcp`` (or, with ``brain``, for that
        brain's URL), else None (→ 401)."""
        return self.server.verify_access(token, base_url, brain=brain)

    async def aclose(self) -> None:
        """Release the provider's network clients."""
        await self.provider.aclose()


def build_oauth(
    settings: Any,
    *,
    state: OAuthState,
    codec: AccessTokenCodec,
    store: Any = None,
    manager: Any = None,
    provider: IdentityProvider | None = None,
    documents: MetadataDocumentFetcher | None = None,
    signin_checks: SignInChecks | None = None,
    limits_state: DocumentStore | None = None,
) -> OAuthMount:
    """The authorization server and its routes, from the connector's settings.

    ``manager`` (the working-copy manager) is told when a user's last session
    ends, so their copies are purged, and tells the server when the store refuses
    a store token, so the sign-ins using it end. ``signin_checks`` is the budget of
    sign-in attempts per address the web app shares (`signin_limiter`); ``limits_state`` the shared state the
    per-address limits of the routes are counted in across replicas. Raises ConfigurationError when no
    identity provider is configured.
    """
    chosen = provider or choose_provider(settings)
    if not state.persistent:
        log.warning("neither CONNECTOR_STATE_DIR nor CONNECTOR_STATE_URL is set: sign-ins are kept in memory "
                    "and end at restart")
    on_session_end: Callable[[str], Awaitable[Any]] | None = getattr(manager, "purge_user", None)
    brain_id_of = getattr(manager, "brain_id_of", None)

    async def bind_brain(identity: Identity, brain: str) -> str:
        return await brain_id_of(identity.subject, identity.store_credential, brain) if brain_id_of else ""
    server = AuthorizationServer(
        clients=ClientRegistry(state.clients, unused_ttl_s=settings.unused_client_ttl_ms / 1000.0),
        documents=documents or MetadataDocumentFetcher(),
        grants=RefreshGrants(
            state,
            ttl_s=settings.refresh_ttl_ms / 1000.0,
            grace_s=settings.refresh_grace_ms / 1000.0,
        ),
        codec=codec,
        provider=chosen,
        on_session_end=on_session_end,
        box=state.box,
        once=state.once,
        codes=CodeStore(state.sealed(CODES_PLACE, CODE_KIND, ttl_s=CODE_TTL_S, capacity=MAX_CODES)),
        attempts=SignInAttempts(state.sealed(ATTEMPTS_PLACE, ATTEMPTS_KIND, ttl_s=ATTEMPTS_TTL_S,
                                             capacity=MAX_TRACKED_SIGN_INS)),
        signin_attempts_per_min=int(getattr(settings, "signin_attempts_per_min", SIGNIN_ATTEMPTS_PER_MIN)),
        signin_checks=signin_checks,
        bind_brain=bind_brain,
    )
    if manager is not None and hasattr(manager, "on_credential_refused"):
        # A store token the store refuses ends its sign-ins at once (see workcopy/core.py, ManagerCore._watching).
        manager.on_credential_refused = server.end_refused_sign_ins
    handlers = oauth_route_handlers(server, settings, dev=chosen.kind == "dev", limits_state=limits_state)
    return OAuthMount(server=server, provider=chosen, route_handlers=handlers)


# -- request and response helpers -------------------------------------------------


async def _form(request: Request[Any, Any, Any]) -> dict[str, list[str]] | None:
    """The form-encoded body as lists of values (repeats kept), or None when it is not one."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        return None
    try:
        text = (await request.body()).decode("utf-8")
        return parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError):
        return None


def _with_basic_client_id(request: Request[Any, Any, Any], form: dict[str, list[str]]) -> dict[str, list[str]] | None:
    """Public clients may name themselves in HTTP Basic (empty secret) instead of the form.

    The secret is ignored (clients here have none); a Basic client id that
    contradicts the form's makes the request invalid (None).
    """
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        return form
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    client_id = unquote(decoded.partition(":")[0])
    if not client_id:
        return form
    named = form.get("client_id")
    if named and named != [client_id]:
        return None
    return {**form, "client_id": [client_id]}


async def _client_form(request: Request[Any, Any, Any]) -> dict[str, list[str]] | None:
    """The form of a /token or /revoke request with a Basic client id merged in; None when invalid."""
    form = await _form(request)
    return None if form is None else _with_basic_client_id(request, form)


def _query(request: Request[Any, Any, Any]) -> dict[str, list[str]]:
    raw = request.scope.get("query_string", b"").decode("latin-1")
    try:
        return parse_qs(raw, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        return {"__too_many__": ["", ""]}


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(content=body, status_code=status, headers=headers or {}, media_type=MediaType.JSON)


def _to_response(reply: Reply, *, after_post: bool = False, dev: bool = False, cors: bool = False) -> Response[Any]:
    if isinstance(reply, JsonReply):
        headers = {"Cache-Control": "no-store", **reply.headers, **(_CORS if cors else {})}
        return _json(reply.status, reply.body, headers)
    if isinstance(reply, RedirectReply):
        # 303 after the sign-in form so the browser follows with a GET.
        headers = {"Location": reply.location, "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
        if reply.cookie:
            headers["Set-Cookie"] = reply.cookie
        return Response(content=b"", status_code=303 if after_post else 302, headers=headers)
    assert isinstance(reply, PageReply)
    return Response(
        content=render_signin(reply.view, dev=dev),
        status_code=reply.status,
        headers=page_headers(reply.view.redirect_origin),
        media_type="text/html; charset=utf-8",
    )


def _rate_limited(retry: float) -> Response[Any]:
    seconds = str(max(1, int(retry + 0.999)))
    return _json(429, {"error": "rate_limited"}, {"Retry-After": seconds, "Cache-Control": "no-store", **_CORS})


# -- the routes -------------------------------------------------------------------


def oauth_route_handlers(server: AuthorizationServer, settings: Any, *, dev: bool = False,
                         limits_state: DocumentStore | None = None) -> list[Any]:
    """Litestar handlers for every OAuth route of connector.md section 1."""
    public_url = getattr(settings, "public_url", None)
    trust_proxy = tuple(getattr(settings, "trust_proxy", ("loopback",)))
    limits = _RateLimits(trust_proxy, limits_state)

    def base_of(request: Request[Any, Any, Any]) -> str:
        return request_base_url(request.scope, public_url, trust_proxy)

    def limited(group: str, request: Request[Any, Any, Any]) -> Response[Any] | None:
        retry = limits.retry_after(group, request)
        return _rate_limited(retry) if retry is not None else None

    @get(
        ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"],
        cache=False,
        include_in_schema=False,
    )
    async def resource_metadata(request: Request[Any, Any, Any]) -> Response[Any]:
        return _json(200, protected_resource_metadata(base_of(request)), {"Cache-Control": "no-store", **_CORS})

    @get("/.well-known/oauth-protected-resource/mcp/brains/{brain:str}", cache=False, include_in_schema=False)
    async def brain_resource_metadata(request: Request[Any, Any, Any]) -> Response[Any]:
        brain = str(request.path_params["brain"])
        if not valid_brain_segment(brain):
            return _json(404, {"error": "not_found"}, {"Cache-Control": "no-store", **_CORS})
        document = protected_resource_metadata(base_of(request), brain, last_segment_as_sent(request.scope))
        return _json(200, document, {"Cache-Control": "no-store", **_CORS})

    @get(
        ["/.well-known/oauth-authorization-server", "/.well-known/oauth-authorization-server/mcp"],
        cache=False,
        include_in_schema=False,
    )
    async def server_metadata(request: Request[Any, Any, Any]) -> Response[Any]:
        return _json(200, authorization_server_metadata(base_of(request)), {"Cache-Control": "no-store", **_CORS})

    @post("/register", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    async def register(request: Request[Any, Any, Any]) -> Response[Any]:
        if (blocked := limited("register", request)) is not None:
            return blocked
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError, RecursionError):
            return _json(400, {"error": "invalid_client_metadata", "error_description": "body must be JSON"}, _CORS)
        # The registration is written to disk (fsync): in a thread, never on the event loop.
        return _to_response(await anyio.to_thread.run_sync(server.register, body), cors=True)

    @get("/authorize", cache=False, include_in_schema=False)
    async def authorize(request: Request[Any, Any, Any]) -> Response[Any]:
        if (blocked := limited("authorize", request)) is not None:
            return blocked
        reply = await server.authorize(_query(request), base_of(request))
        if isinstance(reply, JsonReply) and reply.status >= 400 and "text/html" in request.headers.get("accept", ""):
            reply = server.refusal_page(reply)  # a browser shows a page, not raw JSON
        return _to_response(reply, dev=dev)

    @post("/authorize/complete", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    async def authorize_complete(request: Request[Any, Any, Any]) -> Response[Any]:
        if (blocked := limited("authorize", request)) is not None:
            return blocked
        form = await _form(request)
        if form is None:
            return _json(400, {"error": "invalid_request", "error_description": "expected a form"})
        return _to_response(await server.complete(form, limits.address(request)), after_post=True, dev=dev)

    @get("/oidc/callback", cache=False, include_in_schema=False)
    async def oidc_callback(request: Request[Any, Any, Any]) -> Response[Any]:
        if (blocked := limited("authorize", request)) is not None:
            return blocked
        return _to_response(await server.oidc_callback(_query(request), request.cookies), dev=dev)

    @post("/token", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    async def token(request: Request[Any, Any, Any]) -> Response[Any]:
        if (blocked := limited("token", request)) is not None:
            return blocked
        form = await _client_form(request)
        if form is None:
            return _json(
                400,
                {"error": "invalid_request", "error_description": "send application/x-www-form-urlencoded with one client_id"},
                {"Cache-Control": "no-store", **_CORS},
            )
        return _to_response(await server.token(form), cors=True)

    @post("/revoke", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    async def revoke(request: Request[Any, Any, Any]) -> Response[Any]:
        if (blocked := limited("token", request)) is not None:
            return blocked
        form = await _client_form(request)
        if form is None:
            return _json(400, {"error": "invalid_request", "error_description": "expected a form"}, _CORS)
        return _to_response(await server.revoke(form), cors=True)

    return [resource_metadata, brain_resource_metadata, server_metadata, register, authorize, authorize_complete, oidc_callback, token, revoke]
