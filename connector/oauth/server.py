"""The authorization server's logic, free of HTTP: register, authorize, sign in, token, revoke.

Each method takes plain parameters (the request's query or form as a mapping,
and the base URL the request reached) and returns a reply object the routes
turn into an HTTP response. A pending sign-in (10 minutes) travels sealed with
the browser (connector/oauth/pending.py): in the sign-in page's form, or in a
cookie while the OIDC issuer has the browser, so starting one costs no server
capacity. An authorization code (60 s) names a sealed record in the state
directory, taken once by whichever replica redeems it (connector/oauth/codes.py);
a finished sign-in is claimed in ``OnceDocs``, shared the same way. Clients
and refresh families are persisted through OAuthState.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import math
import re
import secrets
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit, urlunsplit

import anyio.to_thread

from common.docstore import DocumentStoreError
from common.limits import TokenBucketLimiter
from common.textsafety import has_unsafe_chars
from connector.identity.base import (
    Identity,
    IdentityProvider,
    ProviderRefused,
    ProviderThrottled,
    ProviderUnavailable,
)
from connector.oauth.clients import (
    ClientRecord,
    ClientRegistry,
    MetadataDocumentFetcher,
    RegistrationRefused,
    RegistryFull,
    is_metadata_document_id,
)
from connector.oauth.codes import CODE_TTL_S, Code, CodeStore
from connector.oauth.scopes import SCOPES
from connector.oauth.grants import Family, RefreshGrants, RotationConflict, new_family_id
from connector.oauth.pending import Pending, PendingSeal, SignInAttempts, cookie_name, new_sign_in_id
from connector.state.memory import MemoryStore
from connector.state.once import OnceDocs
from connector.oauth.signin_limit import SignInChecks, signin_wait
from connector.oauth.pkce import is_valid_challenge, verifier_matches
from connector.state.sealing import SecretBox
from connector.oauth.tokens import ACCESS_TOKEN_TTL_S, AccessClaims, AccessTokenCodec
from connector.i18n import N_, Text

log = logging.getLogger("connector.oauth")

SCOPE_DESCRIPTIONS = {
    "brain.read": N_("read your memories (recall and status)"),
    "brain.write": N_("add, pin, verify and archive memories"),
}
PENDING_TTL_S = 600.0
MAX_ATTEMPTS = 3
# Tokens checked per client address (an IPv6 /64) and minute; counted before the store is asked.
SIGNIN_ATTEMPTS_PER_MIN = 10
# A cookie carrying an OIDC sign-in must stay under the browsers' 4 KiB per cookie.
MAX_COOKIE_CHARS = 3800
MAX_PARAM_CHARS = 2048
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_LOCK_STRIPES = 64
# The URL of one brain is <base>/mcp/brains/<name or id> (connector/app.py).
BRAINS_PATH = "/brains/"
MAX_BRAIN_CHARS = 300
# One URL path segment (RFC 3986 pchar): a brain's name as a client may write it in its URL.
_SEGMENT = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})+")


# -- replies ------------------------------------------------------------------


@dataclass(frozen=True)
class JsonReply:
    """A JSON response."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RedirectReply:
    """A 302/303 to ``location``, possibly setting a cookie (a ``Set-Cookie`` value)."""

    location: str
    cookie: str | None = None


@dataclass(frozen=True)
class SignInView:
    """What the sign-in page shows; rendering lives in connector/web."""

    provider: str
    client_name: str
    client_id: str
    redirect_host: str
    scopes: tuple[str, ...]
    login_id: str | None = None
    error: str | None = None
    attempts_left: int = MAX_ATTEMPTS
    redirect_origin: str | None = None
    form_action: str = "/authorize/complete"
    # The brain (name or id) a sign-in for ``/mcp/brains/{brain}`` is for; None for ``/mcp``.
    brain: str | None = None


@dataclass(frozen=True)
class PageReply:
    """The sign-in page (or a page explaining why there is none)."""

    status: int
    view: SignInView


Reply = JsonReply | RedirectReply | PageReply


def _error(status: int, error: str, description: str, headers: Mapping[str, str] | None = None) -> JsonReply:
    return JsonReply(status, {"error": error, "error_description": description}, dict(headers or {}))


def add_query(uri: str, params: Mapping[str, str | None]) -> str:
    """``uri`` with ``params`` appended to its query (None values left out).

    The registered URI's own query is kept byte for byte (RFC 6749 section 3.1.2): decoding
    and encoding it again would turn ``?flag`` into ``?flag=`` and an escape that is not
    UTF-8 into another one, and the client would no longer recognise its own URI.
    """
    parts = urlsplit(uri)
    added = urlencode([(key, value) for key, value in params.items() if value is not None])
    query = "&".join(part for part in (parts.query, added) if part)
    return urlunsplit(parts._replace(query=query))


def _single(params: Mapping[str, Any], name: str) -> tuple[str | None, bool]:
    """The value of ``name`` and whether it was repeated (repeats are an error)."""
    value = params.get(name)
    if isinstance(value, (list, tuple)):
        if len(value) > 1:
            return str(value[0]), True
        value = value[0] if value else None
    if value is None:
        return None, False
    return str(value), False


def parse_scope(raw: str | None) -> frozenset[str] | None:
    """The requested scopes (default: all), or None when one is unknown."""
    if raw is None or not raw.strip():
        return frozenset(SCOPES)
    requested = frozenset(raw.split())
    if not requested <= frozenset(SCOPES):
        return None
    return requested


class AuthorizationServer:
    """OAuth 2.1 for public MCP clients, with one identity provider behind it."""

    def __init__(
        self,
        *,
        clients: ClientRegistry,
        documents: MetadataDocumentFetcher,
        grants: RefreshGrants,
        codec: AccessTokenCodec,
        provider: IdentityProvider,
        clock: Callable[[], float] = time.time,
        on_session_end: Callable[[str], Awaitable[Any]] | None = None,
        box: SecretBox | None = None,
        once: OnceDocs | None = None,
        codes: CodeStore | None = None,
        attempts: SignInAttempts | None = None,
        signin_attempts_per_min: int = SIGNIN_ATTEMPTS_PER_MIN,
        signin_checks: SignInChecks | None = None,
        bind_brain: Callable[[Identity, str], Awaitable[str]] | None = None,
    ) -> None:
        """``box`` seals pending sign-ins, ``once`` records finished sign-ins and ``codes`` keeps
        authorization codes and ``attempts`` the wrong tokens of each sign-in (give the state's, so
        every replica can finish a sign-in and redeem a code, once, and a sign-in has its three
        tries in all);
        ``signin_attempts_per_min`` bounds tokens checked per client address (0: no limit);
        ``signin_checks`` (from `signin_limiter`) replaces that bound with one shared by the
        web app's sign-in and the other workers; ``bind_brain`` resolves the brain a resource's URL
        names to its id for the signed-in identity ("" when it cannot), kept by the sign-in's tokens."""
        self.clients = clients
        self._bind_brain = bind_brain
        self.documents = documents
        self.grants = grants
        self.codec = codec
        self.provider = provider
        self._clock = clock
        self._on_session_end = on_session_end
        box = box or SecretBox(secrets.token_bytes(32))
        self._seal = PendingSeal(box)
        self._codes = codes or CodeStore.in_memory(box, clock=clock)
        self._once = once or OnceDocs(MemoryStore(), "once")
        self._attempts = attempts or SignInAttempts.in_memory(box, clock=clock)
        self._checks = signin_checks or (TokenBucketLimiter(signin_attempts_per_min) if signin_attempts_per_min else None)
        self._locks = [asyncio.Lock() for _ in range(_LOCK_STRIPES)]

    async def _tries(self, pending: Pending) -> int:
        """The wrong tokens this sign-in has had, at any replica (read off the event loop)."""
        return await anyio.to_thread.run_sync(self._attempts.count, pending.sign_in_id)

    async def _set_tries(self, pending: Pending, count: int) -> None:
        """Remember ``count`` wrong tokens for this sign-in (``MAX_ATTEMPTS``: it is finished)."""
        await anyio.to_thread.run_sync(self._attempts.set, pending.sign_in_id, count, pending.expires)

    # -- registration ---------------------------------------------------------

    def register(self, body: Any) -> JsonReply:
        """RFC 7591 dynamic client registration of a public client."""
        try:
            response = self.clients.register(body)
        except RegistrationRefused as exc:
            return _error(400, exc.error, exc.description)
        except RegistryFull:
            return _error(503, "temporarily_unavailable", "the client registry is full", {"Retry-After": "3600"})
        except (OSError, DocumentStoreError) as exc:
            # A full disk (or a read-only one) is the server's trouble, said as such, never a bare 500.
            # A DocumentStoreError of a directory keeps the OSError it replaced as its context.
            cause = exc.__context__ if isinstance(exc, DocumentStoreError) else exc
            full = isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT)
            reason = "no space left on the connector's disk" if full else "the connector cannot write its state"
            log.error("client registration not saved: %s", exc, extra={"reason": reason})
            return _error(503, "temporarily_unavailable", f"the registration could not be saved: {reason}",
                          {"Retry-After": "60"})
        return JsonReply(201, response, dict(NO_STORE))

    async def find_client(self, client_id: str) -> ClientRecord | None:
        """A registered client, or one described by a metadata document URL."""
        if is_metadata_document_id(client_id):
            return await self.documents.fetch(client_id)
        # Off the loop: with the state in a bucket a look-up is a network round trip.
        return await anyio.to_thread.run_sync(self.clients.get, client_id)

    # -- authorization --------------------------------------------------------

    async def authorize(self, params: Mapping[str, Any], base_url: str) -> Reply:
        """GET /authorize: every check in order, then hand over to the identity provider."""
        now = self._clock()
        issuer = base_url
        client_id, repeated_client = _single(params, "client_id")
        if not client_id or repeated_client or len(client_id) > MAX_PARAM_CHARS:
            return _error(400, "invalid_request", "client_id is missing or repeated")
        client = await self.find_client(client_id)
        if client is None:
            return _error(400, "invalid_client", "unknown client")
        redirect_uri, repeated_redirect = _single(params, "redirect_uri")
        if repeated_redirect:
            return _error(400, "invalid_request", "redirect_uri is repeated")
        redirect_explicit = redirect_uri is not None
        if redirect_uri is None:
            if len(client.redirect_uris) != 1:
                return _error(400, "invalid_request", "redirect_uri is required for this client")
            redirect_uri = client.redirect_uris[0]
        elif redirect_uri not in client.redirect_uris:
            return _error(400, "invalid_request", "redirect_uri is not registered for this client")

        # From here on, errors go back to the client's redirect URI.
        state, repeated_state = _single(params, "state")
        if state is not None and len(state) > MAX_PARAM_CHARS:
            state, repeated_state = None, True

        def back(error: str, description: str) -> RedirectReply:
            return RedirectReply(
                add_query(
                    redirect_uri,
                    {"error": error, "error_description": description, "state": state, "iss": issuer},
                )
            )

        names = ("response_type", "code_challenge", "code_challenge_method", "resource", "scope")
        values: dict[str, str | None] = {}
        for name in names:
            value, repeated = _single(params, name)
            if repeated or (value is not None and len(value) > MAX_PARAM_CHARS):
                return back("invalid_request", f"{name} is repeated or too long")
            values[name] = value
        if repeated_state:
            return back("invalid_request", "state is repeated or too long")
        if values["response_type"] != "code":
            return back("unsupported_response_type", "response_type must be code")
        if values["code_challenge_method"] != "S256":
            return back("invalid_request", "code_challenge_method must be S256")
        challenge = values["code_challenge"]
        if not challenge or not is_valid_challenge(challenge):
            return back("invalid_request", "code_challenge is missing or malformed")
        try:
            # Kept as `resource_of` writes it, whichever percent-encoding of the brain's name was sent.
            resource = resource_of(base_url, brain_of_resource(values["resource"] or "", base_url))
        except ValueError as exc:
            return back("invalid_target", str(exc))
        scope = parse_scope(values["scope"])
        if scope is None:
            return back("invalid_scope", f"known scopes: {' '.join(SCOPES)}")

        pending = Pending(
            sign_in_id=new_sign_in_id(),
            client_id=client.client_id,
            client_name=client.display_name(),
            redirect_uri=redirect_uri,
            redirect_explicit=redirect_explicit,
            state=state,
            challenge=challenge,
            resource=resource,
            scope=scope,
            issuer=issuer,
            expires=now + PENDING_TTL_S,
        )
        if self.provider.mode == "redirect":
            try:
                start = await self.provider.start(callback_url(base_url))  # type: ignore[attr-defined]
            except ProviderUnavailable:
                return back("temporarily_unavailable", "the identity provider cannot be reached; try again")
            sealed = self._seal.seal(replace(pending, bound_to=start.state, keep=start.keep))
            if len(sealed) > MAX_COOKIE_CHARS:
                return back("invalid_request", "state or redirect_uri is too long for a sign-in")
            return RedirectReply(start.url, cookie=_signin_cookie(start.state, sealed, base_url, PENDING_TTL_S))
        return PageReply(200, self._view(pending, self._seal.seal(pending)))

    def _view(self, pending: Pending, login_id: str | None, error: str | None = None, attempts: int = 0) -> SignInView:
        parts = urlsplit(pending.redirect_uri)
        try:
            brain = brain_of_resource(pending.resource, pending.issuer)
        except ValueError:
            brain = None
        return SignInView(
            brain=brain,
            provider=self.provider.kind,
            client_name=pending.client_name,
            client_id=pending.client_id,
            redirect_host=parts.netloc,
            scopes=tuple(sorted(pending.scope)),
            login_id=login_id,
            error=error,
            attempts_left=MAX_ATTEMPTS - attempts,
            redirect_origin=f"{parts.scheme}://{parts.netloc}",
            # Absolute path: the page is shown at /authorize and again at /authorize/complete.
            form_action=urlsplit(pending.issuer).path.rstrip("/") + "/authorize/complete",
        )

    def _expired_view(self, error: str) -> SignInView:
        return SignInView(provider=self.provider.kind, client_name="", client_id="", redirect_host="", scopes=(), error=error)

    def refusal_page(self, reply: JsonReply) -> PageReply:
        """A refused authorization request as a page for a person's browser (the JSON is for
        programs): the reason in words and what to do, nothing signed in."""
        description = str(reply.body.get("error_description") or reply.body.get("error") or "it was refused")
        return PageReply(reply.status, self._expired_view(Text(
            "This sign-in cannot start: %(reason)s. Nothing was signed in. Start again from your app; "
            "if this keeps happening, remove the connector in your app and add it again.", reason=description)))

    async def complete(self, form: Mapping[str, Any], client_address: str = "unknown") -> Reply:
        """POST /authorize/complete: the sign-in page was submitted from ``client_address``.

        Wrong tokens are limited per sign-in (three; an empty token is no attempt), and tokens checked per client
        address (counted before the store is asked, so concurrent submissions cannot
        slip past); a store refusing to check more (429) counts as a wrong token, so
        it never turns into free retries.
        """
        now = self._clock()
        login_id, _ = _single(form, "login_id")
        pending = self._seal.open(login_id, now) if self.provider.mode == "page" else None
        attempts = await self._tries(pending) if pending is not None else 0
        if pending is None or pending.bound_to or attempts >= MAX_ATTEMPTS:
            return PageReply(400, self._expired_view(Text("This sign-in has expired. Start again from your app.")))
        assert login_id is not None
        action, _ = _single(form, "action")
        if action == "language":  # the page's language switch: the same page again, nothing counted
            return PageReply(200, self._view(pending, login_id, None, attempts))
        if action == "deny":
            await self._set_tries(pending, MAX_ATTEMPTS)
            return self._redirect_error(pending, "access_denied", "the user declined")
        token, _ = _single(form, "token")
        if self.provider.kind == "static" and not (token or "").strip():
            # A form sent with an empty field (Enter pressed too soon) tried no token: it costs
            # neither one of this sign-in's attempts nor one of the address's.
            return PageReply(400, self._view(pending, login_id, Text("Enter your token."), attempts))
        wait = await signin_wait(self._checks, client_address)
        if wait is not None:
            message = Text("Too many sign-in attempts from your network. Wait %(seconds)s seconds, then try again.",
                           seconds=math.ceil(wait))
            return PageReply(429, self._view(pending, login_id, message, attempts))
        try:
            identity = await self.provider.sign_in(token, client_address)  # type: ignore[attr-defined]
        except ProviderUnavailable:
            return PageReply(503, self._view(pending, login_id, Text("The store could not be reached. Try again."), attempts))
        except ProviderRefused as refused:
            attempts = await self._tries(pending) + 1
            await self._set_tries(pending, attempts)
            if attempts >= MAX_ATTEMPTS:
                return self._redirect_error(pending, "access_denied", "too many wrong tokens")
            if isinstance(refused, ProviderThrottled):
                message = Text("The store refuses more attempts from your network for now. Wait a minute, then try again.")
                return PageReply(429, self._view(pending, login_id, message, attempts))
            refused_text = Text("That token was not accepted by the store. A token works only with the store that "
                                "made it: `brain-store user add` says which data directory it wrote to (for "
                                "`make dev`, add --data .dev-data/store).")
            return PageReply(401, self._view(pending, login_id, refused_text, attempts))
        # A sign-in completes once: its sealed value is worth nothing afterwards.
        await self._set_tries(pending, MAX_ATTEMPTS)
        return await self._issue_code(pending, identity)

    async def oidc_callback(self, params: Mapping[str, Any], cookies: Mapping[str, str] | None = None) -> Reply:
        """GET /oidc/callback: the issuer sent the browser back, with the sign-in's cookie."""
        now = self._clock()
        state, _ = _single(params, "state")
        pending = None
        if state and len(state) <= 200 and self.provider.mode == "redirect":
            pending = self._seal.open((cookies or {}).get(cookie_name(state)), now)
        if (
            pending is None
            or not pending.bound_to
            or not secrets.compare_digest(pending.bound_to, state or "")
            or await self._tries(pending) >= MAX_ATTEMPTS
        ):
            return PageReply(400, self._expired_view(Text("This sign-in has expired or is unknown. Start again from your app.")))
        await self._set_tries(pending, MAX_ATTEMPTS)  # a callback works once
        reply = await self._finish_redirect(pending, params)
        if isinstance(reply, RedirectReply):  # the browser no longer needs the cookie
            reply = replace(reply, cookie=_signin_cookie(pending.bound_to, "", pending.issuer, 0))
        return reply

    async def _finish_redirect(self, pending: Pending, params: Mapping[str, Any]) -> Reply:
        issuer_error, _ = _single(params, "error")
        code, _ = _single(params, "code")
        if issuer_error or not code:
            return self._redirect_error(pending, "access_denied", "the organisation sign-in did not complete")
        try:
            finish = self.provider.finish  # type: ignore[attr-defined]
            identity = await finish(code, callback_url(pending.issuer), dict(pending.keep))
        except ProviderUnavailable:
            view = self._expired_view(Text("The organisation's sign-in service could not be reached. Start again from your app."))
            return PageReply(503, view)
        except ProviderRefused:
            return self._redirect_error(pending, "access_denied", "the organisation sign-in was refused")
        return await self._issue_code(pending, identity)

    def _redirect_error(self, pending: Pending, error: str, description: str) -> RedirectReply:
        return RedirectReply(
            add_query(
                pending.redirect_uri,
                {"error": error, "error_description": description, "state": pending.state, "iss": pending.issuer},
            )
        )

    async def _issue_code(self, pending: Pending, identity: Identity) -> Reply:
        now = self._clock()
        # A sign-in finishes once on every replica (claimed only now: the identity is proven,
        # so strangers cannot make the connector write markers).
        if not await anyio.to_thread.run_sync(self._once.claim, "sign-in " + pending.sign_in_id):
            return PageReply(400, self._expired_view(Text("This sign-in has already been used. Start again from your app.")))
        if await anyio.to_thread.run_sync(self.clients.is_unused, pending.client_id):
            # Its first sign-in: the registration stops expiring (a small write, off the loop).
            await anyio.to_thread.run_sync(self.clients.mark_used, pending.client_id)
        code = await anyio.to_thread.run_sync(self._codes.issue, Code(
            client_id=pending.client_id,
            client_name=pending.client_name,
            redirect_uri=pending.redirect_uri,
            redirect_explicit=pending.redirect_explicit,
            challenge=pending.challenge,
            resource=pending.resource,
            scope=pending.scope,
            identity=identity,
            expires=now + CODE_TTL_S,
        ))
        return RedirectReply(add_query(pending.redirect_uri, {"code": code, "state": pending.state, "iss": pending.issuer}))

    # -- token endpoint -------------------------------------------------------

    async def token(self, form: Mapping[str, Any]) -> JsonReply:
        """POST /token (form-encoded): authorization_code and refresh_token grants."""
        for name in ("grant_type", "code", "code_verifier", "redirect_uri", "client_id", "refresh_token", "resource", "scope"):
            value, repeated = _single(form, name)
            if repeated or (value is not None and len(value) > 16_384):
                return _error(400, "invalid_request", f"{name} is repeated or too long", NO_STORE)
        grant_type, _ = _single(form, "grant_type")
        if grant_type == "authorization_code":
            return await self._token_from_code(form)
        if grant_type == "refresh_token":
            return await self._token_from_refresh(form)
        if not grant_type:
            return _error(400, "invalid_request", "grant_type is required", NO_STORE)
        return _error(400, "unsupported_grant_type", "use authorization_code or refresh_token", NO_STORE)

    async def _token_from_code(self, form: Mapping[str, Any]) -> JsonReply:
        now = self._clock()
        code_value, _ = _single(form, "code")
        # Taken on lookup, at whichever replica: whatever happens next, a code is never usable twice.
        code = await anyio.to_thread.run_sync(self._codes.redeem, code_value)
        if code is None or code.expires <= now:
            await self._revoke_replayed_code(code_value)
            return _error(400, "invalid_grant", "unknown or expired code", NO_STORE)
        client_id, _ = _single(form, "client_id")
        if client_id != code.client_id:
            return _error(400, "invalid_grant", "code was issued to another client", NO_STORE)
        redirect_uri, _ = _single(form, "redirect_uri")
        if redirect_uri is None and code.redirect_explicit or redirect_uri is not None and redirect_uri != code.redirect_uri:
            return _error(400, "invalid_grant", "redirect_uri does not match the authorization request", NO_STORE)
        verifier, _ = _single(form, "code_verifier")
        if not verifier_matches(verifier, code.challenge):
            return _error(400, "invalid_grant", "code_verifier does not match the code challenge", NO_STORE)
        resource, _ = _single(form, "resource")
        if resource is not None and not same_resource(resource, code.resource):
            return _error(400, "invalid_target", "resource differs from the authorization request", NO_STORE)
        assert code_value is not None  # redeemed, so it was given
        # The marker before anything slow (the brain is looked up at the store): a second use of the
        # code from now on ends this sign-in, also while its tokens are still being made.
        family_id = new_family_id()
        await anyio.to_thread.run_sync(self._codes.mark_spent, code_value, family_id, code.expires)
        brain_name = brain_of_url(code.resource)
        brain_id = await self._bind_brain(code.identity, brain_name) if brain_name and self._bind_brain else ""
        family, refresh_token = await anyio.to_thread.run_sync(functools.partial(
            self.grants.start_family,
            client_id=code.client_id,
            client_name=code.client_name,
            scope=code.scope,
            resource=code.resource,
            idp=self.provider.kind,
            identity=code.identity,
            now=now,
            brain_id=brain_id,
            family_id=family_id,
        ))
        if await anyio.to_thread.run_sync(self.grants.family_revoked, family_id, now):
            # The code was presented again meanwhile (`_revoke_replayed_code`): this sign-in is over.
            await self._end_family(family)
            return _error(400, "invalid_grant", "the code was used twice; sign in again", NO_STORE)
        log.info("sign-in completed", extra={"client_id": code.client_id, "idp": self.provider.kind})
        return self._token_reply(family, refresh_token, family.scope, now)

    async def _revoke_replayed_code(self, code_value: str | None) -> None:
        """A code presented again after it was redeemed leaked (RFC 6749 section 4.1.2): end the
        sign-in its first use started, so whoever holds those tokens loses them too."""
        family_id = await anyio.to_thread.run_sync(self._codes.spent_family, code_value)
        if family_id is None:
            return
        family = await anyio.to_thread.run_sync(self.grants.load_family, family_id)
        if family is not None:
            await self._end_family(family)
        else:
            # Its tokens are still being made: revoked by id, which the first use then finds.
            await anyio.to_thread.run_sync(self.grants.revoke_family, family_id, self._clock())
        log.warning("authorization code used twice: its sign-in revoked",
                    extra={"client_id": family.client_id if family is not None else None})

    async def _token_from_refresh(self, form: Mapping[str, Any]) -> JsonReply:
        token, _ = _single(form, "refresh_token")
        client_id, _ = _single(form, "client_id")
        if not token:
            return _error(400, "invalid_request", "refresh_token is required", NO_STORE)
        if not client_id:
            return _error(400, "invalid_request", "client_id is required for public clients", NO_STORE)
        family_id = await anyio.to_thread.run_sync(self.grants.family_of, token)
        if family_id is None:
            return _error(400, "invalid_grant", "unknown refresh token", NO_STORE)
        async with self._lock_for(family_id):
            now = self._clock()
            seen = await anyio.to_thread.run_sync(self.grants.inspect, token, now)
            if seen.family is None or seen.status in ("unknown", "expired"):
                return _error(400, "invalid_grant", "unknown or expired refresh token", NO_STORE)
            family = seen.family
            if not secrets.compare_digest(client_id, family.client_id):
                return _error(400, "invalid_grant", "refresh token was issued to another client", NO_STORE)
            if seen.status == "reused":
                await self._end_family(family)
                log.warning("refresh token reuse: family revoked", extra={"client_id": family.client_id})
                return _error(400, "invalid_grant", "refresh token was already used; sign in again", NO_STORE)
            resource, _ = _single(form, "resource")
            if resource is not None and not same_resource(resource, family.resource):
                return _error(400, "invalid_target", "resource differs from the original grant", NO_STORE)
            scope_raw, _ = _single(form, "scope")
            scope = family.scope
            if scope_raw is not None and scope_raw.strip():
                asked = frozenset(scope_raw.split())
                if not asked <= family.scope:
                    return _error(400, "invalid_scope", "scope exceeds the original grant", NO_STORE)
                scope = asked
            if seen.status == "replay":
                assert seen.successor is not None
                return self._token_reply(family, seen.successor, scope, now)
            try:
                identity = await self.provider.renew(family.subject, family.renewal_secret)
            except ProviderUnavailable:
                return _error(
                    503,
                    "temporarily_unavailable",
                    "the identity provider could not be reached; keep your tokens and retry",
                    {**NO_STORE, "Retry-After": "30"},
                )
            except ProviderRefused:
                await self._end_family(family)
                log.info("identity refused at refresh: family revoked", extra={"client_id": family.client_id})
                return _error(400, "invalid_grant", "the identity is no longer valid; sign in again", NO_STORE)
            now = self._clock()
            try:
                family, successor = await anyio.to_thread.run_sync(self.grants.rotate, token, identity, now)
            except RotationConflict:
                # Another replica rotated it meanwhile: answer as a replay would, or refuse.
                again = await anyio.to_thread.run_sync(self.grants.inspect, token, now)
                if again.status != "replay" or again.family is None or again.successor is None:
                    return _error(400, "invalid_grant", "refresh token was already used", NO_STORE)
                family, successor = again.family, again.successor
            return self._token_reply(family, successor, scope, now)

    def _token_reply(self, family: Family, refresh_token: str, scope: frozenset[str], now: float) -> JsonReply:
        exp = int(now) + ACCESS_TOKEN_TTL_S
        if family.credential_expires_at is not None:
            exp = max(int(now) + 1, min(exp, int(family.credential_expires_at)))
        claims = AccessClaims(
            sub=family.subject,
            scope=scope,
            aud=family.resource,
            exp=exp,
            client_id=family.client_id,
            client_name=family.client_name,
            idp=family.idp,
            store_credential=family.store_credential,
            family=family.family_id,
            iat=int(now),
            brain_id=family.brain_id,
        )
        body = {
            "access_token": self.codec.issue(claims),
            "token_type": "Bearer",
            "expires_in": exp - int(now),
            "refresh_token": refresh_token,
            "scope": " ".join(sorted(scope)),
        }
        return JsonReply(200, body, dict(NO_STORE))

    async def _end_family(self, family: Family) -> None:
        """Revoke a family; when it was the user's last session, tell the working copies."""
        await anyio.to_thread.run_sync(self.grants.revoke_family, family.family_id, self._clock())
        if self._on_session_end is None or await anyio.to_thread.run_sync(
                self.grants.subject_has_live_family, family.subject, self._clock()):
            return
        try:
            await self._on_session_end(family.subject)
        except Exception:  # the session is over either way; a purge failure must not turn into a 500
            log.exception("session-end hook failed")

    def end_refused_sign_ins(self, subject: str, store_credential: str, session: str = "") -> int:
        """The store refused a store token (401): end every sign-in using it, and ``session``.

        Their refresh tokens die and their access tokens are refused from now on, so
        the clients are sent to sign in again instead of presenting the dead token to
        the store on every call (each a failed login the store counts against the
        connector's address). The working copies are not purged here: this runs while
        the manager holds a copy's lock, and idle copies go on their own. Returns how
        many sign-ins ended.
        """
        now = self._clock()
        ended = set(self.grants.families_using(subject, store_credential))
        if session:
            ended.add(session)
        for family_id in ended:
            self.grants.revoke_family(family_id, now)
        log.info("the store refused a store token: its sign-ins ended", extra={"sign_ins": len(ended)})
        return len(ended)

    def _lock_for(self, family_id: str) -> asyncio.Lock:
        return self._locks[zlib.crc32(family_id.encode("utf-8")) % _LOCK_STRIPES]

    # -- revocation and verification ------------------------------------------

    async def revoke(self, form: Mapping[str, Any]) -> JsonReply:
        """POST /revoke (RFC 7009): ends the token's family; 200 whether or not it was known."""
        token, repeated = _single(form, "token")
        if not token or repeated:
            return _error(400, "invalid_request", "token is required", NO_STORE)
        client_id, _ = _single(form, "client_id")
        family_id = await anyio.to_thread.run_sync(self.grants.family_of, token)
        if family_id is None:
            claims = self.codec.open(token)
            family_id = claims.family if claims is not None and claims.family else None
        if family_id is not None:
            family = await anyio.to_thread.run_sync(self.grants.load_family, family_id)
            # A public client may only revoke its own tokens; anything else is silently ignored.
            if family is not None and (client_id is None or secrets.compare_digest(client_id, family.client_id)):
                await self._end_family(family)
        return JsonReply(200, {}, dict(NO_STORE))

    def verify_access(
        self, token: str, base_url: str, now: float | None = None, *, brain: str | None = None
    ) -> AccessClaims | None:
        """The claims of a valid access token whose family is alive, else None.

        At ``<base>/mcp`` a token must be for that resource. At ``<base>/mcp/brains/<brain>``
        (``brain`` given) a token for that resource, or for ``<base>/mcp``: the latter already
        reaches every brain of its user (brain_use), so binding the connection to one takes
        nothing away; a token for one brain's URL is never accepted anywhere else.
        """
        audiences = (resource_of(base_url),) + ((resource_of(base_url, brain),) if brain else ())
        claims = self.codec.verify(token, audiences, now=now)
        if claims is None:
            return None
        if claims.family and self.grants.family_revoked(claims.family, now):
            return None
        return claims


def resource_of(base_url: str, brain: str | None = None, written: str | None = None) -> str:
    """The protected resource (RFC 8707 audience) of a connector reached at ``base_url``:
    ``<base>/mcp``, or ``<base>/mcp/brains/<brain>`` for the URL bound to one brain.

    The brain's name is percent-encoded whole (the form tokens are bound to), unless ``written``,
    the path segment as a client wrote it in its URL, names the same brain: the metadata and
    challenges then speak of the URL the client has, which clients compare character for character.
    """
    resource = base_url.rstrip("/") + "/mcp"
    if not brain:
        return resource
    segment = written if written and brain_of_segment(written) == brain else quote(brain, safe="")
    return f"{resource}{BRAINS_PATH}{segment}"


def brain_of_segment(segment: str) -> str | None:
    """The brain a URL path segment names, however it is percent-encoded ("c++", "c%2B%2B"), or
    None when it is not one segment (RFC 3986 pchar) naming a brain a URL can name."""
    if not _SEGMENT.fullmatch(segment):
        return None
    try:
        brain = unquote(segment, errors="strict")
    except UnicodeDecodeError:
        return None
    return brain if valid_brain_segment(brain) else None


def brain_of_resource(resource: str, base_url: str) -> str | None:
    """The brain a resource of this connector names (None for ``<base>/mcp``); ValueError when the
    resource is not one of this connector's, or its last segment cannot name a brain."""
    plain = resource_of(base_url)
    if resource == plain:
        return None
    prefix = plain + BRAINS_PATH
    brain = brain_of_segment(resource[len(prefix):]) if resource.startswith(prefix) else None
    if brain is None:
        raise ValueError(f"resource must be {plain} or {prefix}<brain name or id>")
    return brain


def brain_of_url(resource: str) -> str | None:
    """The brain named by a resource already checked by `brain_of_resource` (None for ``/mcp``)."""
    _, found, brain = resource.rpartition("/mcp" + BRAINS_PATH)
    return unquote(brain) if found else None


def same_resource(presented: str, granted: str) -> bool:
    """Whether the ``resource`` a client sent at /token names ``granted`` (as `resource_of` writes it
    for a sign-in), the brain's name percent-encoded the same way or not."""
    if presented == granted:
        return True
    base, found, _ = granted.rpartition("/mcp" + BRAINS_PATH)
    if not found:
        return False
    try:
        return brain_of_resource(presented, base) == brain_of_url(granted)
    except ValueError:  # not a resource of this connector
        return False


def valid_brain_segment(brain: str) -> bool:
    """Whether ``brain`` can name a brain in a ``/mcp/brains/{brain}`` URL (one path segment, one line)."""
    return 0 < len(brain) <= MAX_BRAIN_CHARS and "/" not in brain and brain.strip() == brain and not has_unsafe_chars(brain)


def _signin_cookie(oidc_state: str, value: str, base_url: str, max_age: float) -> str:
    """The Set-Cookie value carrying (or, with max_age 0, removing) an OIDC sign-in.

    Only /oidc/callback receives it; SameSite=Lax still sends it on the issuer's
    top-level redirect back; HttpOnly keeps scripts away; Secure over https.
    """
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/") + "/oidc/callback"
    secure = "; Secure" if parts.scheme == "https" else ""
    return f"{cookie_name(oidc_state)}={value}; Max-Age={int(max_age)}; Path={path}; HttpOnly; SameSite=Lax{secure}"


def callback_url(base_url: str) -> str:
    """Where the OIDC issuer sends the browser back."""
    return base_url.rstrip("/") + "/oidc/callback"
