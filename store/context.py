"""Everything a request handler needs, built once per process from the settings."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from common.docstore import DirectoryStore, DocumentStore
from store.audit import CALLER_KEY, CALLER_USER
from store.auth.authenticate import Authenticator, Principal, too_many
from store.auth.users import UserRegistry
from store.errors import ServiceError
from store.service import BrainService
from store.sharing.access import Sharing
from store.settings import StoreSettings
from store.storage.base import StorageBackend

log = logging.getLogger("store")

T = TypeVar("T")

OPENAPI_PATH = Path(__file__).resolve().parent.parent / "contract" / "openapi.yaml"


def _client_address_fn(settings: StoreSettings) -> Any:
    """``(peer, x_forwarded_for) -> address``: S2's resolver when trusted proxies are set."""
    if not settings.trust_proxy:
        return lambda peer, xff: peer
    from common.limits import TrustedProxies, client_address

    trusted = TrustedProxies.parse(settings.trust_proxy)
    return lambda peer, xff: client_address(peer, xff, trusted)


def rate_limit_file(settings: StoreSettings, kind: str) -> Path:
    """Where the token buckets of one kind of limit live (shared by the worker processes)."""
    return settings.data_dir / "locks" / f"rate-{kind}.bin"


def document_store(settings: StoreSettings) -> DocumentStore:
    """Where the users and sharing documents live: the data directory, or the bucket under the
    store's prefix (``users.json``, ``sharing.json`` and their ``.last-good`` copies)."""
    if settings.backend == "s3":
        from common.docstore.s3 import S3Store
        from store.storage.factory import s3_bucket, s3_client

        bucket = s3_bucket(settings)
        return S3Store(s3_client(settings), bucket.name, bucket.prefix)
    return DirectoryStore(settings.data_dir, fsync=settings.fsync)


def no_store_there(settings: StoreSettings) -> str | None:
    """Why ``settings`` names no store: its data directory or bucket prefix holds no users
    document (a mistyped path or prefix), else None. Backing up or migrating such a place
    would copy nothing and report success."""
    if settings.backend == "s3":
        docs = document_store(settings)
        if docs.get("users.json") is None:
            return f"{docs.where}: no users.json there; is it the store's bucket and prefix?"
        return None
    if not (settings.data_dir / "users.json").exists():
        return f"{settings.data_dir}: no users.json there; is it a store data directory?"
    return None


def open_registry(settings: StoreSettings, *, serving: bool = False) -> UserRegistry:
    """The users registry; a serving S3 replica also starts polling for changes."""
    s3 = settings.backend == "s3"
    registry = UserRegistry(document_store(settings), poll_seconds=settings.s3_users_poll_seconds if s3 else None)
    if serving:
        registry.start_polling()
    return registry


def open_sharing(
    settings: StoreSettings, registry: UserRegistry, backend: StorageBackend, *, serving: bool = False
) -> Sharing:
    """Members, roles and agent keys: a document in the data directory, or in the bucket
    (polled by a serving replica); the per-brain audit log likewise."""
    from store.sharing.audit import AuditLog, BrainAudit, S3BrainAudit
    from store.sharing.registry import SharingRegistry

    s3 = settings.backend == "s3"
    shared = SharingRegistry(document_store(settings), poll_seconds=settings.s3_sharing_poll_ms / 1000 if s3 else None)
    if serving:
        shared.start_polling()
    audit: AuditLog = S3BrainAudit(backend) if s3 else BrainAudit(settings.data_dir)  # type: ignore[arg-type]
    return Sharing(shared, registry, backend, audit)


# Limits counted in the bucket (STORE_BACKEND=s3), across every replica: those of rare events,
# where one conditional read-modify-write per event is affordable (docs/sign-in-limits.md).
SHARED_LIMITS = frozenset({"failed-logins"})
LIMITS_PREFIX = "limits"  # under STORE_S3_PREFIX, beside the store's own objects


def _limiter(settings: StoreSettings, kind: str, rate_per_min: int) -> Any:
    if settings.backend == "s3" and kind in SHARED_LIMITS:
        # In the bucket: N replicas grant one budget between them, not N.
        from common.docstore.s3 import S3Store
        from common.limits import StoredTokenBucketLimiter
        from store.storage.factory import s3_client

        prefix = "/".join(part for part in (settings.s3_prefix.strip("/"), LIMITS_PREFIX) if part)
        return StoredTokenBucketLimiter(S3Store(s3_client(settings), settings.s3_bucket, prefix), kind,
                                        rate_per_min, rate_per_min)
    # Buckets in a small shared file: with --workers N the budget stays per host, not N times it.
    from common.limits import SharedTokenBucketLimiter

    path = rate_limit_file(settings, kind)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return SharedTokenBucketLimiter(path, rate_per_min, rate_per_min)


@dataclass
class AppContext:
    """Per-process state: settings, storage, users, service, auth and limits."""

    settings: StoreSettings
    backend: StorageBackend
    registry: UserRegistry
    service: BrainService
    authenticator: Authenticator
    client_address: Any
    upload_limiter: Any = None
    oidc: Any = None
    openapi: bytes | None = None
    sharing: Sharing = None  # type: ignore[assignment]  # set by build()
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, settings: StoreSettings) -> AppContext:
        """Wire every component for ``settings`` (raises on unusable settings)."""
        from store.storage.factory import open_backend

        backend = open_backend(settings, serving=True)  # local disk or S3 (STORE_BACKEND)
        registry = open_registry(settings, serving=True)
        service = BrainService(settings, backend)
        oidc = None
        if settings.oidc:
            from common.oidc import OidcConfig, OidcVerifier

            config = OidcConfig.from_settings(settings)
            oidc = OidcVerifier(config) if config is not None else None
        failed = requests = uploads = None
        if settings.rate_limits:
            failed = _limiter(settings, "failed-logins", settings.rate_failed_logins_per_min)
            requests = _limiter(settings, "requests", settings.rate_requests_per_min)
            uploads = _limiter(settings, "uploads", settings.rate_uploads_per_min)
        sharing = open_sharing(settings, registry, backend, serving=True)
        authenticator = Authenticator(
            registry, oidc=oidc, on_new_user=service.ensure_default, failed_logins=failed, requests=requests,
            agent_keys=sharing.key_principal,
        )
        openapi = OPENAPI_PATH.read_bytes() if OPENAPI_PATH.is_file() else None
        return cls(
            settings=settings,
            backend=backend,
            registry=registry,
            service=service,
            authenticator=authenticator,
            client_address=_client_address_fn(settings),
            upload_limiter=uploads,
            oidc=oidc,
            openapi=openapi,
            sharing=sharing,
        )

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(*args)``, which touches storage: inline when the backend answers from local
        disk, in a worker thread when its calls block (S3), so a slow one never stalls the loop."""
        if self.backend.blocking:
            return await anyio.to_thread.run_sync(fn, *args)
        return fn(*args)

    async def ready(self) -> str | None:
        """None when storage can serve now, else a short reason (``/health/ready``): also once a
        download met sealed archives the configured keys cannot open."""
        return self.service.key_problem or await self.run(self.backend.ready)

    def damaged(self) -> list[str]:
        """The state files (users, sharing) that do not parse and are served from their last good
        copy, each with the reason; empty when all is well (``/health/ready``)."""
        found = [self.sharing.users.damaged()]
        if self.sharing.registry is not None:
            found.append(self.sharing.registry.damaged())
        return [reason for reason in found if reason]

    def address(self, scope: Any) -> str:
        """The client address of a request (X-Forwarded-For only through trusted proxies)."""
        client = scope.get("client")
        peer = client[0] if client else "unknown"
        if not self.settings.trust_proxy:
            return peer
        xff = None
        for name, value in scope["headers"]:
            if name == b"x-forwarded-for":
                xff = value.decode("latin-1") if xff is None else f"{xff},{value.decode('latin-1')}"
        return str(self.client_address(peer, xff))

    async def authenticate(self, scope: Any) -> Principal:
        """The caller of a request; raises ServiceError 401/429."""
        return self.authenticate_now(scope) or await self.authenticate_waiting(scope)

    def authenticate_now(self, scope: Any) -> Principal | None:
        """The caller when it is known without waiting (a static token: the hot path), else None
        (then ``authenticate_waiting`` decides); raises ServiceError 401/429. Hot routes call
        ``authenticate_now(scope) or await authenticate_waiting(scope)``: no coroutine per request."""
        principal = self.authenticator.authenticate_now(_authorization(scope), self.address(scope))
        if principal is not None:
            _remember(scope, principal)
        return principal

    async def authenticate_waiting(self, scope: Any) -> Principal:
        """The caller, for a request ``authenticate_now`` left undecided; raises ServiceError 401/429."""
        principal = await self.authenticator.authenticate_waiting(_authorization(scope), self.address(scope))
        _remember(scope, principal)
        return principal

    def check_upload_rate(self, principal: Principal) -> None:
        """Refuse (429) when the user's upload budget is spent."""
        if self.upload_limiter is not None:
            wait = self.upload_limiter.hit(principal.user_id)
            if wait is not None:
                raise too_many(wait, "too many uploads")

    def capabilities(self) -> list[str]:
        """What /health advertises."""
        caps = ["static-token", "conditional-sync"]
        if self.oidc is not None:
            caps.append("oidc")
        if self.sharing is not None and self.sharing.registry is not None:
            caps.append("sharing")
        return caps


def _remember(scope: Any, principal: Principal) -> None:
    """Note the caller in the request's state for its log line and audit entry: the user id, and
    with an agent key the prefix it is listed by (never the key)."""
    state = scope.setdefault("state", {})
    state[CALLER_USER] = principal.user_id
    if principal.key is not None:
        state[CALLER_KEY] = principal.key.prefix


def _authorization(scope: Any) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")  # type: ignore[no-any-return]
    return None


def require(condition: bool, status: int, message: str) -> None:
    """Raise ServiceError(status, message) unless ``condition``."""
    if not condition:
        raise ServiceError(status, message)
