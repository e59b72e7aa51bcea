"""OAuth clients: dynamic registration (RFC 7591) and Client ID Metadata Documents.

Every client is public (no secret; PKCE protects the code). A client is either
registered here (random id, persisted one file per client, bounded registry;
a registration never used for a sign-in expires) or identified by an https URL
whose JSON document lists its redirect URIs; such documents are fetched with a
timeout and a size cap and cached briefly.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from common.textsafety import has_unsafe_chars, is_blank
from connector.oauth.redirects import is_loopback_host, redirect_uri_problem
from connector.oauth.client_files import ClientDocs
from connector.oauth.scopes import known_scopes
from mcp.shared.auth import OAuthClientMetadata

MAX_CLIENTS = 50_000
MAX_REDIRECT_URIS = 20
MAX_REDIRECT_URIS_CHARS = 8192  # all of a client's redirect URIs together
UNUSED_CLIENT_TTL_S = 24 * 3600.0
SWEEP_EVERY_S = 3600.0
SWEEP_FULL_EVERY_S = 60.0
MAX_CLIENT_NAME = 200
SUPPORTED_GRANTS = ("authorization_code", "refresh_token")

CIMD_TIMEOUT_S = 5.0
CIMD_MAX_BYTES = 64 * 1024
CIMD_CACHE_TTL_S = 300.0
CIMD_FAILURE_TTL_S = 30.0
CIMD_CACHE_ENTRIES = 1_000


class RegistrationRefused(Exception):
    """A registration request the server will not accept (RFC 7591 error code + text)."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


class RegistryFull(Exception):
    """The bounded client registry holds as many clients as it may."""


@dataclass(frozen=True)
class ClientRecord:
    """What the server knows about one client."""

    client_id: str
    redirect_uris: tuple[str, ...]
    client_name: str
    metadata_document: bool = False

    def display_name(self) -> str:
        """A name to show a person: the registered name, else the client id (also for a name
        that shows nothing, which a registration before this check could store)."""
        return self.client_id if is_blank(self.client_name) else self.client_name


def validate_registration(body: Any) -> dict[str, Any]:
    """The stored form of a registration request, or RegistrationRefused.

    Redirect URIs are kept exactly as sent (they are compared exactly at
    /authorize); the SDK's metadata model validates the other members.
    """
    if not isinstance(body, dict):
        raise RegistrationRefused("invalid_client_metadata", "the request body must be a JSON object")
    uris = body.get("redirect_uris")
    if not isinstance(uris, list) or not uris:
        raise RegistrationRefused("invalid_redirect_uri", "redirect_uris is required and must be a non-empty list")
    if len(uris) > MAX_REDIRECT_URIS:
        raise RegistrationRefused("invalid_redirect_uri", f"at most {MAX_REDIRECT_URIS} redirect URIs")
    if sum(len(uri) if isinstance(uri, str) else 0 for uri in uris) > MAX_REDIRECT_URIS_CHARS:
        raise RegistrationRefused(
            "invalid_redirect_uri", f"the redirect URIs exceed {MAX_REDIRECT_URIS_CHARS} characters together"
        )
    for uri in uris:
        problem = redirect_uri_problem(uri)
        if problem:
            raise RegistrationRefused("invalid_redirect_uri", problem)
    try:
        metadata = OAuthClientMetadata.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "body"
        raise RegistrationRefused("invalid_client_metadata", f"{where}: {first.get('msg', 'invalid')}") from None
    if "code" not in metadata.response_types:
        raise RegistrationRefused("invalid_client_metadata", "response_types must include code")
    grants = list(dict.fromkeys(metadata.grant_types))
    if "authorization_code" not in grants or any(grant not in SUPPORTED_GRANTS for grant in grants):
        raise RegistrationRefused(
            "invalid_client_metadata", "grant_types must be authorization_code, optionally with refresh_token"
        )
    name = (metadata.client_name or "").strip()
    if len(name) > MAX_CLIENT_NAME:
        raise RegistrationRefused("invalid_client_metadata", f"client_name is longer than {MAX_CLIENT_NAME}")
    if has_unsafe_chars(name):
        # Shown on the sign-in page and in memories' provenance: a newline or a bidi
        # override there could make the name read as something it is not.
        raise RegistrationRefused(
            "invalid_client_metadata", "client_name must not contain control or bidirectional-override characters"
        )
    if is_blank(name):
        # Only zero-width or other invisible characters: the page would show no name at all,
        # so it is no name, and the client id is shown instead (ClientRecord.display_name).
        name = ""
    return {
        "redirect_uris": list(dict.fromkeys(uris)),
        "client_name": name,
        "grant_types": grants,
        # Unknown scopes are dropped (RFC 7591 section 3.2.1 lets the server replace a value): the
        # record stays small whatever was sent, and the answer promises nothing /authorize refuses.
        "scope": known_scopes(metadata.scope),
        "issued_at": int(time.time()),
    }


class ClientRegistry:
    """Registered clients, one document each (``ClientDocs``), at most ``max_clients``.

    A client that has not completed a sign-in within ``unused_ttl_s`` of its
    registration is forgotten (0: never), so registrations nobody uses cannot
    fill the registry for good. ``register`` and ``mark_used`` write to disk:
    call them off the event loop.
    """

    def __init__(
        self,
        files: ClientDocs,
        max_clients: int = MAX_CLIENTS,
        *,
        unused_ttl_s: float = UNUSED_CLIENT_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clients = files
        self._max = max_clients
        self._unused_ttl_s = unused_ttl_s
        self._clock = clock
        self._sweep_lock = threading.Lock()
        self._swept_at = clock()

    def register(self, body: Any) -> dict[str, Any]:
        """Register a public client; the RFC 7591 response body.

        Raises RegistrationRefused for bad metadata and RegistryFull at capacity.
        """
        record = validate_registration(body)
        now = self._clock()
        since = now - self._swept_at
        # A full registry looks for expired clients at most once a minute: a sweep reads every file.
        if since >= SWEEP_EVERY_S or (len(self._clients) >= self._max and since >= SWEEP_FULL_EVERY_S):
            self.sweep()
        if len(self._clients) >= self._max:
            raise RegistryFull()
        client_id = "bcc_" + secrets.token_urlsafe(24)
        record["issued_at"] = int(now)
        record["used"] = False
        self._clients.put(client_id, record)
        response: dict[str, Any] = {
            "client_id": client_id,
            "client_id_issued_at": record["issued_at"],
            "redirect_uris": record["redirect_uris"],
            "token_endpoint_auth_method": "none",
            "grant_types": record["grant_types"],
            "response_types": ["code"],
        }
        if record["client_name"]:
            response["client_name"] = record["client_name"]
        if record["scope"]:
            response["scope"] = record["scope"]
        return response

    def _expired(self, record: dict[str, Any], now: float) -> bool:
        # Clients registered before expiry existed carry no "used" flag: they are kept.
        if not self._unused_ttl_s or record.get("used", True):
            return False
        issued_at = record.get("issued_at")
        return isinstance(issued_at, (int, float)) and issued_at + self._unused_ttl_s <= now

    def get(self, client_id: str) -> ClientRecord | None:
        """The registered client ``client_id`` or None (unknown, or expired unused)."""
        record = self._clients.get(client_id)
        if record is None or self._expired(record, self._clock()):
            return None
        return ClientRecord(
            client_id=client_id,
            redirect_uris=tuple(record.get("redirect_uris", ())),
            client_name=str(record.get("client_name", "")),
        )

    def is_unused(self, client_id: str) -> bool:
        """True when ``client_id`` is registered here and has not completed a sign-in yet."""
        record = self._clients.get(client_id)
        return record is not None and record.get("used") is False

    def mark_used(self, client_id: str) -> None:
        """Record that ``client_id`` completed a sign-in: it no longer expires."""
        record = self._clients.get(client_id)
        if record is not None and record.get("used") is False:
            self._clients.put(client_id, {**record, "used": True})

    def sweep(self) -> int:
        """Delete every expired unused client (reads them all: call it from a thread); how many."""
        if not self._sweep_lock.acquire(blocking=False):
            return 0  # another thread is sweeping
        try:
            now = self._clock()
            self._swept_at = now
            expired = [client_id for client_id, record in self._clients.items() if self._expired(record, now)]
            for client_id in expired:
                self._clients.delete(client_id)
            return len(expired)
        finally:
            self._sweep_lock.release()


def is_metadata_document_id(client_id: str) -> bool:
    """True when ``client_id`` looks like a Client ID Metadata Document URL."""
    return client_id.startswith("https://") or client_id.startswith("http://")


class MetadataDocumentFetcher:
    """Fetches and validates Client ID Metadata Documents, with a small cache.

    ``allow_http_loopback`` admits ``http://127.0.0.1...`` client ids: for tests
    only, never from the environment.
    """

    def __init__(self, *, allow_http_loopback: bool = False, client: httpx.AsyncClient | None = None) -> None:
        self._allow_http_loopback = allow_http_loopback
        self._client = client
        self._cache: OrderedDict[str, tuple[float, ClientRecord | None]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    def url_problem(self, client_id: str) -> str | None:
        """Why ``client_id`` cannot be fetched as a metadata document, or None."""
        try:
            parts = urlsplit(client_id)
            parts.port  # noqa: B018 - raises ValueError for a malformed port
        except ValueError:
            return "client id is not a valid URL"
        if len(client_id) > 2000 or parts.fragment or parts.username or parts.password or not parts.hostname:
            return "client id URL is malformed"
        if parts.path in ("", "/"):
            return "client id URL must have a path"
        host = parts.hostname
        if parts.scheme == "http":
            if self._allow_http_loopback and is_loopback_host(host):
                return None
            return "client id URL must use https"
        if parts.scheme != "https":
            return "client id URL must use https"
        if not self._allow_http_loopback and _is_private_host(host):
            return "client id URL must name a public host"
        return None

    async def fetch(self, client_id: str) -> ClientRecord | None:
        """The client described by the document at ``client_id``, or None."""
        if self.url_problem(client_id):
            return None
        now = time.monotonic()
        cached = self._cache.get(client_id)
        if cached and cached[0] > now:
            return cached[1]
        lock = self._locks.setdefault(client_id, asyncio.Lock())
        async with lock:
            cached = self._cache.get(client_id)
            if cached and cached[0] > time.monotonic():
                return cached[1]
            record = await self._download(client_id)
            ttl = CIMD_CACHE_TTL_S if record else CIMD_FAILURE_TTL_S
            self._cache[client_id] = (time.monotonic() + ttl, record)
            self._cache.move_to_end(client_id)
            while len(self._cache) > CIMD_CACHE_ENTRIES:
                old, _ = self._cache.popitem(last=False)
                self._locks.pop(old, None)
        return record

    async def _resolves_publicly(self, client_id: str) -> bool:
        """True when every address the host resolves to is public (no fetches into our network)."""
        host = urlsplit(client_id).hostname or ""
        try:
            async with asyncio.timeout(CIMD_TIMEOUT_S):
                infos = await asyncio.get_running_loop().getaddrinfo(host, 443, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError):
            return False
        addresses = {info[4][0] for info in infos}
        return bool(addresses) and not any(_is_private_host(address) for address in addresses)

    async def _download(self, client_id: str) -> ClientRecord | None:
        # A check before connecting, not a guarantee against DNS rebinding; the document is
        # also size- and time-bounded and only ever parsed as JSON.
        if not self._allow_http_loopback and not await self._resolves_publicly(client_id):
            return None
        client = self._client or httpx.AsyncClient(timeout=CIMD_TIMEOUT_S, follow_redirects=False)
        try:
            async with asyncio.timeout(CIMD_TIMEOUT_S):
                async with client.stream("GET", client_id, headers={"Accept": "application/json"}) as response:
                    if response.status_code != 200:
                        return None
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > CIMD_MAX_BYTES:
                            return None
        except (httpx.HTTPError, TimeoutError, OSError):
            return None
        finally:
            if self._client is None:
                await client.aclose()
        return parse_metadata_document(client_id, bytes(body))


def parse_metadata_document(client_id: str, body: bytes) -> ClientRecord | None:
    """Validate a fetched metadata document for ``client_id``; None when unusable."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("client_id") != client_id:
        return None
    method = document.get("token_endpoint_auth_method", "none")
    if method not in (None, "none"):
        return None
    try:
        stored = validate_registration(document)
    except RegistrationRefused:
        return None
    return ClientRecord(
        client_id=client_id,
        redirect_uris=tuple(stored["redirect_uris"]),
        client_name=stored["client_name"],
        metadata_document=True,
    )


def _is_private_host(host: str) -> bool:
    # Refuse obvious internal targets given as literals; names are left to the resolver.
    if host.lower() in ("localhost",) or host.lower().endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return not address.is_global
