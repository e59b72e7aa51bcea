"""OpenID Connect ID tokens as bearer credentials (store contract A.7, B.11).

``OidcVerifier`` checks an ID token from one configured issuer: the discovery document
(its ``issuer`` must match), keys from its ``jwks_uri``, RS256/ES256 only with a key of
the fitting type, ``iss``/``aud``/``azp``/``exp``/``iat``/``nbf``/``sub``, and the
operator's allow-lists. Signature and claim checks are pyjwt's; this module decides
which key and which rules.

Caching: the discovery document and the key set are kept for a while and refreshed
when stale; an unknown ``kid`` refreshes the key set at most once per
``refetch_interval``; a failed fetch is remembered for ``failure_ttl`` so a broken
issuer is not asked again on every request (stale keys keep working meanwhile);
verified tokens are remembered until at most their ``exp``.

Allow-list rule: with ``allowed_emails``/``allowed_domains`` set, a token is admitted
when its verified email is listed, or its ``hd`` claim is a listed domain, or its
verified email's domain is listed. ``email_verified`` counts as true when it is the
JSON ``true`` or the string ``"true"`` (some issuers send the string); anything else
is unverified.

The verifier is async (fetches never block the event loop); signature checks are
cheap and run inline.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import jwt

log = logging.getLogger("common.oidc")

ALGORITHMS = ("RS256", "ES256")
MAX_TOKEN_CHARS = 16 * 1024
MAX_SUB_CHARS = 255
MIN_RSA_BITS = 2048
MAX_KEYS = 100

# Issuers anyone can obtain a token from: without an allow-list they would let the
# whole world in, so the store refuses to start with one of these and no allow-list.
PUBLIC_ISSUERS = frozenset(
    {
        "https://accounts.google.com",
        "https://appleid.apple.com",
        "https://gitlab.com",
        "https://token.actions.githubusercontent.com",
        "https://login.microsoftonline.com/common/v2.0",
        "https://login.microsoftonline.com/organizations/v2.0",
        "https://login.microsoftonline.com/consumers/v2.0",
        "https://login.microsoftonline.com/9188040d-6c67-4c5b-b112-36a304b66dad/v2.0",
        "https://login.live.com",
    }
)

_JWT_SHAPE = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")


# -- errors and results ------------------------------------------------------------------


class OidcConfigError(ValueError):
    """The OIDC settings cannot be used; the store must not start."""


class OidcError(Exception):
    """A token was not accepted."""


class OidcRejected(OidcError):
    """The token is invalid, or its holder is not admitted. Retrying will not help."""


class OidcUnavailable(OidcError):
    """The issuer could not be reached or answered nonsense; a later retry may succeed."""


@dataclass(frozen=True)
class OidcIdentity:
    """Who a verified ID token names."""

    user_id: str
    issuer: str
    subject: str
    email: str  # the verified email, else ""
    email_verified: bool
    hosted_domain: str
    expires_at: float
    nonce: str | None = None


# -- pure helpers ----------------------------------------------------------------------------


def looks_like_jwt(token: str) -> bool:
    """True for three base64url parts separated by dots (a compact JWS), within size."""
    return 0 < len(token) <= MAX_TOKEN_CHARS and _JWT_SHAPE.match(token) is not None


def normalise_issuer(url: str) -> str:
    """The issuer URL without trailing slashes, with scheme and host lower-cased."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, parts.fragment))


def user_id_for(issuer: str, subject: str) -> str:
    """A stable store user id for (issuer, sub); a trailing slash on the issuer never changes it."""
    digest = hashlib.sha256(f"{normalise_issuer(issuer)}\n{subject}".encode()).hexdigest()
    return "oidc_" + digest[:24]


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_url(url: str, what: str, allow_loopback_http: bool = True) -> None:
    """Require https, or http on a loopback host; raise OidcConfigError otherwise."""
    parts = urlsplit(url)
    if not parts.hostname or parts.username or parts.password:
        raise OidcConfigError(f"{what}: {url!r} is not an absolute URL")
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and allow_loopback_http and is_loopback_host(parts.hostname):
        return
    raise OidcConfigError(f"{what}: must use https (plain http only on a loopback host), got {url!r}")


def email_is_verified(value: Any) -> bool:
    """``email_verified`` as a boolean: JSON true, or the string "true" some issuers send."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def admitted(claims: Mapping[str, Any], allowed_emails: frozenset[str], allowed_domains: frozenset[str]) -> bool:
    """Apply the allow-lists (everyone is admitted when both are empty)."""
    if not allowed_emails and not allowed_domains:
        return True
    email = claims.get("email")
    if isinstance(email, str) and email and email_is_verified(claims.get("email_verified")):
        email = email.strip().lower()
        if email in allowed_emails:
            return True
        if "@" in email and email.rsplit("@", 1)[1] in allowed_domains:
            return True
    hosted = claims.get("hd")
    return isinstance(hosted, str) and hosted.strip().lower() in allowed_domains


def check_claims(claims: Mapping[str, Any], config: OidcConfig, now: float) -> OidcIdentity:
    """Checks pyjwt does not make (azp, sub shape, allow-lists), and the result identity.

    pyjwt has already verified the signature, ``iss``, ``aud``, ``exp``, ``iat`` and ``nbf``.
    """
    audiences = claims.get("aud")
    if isinstance(audiences, list) and len(audiences) > 1 and claims.get("azp") != config.audience:
        raise OidcRejected("several audiences and azp is not this store")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject or len(subject) > MAX_SUB_CHARS:
        raise OidcRejected("sub missing, empty or too long")
    # pyjwt checked the times against the wall clock; check again against ours, so a
    # cached verdict and an injected test clock follow the same rule.
    expires = claims.get("exp")
    if not isinstance(expires, (int, float)) or isinstance(expires, bool):
        raise OidcRejected("exp missing")
    if expires + config.leeway <= now:
        raise OidcRejected("expired")
    for name in ("iat", "nbf"):
        value = claims.get(name)
        if value is not None and (not isinstance(value, (int, float)) or value > now + config.leeway):
            raise OidcRejected(f"{name} in the future")
    if not admitted(claims, config.allowed_emails, config.allowed_domains):
        raise OidcRejected("not on the allow-list")
    verified = email_is_verified(claims.get("email_verified"))
    email = claims.get("email") if verified and isinstance(claims.get("email"), str) else ""
    hosted = claims.get("hd") if isinstance(claims.get("hd"), str) else ""
    nonce = claims.get("nonce") if isinstance(claims.get("nonce"), str) else None
    return OidcIdentity(
        user_id=user_id_for(config.issuer, subject),
        issuer=config.issuer,
        subject=subject,
        email=str(email).strip().lower(),
        email_verified=verified,
        hosted_domain=str(hosted).lower(),
        expires_at=float(expires),
        nonce=nonce,
    )


# -- configuration -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OidcConfig:
    """What the verifier needs; build it with ``OidcConfig.create`` (validates)."""

    issuer: str  # normalised (no trailing slash)
    audience: str
    allowed_domains: frozenset[str] = frozenset()
    allowed_emails: frozenset[str] = frozenset()
    leeway: float = 60.0  # clock skew allowed on exp/iat/nbf
    fetch_timeout: float = 5.0  # whole fetch, connect to last byte
    max_document_bytes: int = 512 * 1024
    discovery_ttl: float = 3600.0
    jwks_ttl: float = 900.0
    failure_ttl: float = 15.0  # a failed fetch is not retried before this
    refetch_interval: float = 60.0  # unknown kid: at most one key-set fetch per interval
    token_cache_seconds: float = 300.0
    token_cache_entries: int = 10_000

    @classmethod
    def create(
        cls,
        issuer: str,
        audience: str,
        allowed_domains: Iterable[str] = (),
        allowed_emails: Iterable[str] = (),
        *,
        setting_prefix: str = "STORE_OIDC_",
        **tuning: Any,
    ) -> OidcConfig:
        """Validate and normalise; raises OidcConfigError for settings that must be refused.

        ``setting_prefix`` names the settings in error messages (the connector passes
        ``OIDC_``; its audience setting is then ``OIDC_CLIENT_ID``).
        """
        names = {
            "issuer": f"{setting_prefix}ISSUER",
            "audience": f"{setting_prefix}AUDIENCE" if setting_prefix.startswith("STORE") else f"{setting_prefix}CLIENT_ID",
            "domains": f"{setting_prefix}ALLOWED_DOMAINS",
            "emails": f"{setting_prefix}ALLOWED_EMAILS",
        }
        if not issuer or not issuer.strip():
            raise OidcConfigError(f"{names['issuer']} is empty")
        normalised = normalise_issuer(issuer)
        parts = urlsplit(normalised)
        if parts.query or parts.fragment:
            raise OidcConfigError(f"{names['issuer']} must not have a query or fragment")
        check_url(normalised, names["issuer"])
        if not audience or not audience.strip():
            raise OidcConfigError(f"{names['audience']} is required with {names['issuer']}")
        domains = frozenset(d.strip().lower().lstrip("@") for d in allowed_domains if d.strip())
        emails = frozenset(e.strip().lower() for e in allowed_emails if e.strip())
        if normalised in PUBLIC_ISSUERS and not domains and not emails:
            raise OidcConfigError(
                f"{names['issuer']} {normalised} is a public issuer: anyone could sign in. "
                f"Set {names['domains']} or {names['emails']}."
            )
        return cls(normalised, audience.strip(), domains, emails, **tuning)

    @classmethod
    def from_settings(cls, settings: Any) -> OidcConfig | None:
        """The config from a ``StoreSettings`` (None when OIDC is not configured)."""
        if not getattr(settings, "oidc_issuer", None):
            return None
        tuning: dict[str, Any] = {}
        refetch = getattr(settings, "oidc_refetch_seconds", None)
        if refetch is not None:
            tuning["refetch_interval"] = float(refetch)
        return cls.create(
            settings.oidc_issuer,
            settings.oidc_audience or "",
            settings.oidc_allowed_domains,
            settings.oidc_allowed_emails,
            **tuning,
        )


# -- fetching ------------------------------------------------------------------------------------


class Fetcher:
    """GETs small JSON documents with a whole-request timeout and a size cap."""

    def __init__(self, timeout: float, max_bytes: int, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self._timeout),
                follow_redirects=False,
                # identity: the size cap then bounds what is held in memory (no inflating)
                headers={"Accept": "application/json", "Accept-Encoding": "identity"},
                transport=self._transport,
            )
        return self._client

    async def get_json(self, url: str) -> dict[str, Any]:
        """The JSON object at ``url``; raises OidcUnavailable on any failure."""
        try:
            async with asyncio.timeout(self._timeout):
                async with self._http().stream("GET", url) as response:
                    if response.status_code != 200:
                        raise OidcUnavailable(f"{url} answered {response.status_code}")
                    declared = response.headers.get("Content-Length")
                    if declared is not None and declared.isdigit() and int(declared) > self._max_bytes:
                        raise OidcUnavailable(f"{url} is larger than {self._max_bytes} bytes")
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > self._max_bytes:
                            raise OidcUnavailable(f"{url} is larger than {self._max_bytes} bytes")
        except TimeoutError:
            raise OidcUnavailable(f"{url} did not answer within {self._timeout}s") from None
        except httpx.HTTPError as exc:
            raise OidcUnavailable(f"{url} could not be fetched ({type(exc).__name__})") from None
        try:
            document = json.loads(body)
        except ValueError:
            raise OidcUnavailable(f"{url} is not JSON") from None
        if not isinstance(document, dict):
            raise OidcUnavailable(f"{url} is not a JSON object")
        return document

    def reset(self) -> None:
        """Forget the HTTP client (it belongs to one event loop)."""
        self._client = None

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


# -- key set ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublicKey:
    """One usable signing key from the issuer's key set."""

    kid: str | None
    kty: str
    crv: str | None
    alg: str | None
    key: Any

    def fits(self, alg: str) -> bool:
        """True when this key may verify ``alg`` (right type, curve, size and declared alg)."""
        if self.alg is not None and self.alg != alg:
            return False
        if alg == "RS256":
            return self.kty == "RSA" and getattr(self.key, "key_size", 0) >= MIN_RSA_BITS
        if alg == "ES256":
            return self.kty == "EC" and self.crv == "P-256"
        return False


def parse_key_set(document: Mapping[str, Any]) -> list[PublicKey]:
    """Signing keys of a JWKS document; entries that are not RSA/EC signing keys are skipped."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise OidcUnavailable("key set has no 'keys' list")
    keys: list[PublicKey] = []
    for entry in entries[:MAX_KEYS]:
        if not isinstance(entry, dict) or entry.get("kty") not in ("RSA", "EC"):
            continue
        if entry.get("use", "sig") != "sig":
            continue
        try:
            parsed = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        kid = entry.get("kid")
        alg = entry.get("alg")
        keys.append(
            PublicKey(
                kid=kid if isinstance(kid, str) else None,
                kty=str(entry["kty"]),
                crv=entry.get("crv") if isinstance(entry.get("crv"), str) else None,
                alg=alg if isinstance(alg, str) else None,
                key=parsed.key,
            )
        )
    return keys


def pick_key(keys: list[PublicKey], kid: str | None, alg: str) -> PublicKey | None:
    """The key for (kid, alg); raises OidcRejected when the named key has the wrong type.

    Without a ``kid`` the only key fitting ``alg`` is used (several → None).
    """
    if kid is not None:
        for key in keys:
            if key.kid == kid:
                if not key.fits(alg):
                    raise OidcRejected("key type does not fit the algorithm")
                return key
        return None
    fitting = [key for key in keys if key.fits(alg)]
    return fitting[0] if len(fitting) == 1 else None


# -- the verifier --------------------------------------------------------------------------------------


@dataclass
class _Cached:
    value: Any = None
    expires: float = 0.0  # fresh until
    attempts: int = 0  # fetches tried so far (success or failure)
    failed_until: float = 0.0


@dataclass
class _LoopState:
    """Things bound to one event loop."""

    loop: asyncio.AbstractEventLoop | None = None
    discovery_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    jwks_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class OidcVerifier:
    """Verifies ID tokens of one issuer; safe to share between the requests of one event loop."""

    def __init__(
        self,
        config: OidcConfig,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        self._clock = clock
        self._fetcher = Fetcher(config.fetch_timeout, config.max_document_bytes, transport)
        self._discovery = _Cached()
        self._jwks = _Cached()
        self._last_kid_refetch = float("-inf")
        self._tokens: OrderedDict[bytes, OidcIdentity] = OrderedDict()
        self._token_expiry: dict[bytes, float] = {}
        self._loop_state = _LoopState()

    # -- public API --

    async def verify(self, token: str) -> OidcIdentity | None:
        """The identity of a valid, admitted ID token, else None (reason logged, never the token)."""
        try:
            return await self.authenticate(token)
        except OidcError as exc:
            # debug: a flood of forged tokens must not become a flood of log lines
            log.debug("oidc token not accepted: %s", exc)
            return None

    async def authenticate(self, token: str, *, nonce: str | None = None) -> OidcIdentity:
        """Verify ``token``; raises OidcRejected (invalid) or OidcUnavailable (issuer trouble).

        With ``nonce`` the token's ``nonce`` claim must equal it (sign-in callbacks).
        """
        if not looks_like_jwt(token):
            raise OidcRejected("not a JWT")
        now = self._clock()
        cache_key = hashlib.sha256(token.encode()).digest()
        identity = self._cached_token(cache_key, now)
        if identity is None:
            identity = await self._verify_uncached(token, now)
            self._remember(cache_key, identity, now)
        if nonce is not None and not (identity.nonce and hmac.compare_digest(identity.nonce, nonce)):
            raise OidcRejected("nonce does not match")
        return identity

    async def metadata(self) -> dict[str, Any]:
        """The issuer's discovery document (cached; its issuer and endpoint URLs checked).

        Raises OidcUnavailable when it cannot be had.
        """
        return await self._discovery_document()

    def forget_user(self, user_id: str) -> None:
        """Drop cached verdicts for ``user_id`` (call when the user is removed or denied)."""
        for key in [key for key, identity in self._tokens.items() if identity.user_id == user_id]:
            self._tokens.pop(key, None)
            self._token_expiry.pop(key, None)

    def forget_tokens(self) -> None:
        """Drop every cached verdict."""
        self._tokens.clear()
        self._token_expiry.clear()

    async def aclose(self) -> None:
        """Release the HTTP client."""
        await self._fetcher.aclose()

    # -- verification --

    async def _verify_uncached(self, token: str, now: float) -> OidcIdentity:
        try:
            header = jwt.get_unverified_header(token)
        except (jwt.PyJWTError, ValueError, TypeError):
            raise OidcRejected("malformed token header") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise OidcRejected(f"algorithm {str(alg)[:20]!r} is not accepted")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise OidcRejected("kid is not a string")
        if "crit" in header or "b64" in header:
            raise OidcRejected("critical header extensions are not supported")
        if str(header.get("typ", "")).lower() in ("at+jwt", "application/at+jwt"):
            raise OidcRejected("an access token is not an ID token")
        discovery = await self._discovery_document()
        key = await self._key_for(kid, alg)
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.config.audience,
                issuer=discovery["issuer"],
                leeway=self.config.leeway,
                options={
                    "require": ["exp", "iss", "aud", "sub"],
                    "verify_signature": True,
                    "verify_exp": True,
                    "verify_iat": True,
                    "verify_nbf": True,
                    "verify_iss": True,
                    "verify_aud": True,
                },
            )
        except (jwt.PyJWTError, ValueError, TypeError) as exc:  # every refusal is a 401, never a 500
            raise OidcRejected(f"token invalid: {type(exc).__name__}") from None
        return check_claims(claims, self.config, now)

    def _cached_token(self, cache_key: bytes, now: float) -> OidcIdentity | None:
        identity = self._tokens.get(cache_key)
        if identity is None:
            return None
        if self._token_expiry.get(cache_key, 0.0) <= now:
            self._tokens.pop(cache_key, None)
            self._token_expiry.pop(cache_key, None)
            return None
        self._tokens.move_to_end(cache_key)
        return identity

    def _remember(self, cache_key: bytes, identity: OidcIdentity, now: float) -> None:
        until = min(identity.expires_at, now + self.config.token_cache_seconds)
        if until <= now:
            return
        self._tokens[cache_key] = identity
        self._token_expiry[cache_key] = until
        while len(self._tokens) > self.config.token_cache_entries:
            old, _ = self._tokens.popitem(last=False)
            self._token_expiry.pop(old, None)

    # -- documents --

    def _locks(self) -> _LoopState:
        """Locks and HTTP client for the running loop (recreated if the loop changed)."""
        loop = asyncio.get_running_loop()
        if self._loop_state.loop is not loop:
            self._loop_state = _LoopState(loop=loop)
            self._fetcher.reset()
        return self._loop_state

    async def _discovery_document(self) -> dict[str, Any]:
        cached = self._discovery
        now = self._clock()
        if cached.value is not None and now < cached.expires:
            return dict(cached.value)
        async with self._locks().discovery_lock:
            now = self._clock()
            if cached.value is not None and now < cached.expires:
                return dict(cached.value)
            if now < cached.failed_until:
                if cached.value is not None:
                    return dict(cached.value)  # stale but usable while the issuer is failing
                raise OidcUnavailable("issuer discovery failed recently; not retrying yet")
            return dict(await self._refetch(cached, self._fetch_discovery(), self.config.discovery_ttl, "discovery"))

    async def _fetch_discovery(self) -> dict[str, Any]:
        return self._check_discovery(await self._fetcher.get_json(self.config.issuer + "/.well-known/openid-configuration"))

    async def _refetch(self, cached: _Cached, fetch: Awaitable[Any], ttl: float, what: str) -> Any:
        """``cached``'s value fetched again (good for ``ttl`` seconds). When the fetch fails, the
        stale value (if any) is served and nothing is fetched again for ``failure_ttl``."""
        cached.attempts += 1
        try:
            value = await fetch
        except OidcUnavailable as exc:
            cached.failed_until = self._clock() + self.config.failure_ttl
            log.warning("oidc %s failed: %s", what, exc)
            if cached.value is not None:
                return cached.value
            raise
        cached.value = value
        cached.expires = self._clock() + ttl
        cached.failed_until = 0.0
        return value

    def _check_discovery(self, document: dict[str, Any]) -> dict[str, Any]:
        issuer = document.get("issuer")
        if not isinstance(issuer, str) or normalise_issuer(issuer) != self.config.issuer:
            raise OidcUnavailable("discovery document names a different issuer")
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise OidcUnavailable("discovery document has no jwks_uri")
        try:
            check_url(jwks_uri, "jwks_uri")
        except OidcConfigError as exc:
            raise OidcUnavailable(str(exc)) from None
        for name in ("authorization_endpoint", "token_endpoint"):
            # Not used here, but a client (the connector) sends users and secrets there.
            if name in document:
                endpoint = document[name]
                try:
                    check_url(endpoint if isinstance(endpoint, str) else "", name)
                except OidcConfigError as exc:
                    raise OidcUnavailable(str(exc)) from None
        return document

    async def _key_for(self, kid: str | None, alg: str) -> PublicKey:
        attempts_before = self._jwks.attempts
        keys = await self._key_set(force=False)
        key = pick_key(keys, kid, alg)
        if key is None and (kid is None or all(k.kid != kid for k in keys)):
            # An unknown kid may mean the issuer rotated keys: fetch the set again, unless it
            # was fetched during this very call, and at most once per refetch interval (the
            # timestamp is taken before awaiting, so concurrent requests do not pile up).
            now = self._clock()
            fetched_just_now = self._jwks.attempts != attempts_before
            if not fetched_just_now and now - self._last_kid_refetch >= self.config.refetch_interval:
                self._last_kid_refetch = now
                keys = await self._key_set(force=True)
                key = pick_key(keys, kid, alg)
        if key is None:
            raise OidcRejected("no key with that kid for that algorithm")
        return key

    async def _key_set(self, force: bool) -> list[PublicKey]:
        cached = self._jwks
        now = self._clock()
        if not force and cached.value is not None and now < cached.expires:
            return list(cached.value)
        async with self._locks().jwks_lock:
            now = self._clock()
            if not force and cached.value is not None and now < cached.expires:
                return list(cached.value)
            if now < cached.failed_until:
                if cached.value is not None:
                    return list(cached.value)
                raise OidcUnavailable("issuer key set fetch failed recently; not retrying yet")
            discovery = await self._discovery_document()
            return list(await self._refetch(cached, self._fetch_keys(discovery["jwks_uri"]), self.config.jwks_ttl,
                                            "key set fetch"))

    async def _fetch_keys(self, jwks_uri: str) -> list[PublicKey]:
        return parse_key_set(await self._fetcher.get_json(jwks_uri))
