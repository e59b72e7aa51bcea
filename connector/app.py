"""The connector's web application: MCP at ``POST /mcp`` (and at ``/mcp/brains/{brain}``,
bound to one brain), OAuth routes, health.

``create_app(settings)`` wires everything from one settings object: the store
client, the working-copy manager, the brain tools behind the official MCP SDK,
the bearer check of every ``/mcp`` request (audience ``<base>/mcp``, or that brain's URL), the OAuth
authorization server routes, rate limits, security headers and JSON logs
(never tokens, never memory content).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from litestar import Litestar, Request, Response, get
from litestar.config.cors import CORSConfig
from litestar.exceptions import HTTPException, MethodNotAllowedException, NotFoundException
from litestar.handlers import asgi
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from connector.engine.format.archive import ArchiveLimits
from connector.i18n import LocaleMiddleware
from connector.identity.agentkey import AgentKeyBearer, looks_like_agent_key
from connector.mcp.http import bearer_token, header, is_mcp_path, last_segment_as_sent, peer_address, request_base_url
from connector.mcp.pullreview import PullReview
from connector.mcp.server import CALLER_SCOPE_KEY, McpEndpoint
from connector.mcp.tools import BrainTools, Caller
from connector.metrics import observability_layer
from connector.oauth.metadata import challenge
from connector.oauth.server import valid_brain_segment
from connector.oauth.signin_limit import SignInChecks, signin_limiter
from connector.oauth.state import OAuthState
from connector.oauth.tokens import AccessClaims, AccessTokenCodec
from connector.public_path import served_under
from connector.settings import ConnectorSettings, SettingsError
from connector.state import open_state
from connector.state.sealing import load_state_key
from connector.thinking.source import ModelError, ModelSource
from connector.webapp.landing import app_not_found, assistants_page, wants_page, welcome_page
from connector.webapp.pages import page_headers
from connector.workcopy.accounts import AccessLost, AmbiguousBrain
from connector.workcopy.core import ManagerTuning
from connector.workcopy.heads import S3_HEAD_MAX_AGE_S, BrainHeads
from connector.workcopy.indexdisk import IndexDisk
from connector.workcopy.journal import HeldWriteJournal
from connector.workcopy.manager import WorkingCopyManager
from connector.workcopy.model import Account
from connector.workcopy.store_client import StoreClient, StoreError, StoreUnauthorized
from connector.workcopy.backfill import E5Backfill
from connector.workcopy.vectors import VectorStore, e5_store, judge_store
from common.docstore import DocumentStore, DocumentStoreError
from common.host_guard import AllowedHosts, host_guard
from common.limits import (
    SyncedTokenBucketLimiter,
    TokenBucketLimiter,
    TrustedProxies,
    client_address,
    limit_key,
    request_limiter,
)
from common.logs import apply_log_level

log = logging.getLogger("connector.http")

SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
MCP_RATE_WINDOW_S = 60.0
HOST_REFUSAL = ("421 Misdirected Request: this connector answers only for its own host names "
                "(CONNECTOR_PUBLIC_URL, CONNECTOR_ALLOWED_HOSTS, localhost).")


# ----- logging ----------------------------------------------------------------


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, process id and safe extras."""

    _SKIP = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,  # which worker process (serve --workers N) wrote it
        }
        for key, value in record.__dict__.items():
            if key not in self._SKIP and not key.startswith("_"):
                entry[key] = value if isinstance(value, (str, int, float, bool, type(None))) else str(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str = "info") -> None:
    """Send every log line to stderr as JSON (idempotent)."""
    root = logging.getLogger()
    # Replace whatever handlers an imported library installed: one JSON stream only.
    for existing in list(root.handlers):
        root.removeHandler(existing)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter())
    root.addHandler(handler)
    # The SDK logs request details at INFO; httpx too (let through at debug: common/logs.py).
    apply_log_level(level, quiet=("mcp", "uvicorn.access"))


def state_unreachable(request: Any, exc: DocumentStoreError) -> Response[dict[str, str]]:
    """The shared state (its bucket or directory) could not be read or changed: 503, said as such,
    with nothing written (never a bare 500)."""
    log.error("shared state unavailable: %s", exc, extra={"path": request.scope.get("path")})
    return Response({"error": "temporarily_unavailable",
                     "error_description": "the connector cannot reach its shared state; try again shortly"},
                    status_code=503, headers={"Retry-After": "5", "Cache-Control": "no-store"})


async def log_server_error(exc: Exception, scope: Scope) -> None:
    """Every error the connector answers with a 5xx is logged with its traceback and cause.

    Litestar's own exception logging is off (``logging_config=None``: our JSON lines
    only), so without this hook an unexpected exception became a bare 500 with
    nothing in the log. Refusals (4xx) are answers, not errors: not logged here.
    """
    status = getattr(exc, "status_code", 500) if isinstance(exc, HTTPException) else 500
    if status >= 500:
        log.error("request failed: %s: %s", type(exc).__name__, exc, exc_info=exc,
                  extra={"method": scope.get("method"), "path": scope.get("path"), "status": status})


# ----- rate limits ------------------------------------------------------------


# /mcp requests per address: where they are counted in the shared state, and how often (seconds).
MCP_LIMITS_PREFIX = "limits/mcp-requests"
MCP_LIMITS_SYNC_S = 1.0


class _Limits:
    """Per-address limits for /mcp, on the store's limiter and client-address rules (store/limits)."""

    def __init__(self, settings: ConnectorSettings, state: DocumentStore | None = None) -> None:
        self._trusted = TrustedProxies.parse(settings.trust_proxy)
        rate = settings.mcp_rate_per_min
        # Decided here at once; counted across the replicas sharing the state every second.
        self._limiter: TokenBucketLimiter | SyncedTokenBucketLimiter | None = (
            request_limiter(rate, state, MCP_LIMITS_PREFIX, interval_s=MCP_LIMITS_SYNC_S) if rate else None
        )

    def client_address(self, scope: Scope) -> str:
        """The client's address: the right-most untrusted X-Forwarded-For hop behind a trusted proxy."""
        return client_address(peer_address(scope), header(scope, "x-forwarded-for"), self._trusted)

    def retry_after(self, scope: Scope) -> float | None:
        """None when allowed, else seconds to wait."""
        if self._limiter is None:
            return None
        return self._limiter.hit(limit_key(self.client_address(scope)))


# ----- responses --------------------------------------------------------------


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body).encode("utf-8")
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode("ascii")),
        (b"cache-control", b"no-store"),
        *(headers or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


async def _send_page(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    raw_headers = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode("ascii")),
                   *((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in page_headers().items()),
                   *headers]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


# ----- the /mcp endpoint --------------------------------------------------------


Verifier = Callable[[str, str, str | None], AccessClaims | None]


@dataclass
class McpGate:
    """Rate limit, bearer check and method check in front of the MCP endpoint; for ``bound`` (the
    URL of one brain, ``/mcp/brains/{brain}``) also whether the signed-in account can use that brain."""

    settings: ConnectorSettings
    endpoint: McpEndpoint
    verify: Verifier
    limits: _Limits
    manager: WorkingCopyManager | None = None
    bound: bool = False
    agent_keys: AgentKeyBearer | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        retry = self.limits.retry_after(scope)
        if retry is not None:
            await _send_json(send, 429, {"error": "rate_limited"}, [(b"retry-after", str(max(1, int(retry + 0.999))).encode())])
            return
        brain = str(scope.get("path_params", {}).get("brain", "")) if self.bound else None
        if brain is not None and not valid_brain_segment(brain):
            await _send_json(send, 404, {"error": "not_found", "error_description": "No such brain URL."})
            return
        base = request_base_url(scope, self.settings.public_url, self.settings.trust_proxy)
        # The brain's name as this URL writes it: a challenge names the metadata of the client's own URL.
        written = last_segment_as_sent(scope) if brain is not None else None
        if wants_page(scope):
            # A person opened the URL in a browser: a page saying it is for assistants (200: the
            # page is what they asked for), still carrying the challenge a client would get.
            # MCP clients never ask for text/html, so they keep getting the JSON 401.
            await _send_page(send, 200, assistants_page(scope, self.settings, brain),
                             [(b"www-authenticate", challenge(base, brain=brain, written=written).encode("latin-1"))])
            return
        token = bearer_token(scope)
        claims = self.verify(token, base, brain) if token else None
        if claims is None and token and self.agent_keys is not None and looks_like_agent_key(token):
            # A script's agent key: checked at the store on this very request (a revoked key is out at once).
            try:
                claims = await self.agent_keys.claims(token, base, self.limits.client_address(scope))
            except StoreError:
                await _send_json(send, 503, {"error": "temporarily_unavailable",
                                             "error_description": "The brain store cannot be reached; try again shortly."},
                                 [(b"retry-after", b"5")])
                return
        if claims is None:
            # Any method, GET included: a client probing the URL learns where to sign in.
            error = "invalid_token" if token else None
            header_value = challenge(base, brain=brain, error=error, written=written).encode("latin-1")
            await _send_json(send, 401, {"error": error or "unauthorized"}, [(b"www-authenticate", header_value)])
            return
        if scope["method"] != "POST":
            # Stateless Streamable HTTP: no server-sent event stream to open (GET), no session to end (DELETE).
            await _send_json(send, 405, {"error": "method_not_allowed"}, [(b"allow", b"POST")])
            return
        account = Account(
            subject=claims.sub,
            credential=claims.store_credential,
            kind=claims.idp or "static",
            client_name=claims.client_name or claims.client_id,
            session=claims.family,
            # A token of this brain's URL keeps the id its name had when it was issued.
            brain=(claims.brain_id or brain) if brain is not None else "",
            writes="brain.write" in claims.scope,
        )
        if brain is not None and not await self._can_use(account, base, send, brain, written):
            return
        scope[CALLER_SCOPE_KEY] = Caller(account=account, scopes=frozenset(claims.scope), base_url=base)  # type: ignore[literal-required]
        await self.endpoint(scope, receive, send)

    async def _can_use(self, account: Account, base: str, send: Send, url_brain: str, written: str | None) -> bool:
        """Whether the bound brain is one the account can use; else the answer is sent: 404 (the
        same whether the brain does not exist or the account may not see it, so the URL tells
        nothing about other people's brains), 409 with the choices when the name is several
        shared brains', 401 when the store refused the credential, 503 when the store cannot say."""
        assert self.manager is not None
        try:
            found = await self.manager.bound_brain(account)
        except StoreUnauthorized:
            # The store refused the credential (the manager ended its sign-ins): sign in again.
            # The URL's own resource (account.brain may be the id a token of that URL keeps).
            header_value = challenge(base, brain=url_brain, error="invalid_token", written=written).encode("latin-1")
            await _send_json(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", header_value)])
            return False
        except AmbiguousBrain as exc:
            await _send_json(send, 409, {"error": "ambiguous_brain", "error_description": str(exc)})
            return False
        except AccessLost as exc:
            # A shared brain this account was just removed from: 404 as for any brain it cannot
            # see, saying why (the member knew the brain; nothing new is given away).
            await _send_json(send, 404, {"error": "not_found", "error_description": str(exc)})
            return False
        except StoreError:
            await _send_json(send, 503, {"error": "temporarily_unavailable",
                                         "error_description": "The brain store cannot be reached; try again shortly."},
                             [(b"retry-after", b"5")])
            return False
        if found is None:
            await _send_json(send, 404, {"error": "not_found", "error_description": (
                "This account has no brain by that name or id (brain_status at /mcp lists its brains).")})
            return False
        return True


# ----- middleware -----------------------------------------------------------------


def security_and_logging(app: ASGIApp) -> ASGIApp:
    """Adds security headers to every response and logs one JSON line per request."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        status_box = {"status": 500}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_box["status"] = message["status"]
                present = {key.lower() for key, _ in message.get("headers", [])}
                extra = [(key, value) for key, value in SECURITY_HEADERS if key not in present]
                if is_mcp_path(scope.get("path", "")) and b"cache-control" not in present:
                    extra.append((b"cache-control", b"no-store"))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        try:
            await app(scope, receive, send_with_headers)
        finally:
            # Path only (never the query, which may carry codes or state), no headers, no bodies.
            log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status_box["status"],
                    "ms": round((time.perf_counter() - started) * 1000, 2),
                },
            )

    return middleware


# ----- the application ------------------------------------------------------------


@dataclass
class ConnectorParts:
    """Everything ``create_app`` builds, exposed for tests and the CLI."""

    settings: ConnectorSettings
    store: StoreClient
    state: OAuthState
    codec: AccessTokenCodec
    manager: WorkingCopyManager
    tools: BrainTools
    endpoint: McpEndpoint
    # /mcp/brains/{brain}: the same tools, for connections bound to one brain (no brain_use).
    brain_endpoint: McpEndpoint
    # Sign-in attempts per client address, one budget for the OAuth page and the web app (and every worker).
    signin_checks: SignInChecks | None = None
    # Where limits shared by replicas are counted (None: no shared state).
    limits_state: DocumentStore | None = None


class _StateChoices:
    """Brain choices persisted in the OAuth state (so they survive restarts)."""

    def __init__(self, state: OAuthState) -> None:
        self._state = state

    async def get_chosen_brain(self, subject: str) -> str | None:
        return self._state.get_brain(subject)

    async def set_chosen_brain(self, subject: str, brain_id: str) -> None:
        # Off the loop: with the state in a bucket the change is a read and a conditional write.
        await asyncio.to_thread(self._state.set_brain, subject, brain_id)


def operator_model(settings: ConnectorSettings) -> ModelSource | None:
    """The operator's model when CONNECTOR_MODEL_URL is set (a refused endpoint stops the start-up), else none."""
    if settings.model_url is None or settings.model is None:
        return None
    # Imported only when used: the openai library takes a while to load.
    from connector.thinking.operator import OperatorConfig, OperatorModel

    config = OperatorConfig(
        url=settings.model_url,
        model=settings.model,
        api_key=settings.model_api_key,
        local_only=settings.model_local_only,
        timeout_s=float(settings.model_timeout_s),
        max_tokens=settings.model_max_tokens,
        max_calls=settings.model_max_calls,
        max_calls_per_user=settings.model_max_calls_per_user,
    )
    try:
        return OperatorModel(config)
    except ModelError as exc:
        raise SettingsError(str(exc)) from None


def build_parts(settings: ConnectorSettings, *, tuning: ManagerTuning | None = None) -> ConnectorParts:
    """Construct the connector's components from settings (no I/O beyond the state directory)."""
    # With the state in a bucket the key is configured (settings refuse anything else).
    state_key, _source = load_state_key(None if settings.state_url else settings.state_dir, settings.state_key)
    shared = open_state(settings)  # the state (directory or S3), None for memory only
    state = OAuthState(settings.state_dir, state_key, docs=shared if settings.state_url else None)
    local = settings.state_url is None
    # Brain heads and limit counters: a crash may lose a write of theirs at no cost (no fsync).
    volatile = open_state(settings, fsync=False) if local else shared
    codec = AccessTokenCodec(state_key)
    # An archive larger than what a brain may unpack to is not even downloaded whole.
    store = StoreClient(settings.store_url, timeout_s=settings.store_timeout_s, max_archive_bytes=settings.max_brain_bytes)
    manager = WorkingCopyManager(
        store,
        choices=_StateChoices(state),
        tuning=tuning
        or ManagerTuning(
            repull_ttl_s=settings.repull_ttl_s,
            idle_purge_s=settings.idle_purge_s,
            brains_ttl_s=min(30.0, settings.repull_ttl_s) if settings.repull_ttl_s > 0 else 30.0,
            maintenance_every_s=max(0.2, min(5.0, settings.idle_purge_s / 4 if settings.idle_purge_s else 5.0)),
            max_copies=settings.max_working_copies,
            max_copy_bytes=settings.max_working_copy_bytes,
            archive_limits=ArchiveLimits(max_inflated=settings.max_brain_bytes),
            max_loads=settings.max_concurrent_loads,
        ),
        # Held writes survive a restart only with a state (directory or S3) to keep them in.
        journal=HeldWriteJournal(shared, state_key) if shared is not None else None,
        # Shared with the other workers and replicas: a push through one is seen by a read through
        # any other at once (directory), or within a second (S3: heads are cached that long).
        heads=BrainHeads(volatile, max_age_s=0.0 if local else S3_HEAD_MAX_AGE_S, inline=local)
        if volatile is not None else None,
    )
    # Hybrid recall's vectors: sealed under the state key in the state, when there is one.
    vectors = VectorStore(state=shared, state_key=state_key)
    # The second model's (e5) beside them, computed in the background; its engine loads on first use.
    # The judge's (a third model: a channel for English queries) are computed after e5's, kept beside them.
    judged = settings.recall_e5 and settings.recall_judge
    e5 = E5Backfill(lambda: e5_store(shared, state_key, fast_queries=True),
                    judge=judge_store(shared, state_key) if judged else None) if settings.recall_e5 else None
    # Until a brain's judge vectors are all there, the answer gate asks the judge about the handful
    # of memories a doubtful query needs (its model prepared in the background at the first such
    # query); those its channel's store lacks are kept in memory only.
    judge = judge_store() if judged else None
    # Hybrid indexes kept on this replica's disk (by brain and content), so a restart does not rebuild them.
    index_cache = settings.index_cache_path
    index_disk = (
        IndexDisk(index_cache, state_key, max_bytes=settings.index_cache_mb * 1024 * 1024) if index_cache else None
    )
    tools = BrainTools(
        manager, allowed=settings.tools, recall_mode=settings.recall_mode, vectors=vectors, model=operator_model(settings),
        index_disk=index_disk, e5=e5, judge=judge,
    )
    # Memories other devices wrote are checked for duplicates after the pull that brings them.
    PullReview(manager, tools)
    return ConnectorParts(
        settings, store, state, codec, manager, tools, McpEndpoint(tools), McpEndpoint(tools, bound=True),
        signin_limiter(settings.limits_dir, settings.signin_attempts_per_min, volatile), volatile,
    )


def _oauth_mount(parts: ConnectorParts) -> Any:
    """The OAuth authorization server (connector/oauth): its routes and the /mcp token check."""
    from connector.oauth.routes import build_oauth

    return build_oauth(parts.settings, state=parts.state, codec=parts.codec, store=parts.store, manager=parts.manager,
                       signin_checks=parts.signin_checks, limits_state=parts.limits_state)


def _end_web_sessions_too(manager: WorkingCopyManager, sessions: Any) -> None:
    """A store token the store refuses ends the web sessions using it as well as its OAuth sign-ins."""
    ends_sign_ins = manager.on_credential_refused

    def credential_refused(subject: str, credential: str, session: str) -> None:
        sessions.end_credential(credential)
        if ends_sign_ins is not None:
            ends_sign_ins(subject, credential, session)

    manager.on_credential_refused = credential_refused


def create_app(settings: ConnectorSettings, *, tuning: ManagerTuning | None = None) -> Litestar:
    """The connector's Litestar application."""
    parts = build_parts(settings, tuning=tuning)
    oauth = _oauth_mount(parts)
    limits = _Limits(settings, parts.limits_state)
    agent_keys = AgentKeyBearer(parts.store)
    gate = McpGate(settings, parts.endpoint, oauth.verify_access, limits, agent_keys=agent_keys)
    brain_gate = McpGate(settings, parts.brain_endpoint, oauth.verify_access, limits, parts.manager, bound=True,
                         agent_keys=agent_keys)

    @asgi("/mcp", copy_scope=False)
    async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        await gate(scope, receive, send)

    # A mount, not a path parameter: Litestar (2.x) cannot route an ASGI handler with path parameters
    # (KeyError on the method). The mount leaves the rest of the path, e.g. "/team/", in scope["path"].
    @asgi("/mcp/brains", is_mount=True, copy_scope=False)
    async def mcp_brain_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        brain = scope["path"].strip("/")
        scope["path_params"] = {"brain": brain}
        scope["path"] = f"/mcp/brains/{brain}"  # as asked, for the logs and the response headers
        await brain_gate(scope, receive, send)

    @get("/", cache=False, include_in_schema=False)
    async def welcome(request: Request[Any, Any, Any]) -> Response[str]:
        return welcome_page(request.scope, settings)

    def page_not_found(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
        """Under /app a person gets the app's not-found page; elsewhere programs get JSON as before."""
        path = str(request.scope.get("path", ""))
        if web is not None and request.method in ("GET", "HEAD") and path.startswith("/app/"):
            return app_not_found(request, settings, web.sessions.get(request.cookies.get(web.site(request).session_cookie)))
        return Response({"status_code": exc.status_code, "detail": exc.detail}, status_code=exc.status_code,
                        headers=exc.headers)

    @get("/health", cache=False)
    async def health() -> dict[str, str]:
        return {"status": "ok", "service": "brain-connector"}

    @get("/health/live", cache=False)
    async def health_live() -> dict[str, str]:
        return {"status": "ok"}

    @get("/health/ready", cache=False)
    async def health_ready() -> Response[dict[str, Any]]:
        # A damaged state file is served from its last good records: ready, but said (by name).
        damaged = parts.state.damaged()
        extra: dict[str, Any] = {"damaged_state_files": sorted(damaged)} if damaged else {}
        if await parts.store.health():
            return Response({"status": "degraded" if damaged else "ok", "store": "reachable", **extra})
        return Response({"status": "unavailable", "store": "unreachable", **extra}, status_code=503)

    @asynccontextmanager
    async def lifespan(_app: Litestar) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(parts.endpoint.running())
            await stack.enter_async_context(parts.brain_endpoint.running())
            await parts.manager.recover()
            parts.manager.start()
            try:
                yield
            finally:
                held = await parts.manager.flush()
                if held:
                    log.warning("shutting down with writes still held", extra={"copies": held})
                await parts.manager.close(push_timeout_s=5.0)
                if parts.tools.index_disk is not None:
                    await asyncio.to_thread(parts.tools.index_disk.flush)  # hybrid indexes waiting to be saved
                await parts.store.aclose()
                await oauth.aclose()

    # The web app at /app (connector/webapp): same provider, working copies and write path as /mcp.
    web, web_handlers = None, []
    if settings.webapp:
        from connector.webapp.routes import build_webapp

        web, web_handlers = build_webapp(settings, manager=parts.manager, tools=parts.tools, provider=oauth.provider,
                                       state=parts.state, signin_checks=parts.signin_checks)

    if web is not None:
        _end_web_sessions_too(parts.manager, web.sessions)

    app = Litestar(
        route_handlers=[mcp_endpoint, mcp_brain_endpoint, welcome, health, health_live, health_ready, *oauth.route_handlers, *web_handlers],
        lifespan=[lifespan],
        middleware=[security_and_logging],
        after_exception=[log_server_error],
        exception_handlers={DocumentStoreError: state_unreachable, NotFoundException: page_not_found,
                            MethodNotAllowedException: page_not_found},
        # Browser-based MCP clients call /mcp and the OAuth endpoints cross-origin with a bearer
        # token (never cookies), so any origin may, without credentials.
        cors_config=CORSConfig(
            allow_origins=["*"],
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "Accept", "Mcp-Protocol-Version", "Mcp-Session-Id", "Last-Event-ID", "Mcp-Method", "Mcp-Name"],
            expose_headers=["WWW-Authenticate", "Mcp-Session-Id", "Mcp-Protocol-Version", "Retry-After"],
            allow_credentials=False,
            max_age=600,
        ),
        openapi_config=None,
        # Logging is ours (configure_logging: JSON lines, CONNECTOR_LOG_LEVEL). Litestar's default
        # config would replace the root handler with its own plain-text one at INFO.
        logging_config=None,
        debug=False,
    )
    app.state.connector = parts
    app.state.oauth = oauth
    app.state.webapp = web
    # Each page request's language (connector/i18n/__init__.py): the switch's cookie, else Accept-Language.
    app.asgi_handler = LocaleMiddleware(app.asgi_handler)
    # Under a path of a shared domain (CONNECTOR_PUBLIC_URL=https://host/brain): /brain/mcp is /mcp, and
    # the root well-known documents of /brain are ours. Inside the metrics layer: /brain/metrics is not /metrics.
    app.asgi_handler = served_under(app.asgi_handler, settings.public_path)
    # Outermost: /metrics and request/tool/pull/push series (connector/metrics.py).
    app.asgi_handler = observability_layer(app.asgi_handler, parts)
    if settings.checks_host:
        # Outermost: a page on another name rebound to this address reads nothing, /metrics included.
        allowed = AllowedHosts.of([settings.public_url], settings.allowed_hosts)
        app.asgi_handler = host_guard(app.asgi_handler, allowed, HOST_REFUSAL)
    return app
