"""Who is calling: bearer tokens to a ``Principal``, with the failed-login and request limits.

Order of work per request, cheapest refusal first:
1. a client address blocked for too many failed logins is refused (429) before any
   credential work;
2. static tokens (``bst_...``): SHA-256 and one dict lookup (O(1)), constant-time compare;
3. otherwise, when configured, the OIDC verifier (``common.oidc``); a verified identity
   seen for the first time becomes a user with a ``default`` brain, unless it was removed;
4. a failure counts against the client address (an IPv6 address with its whole /64); success counts against the user's
   request budget (429 + Retry-After when spent).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio.to_thread

from common.limits import limit_key
from store.auth.tokens import is_static_token
from store.auth.users import UserRegistry
from store.errors import ServiceError

log = logging.getLogger("store.auth")

MAX_TOKEN_CHARS = 16 * 1024
_BEARER = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    user_id: str
    email: str
    kind: str  # "static" | "oidc" | "agent-key"
    name: str = ""
    key: Any = None  # the AgentKey (store.sharing.registry) when the caller used an agent key


class Limiter(Protocol):
    """``common.limits`` token bucket: None when allowed, else seconds to wait."""

    def hit(self, key: str, now: float | None = None) -> float | None: ...

    def peek(self, key: str, now: float | None = None) -> float | None: ...


class OidcVerifierLike(Protocol):
    """What the authenticator needs from ``common.oidc.OidcVerifier``."""

    async def verify(self, token: str) -> Any: ...


def unauthorized(message: str = "missing or invalid bearer token") -> ServiceError:
    """A 401 carrying ``WWW-Authenticate: Bearer``."""
    return ServiceError(401, message, headers=dict(_BEARER))


def too_many(retry_after: float, message: str = "too many requests") -> ServiceError:
    """A 429 with ``Retry-After`` in whole seconds (at least 1)."""
    return ServiceError(429, message, headers={"Retry-After": str(max(1, int(retry_after + 0.999)))})


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None when malformed."""
    if not authorization or len(authorization) > MAX_TOKEN_CHARS + 16:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    if not token or " " in token or len(token) > MAX_TOKEN_CHARS:
        return None
    return token


class Authenticator:
    """Turns the ``Authorization`` header into a ``Principal`` or a 401/429 refusal."""

    def __init__(
        self,
        registry: UserRegistry,
        *,
        oidc: OidcVerifierLike | None = None,
        on_new_user: Callable[[str], None] | None = None,
        failed_logins: Limiter | None = None,
        requests: Limiter | None = None,
        agent_keys: Callable[[str], Principal | None] | None = None,
    ) -> None:
        self.registry = registry
        self.oidc = oidc
        self._on_new_user = on_new_user
        self._failed = failed_logins
        # Failed logins counted in the bucket shared by replicas (a conditional write on S3): counted
        # in a worker thread by `authenticate_waiting`, never on the event loop.
        self._failed_blocking = bool(getattr(failed_logins, "blocking", False))
        self._requests = requests
        self._agent_keys = agent_keys  # bsk_... -> Principal (store.sharing.access)
        # user id -> (the registry's User object, its Principal): rebuilt when the user changes
        self._principals: dict[str, tuple[Any, Principal]] = {}

    def _check_blocked(self, address: str) -> None:
        # peek takes no token: a blocked address is refused before any credential work
        if self._failed is None:
            return
        wait = self._failed.peek(limit_key(address))
        if wait is not None:
            raise too_many(wait, "too many failed logins from this address")

    def _fail(self, address: str, message: str = "missing or invalid bearer token") -> ServiceError:
        if self._failed is not None:
            wait = self._failed.hit(limit_key(address))
            if wait is not None:
                return too_many(wait, "too many failed logins from this address")
        return unauthorized(message)

    def _refuse_now(self, address: str) -> None:
        """Refuse a request ``authenticate_now`` found wrong: raise at once, or return None so that
        ``authenticate_waiting`` counts the failure off the event loop (a shared bucket)."""
        if self._failed_blocking:
            return None
        raise self._fail(address)

    def authenticate_now(self, authorization: str | None, address: str) -> Principal | None:
        """The caller when no waiting is needed: a static token known to the in-memory
        registry (the hot path), or a refusal. None: ``authenticate_waiting`` must decide
        (an OIDC token, or a static token another replica may have just created)."""
        self._check_blocked(address)
        token = bearer_token(authorization)
        if token is None:
            return self._refuse_now(address)
        if token.startswith("bsk_") and self._agent_keys is not None:
            # an agent key: a hash lookup in the sharing file, like a static token
            key_principal = self._agent_keys(token)
            if key_principal is None:
                return self._refuse_now(address)
            return self._counted(key_principal)
        if not token.startswith("bst_"):
            if self.oidc is not None:
                return None
            return self._refuse_now(address)
        user = self.registry.by_token(token) if is_static_token(token) else None
        if user is None:
            if self.registry.blocking and is_static_token(token):
                return None
            return self._refuse_now(address)
        cached = self._principals.get(user.id)
        if cached is not None and cached[0] is user:
            principal = cached[1]
        else:
            principal = Principal(user.id, user.email, "static", user.name)
            if len(self._principals) > 100_000:
                self._principals.clear()
            self._principals[user.id] = (user, principal)
        return self._counted(principal)

    async def authenticate_waiting(self, authorization: str | None, address: str) -> Principal:
        """What ``authenticate_now`` left undecided (it returned None for this request):
        verify an ID token, or look for a new static token in the shared users copy."""
        token = bearer_token(authorization) or ""
        principal: Principal | None = None
        if token.startswith("bsk_") or not token:
            pass  # an agent key or no token that `authenticate_now` refused (see `_refuse_now`)
        elif token.startswith("bst_") and is_static_token(token):
            # maybe made on another replica a moment ago: look at the shared copy, off the loop
            user = await anyio.to_thread.run_sync(self.registry.recheck_token, token)
            if user is not None:
                principal = Principal(user.id, user.email, "static", user.name)
        elif self.oidc is not None:
            principal = await self._oidc(token)
        if principal is None:
            if self._failed_blocking:
                raise await anyio.to_thread.run_sync(self._fail, address)
            raise self._fail(address)
        return self._counted(principal)

    async def authenticate(self, authorization: str | None, address: str) -> Principal:
        """The caller, or raise ServiceError 401 (bad credentials) / 429 (limits)."""
        principal = self.authenticate_now(authorization, address)
        if principal is None:
            principal = await self.authenticate_waiting(authorization, address)
        return principal

    def _counted(self, principal: Principal) -> Principal:
        """``principal`` once its request is within the per-user request budget (else 429)."""
        if self._requests is not None:
            wait = self._requests.hit(principal.user_id)
            if wait is not None:
                raise too_many(wait)
        return principal

    async def _oidc(self, token: str) -> Principal | None:
        assert self.oidc is not None
        identity = await self.oidc.verify(token)
        if identity is None:
            return None
        user = self.registry.get(identity.user_id)
        if user is None:
            if self.registry.is_denied(identity.issuer, identity.subject):
                return None
            name = (identity.email or "").split("@")[0] or "oidc-user"
            # file lock + fsync: keep it off the event loop
            user = await anyio.to_thread.run_sync(
                self.registry.add_oidc, identity.user_id, identity.issuer, identity.subject, identity.email, name
            )
            if user is None:
                return None
            log.info("created user %s on first OIDC sign-in", user.id)
            if self._on_new_user is not None:
                await anyio.to_thread.run_sync(self._on_new_user, user.id)
        return Principal(user.id, user.email or identity.email, "oidc", user.name)


AsyncAuth = Callable[[str | None, str], Awaitable[Principal]]
