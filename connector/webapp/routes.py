"""The web app's routes under ``/app``: thin handlers over `WebApp`.

Each handler finds the session, checks what must be checked (CSRF and origin on
every POST, write access on every write), asks the views or actions, and turns
the answer into a page or a redirect. The app is mounted by ``connector/app.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from http.cookies import CookieError, SimpleCookie
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote, urlencode

from litestar import Request, Response, get, post
from litestar.datastructures import Cookie

from connector.engine.format.brain import Brain
from connector.engine.format.jsvalues import parse_iso_ms
from connector.engine.kinds import operation_from_dict
from connector.engine.tending.similar import Incoming
from connector.engine.writes.memorize import MAX_CONTENT_CHARS, is_memory_id
from connector.engine.writes.ops import Memorize
from connector.i18n import N_, Text, gettext, message_of, not_this_address
from connector.identity.base import ProviderRefused, ProviderThrottled, ProviderUnavailable
from connector.mcp.http import header, path_segment, peer_address
from connector.oauth.signin_limit import SignInChecks, signin_limiter, signin_wait
from connector.oauth.state import OAuthState
from connector.state.memory import MemoryStore
from connector.state.sealed import SealedDocs
from connector.state.sealing import SecretBox
from connector.webapp.actions import ActionRefused, BrainActions, Done, old_version_refusal
from connector.webapp.brains import BrainAdmin
from connector.webapp.guard import (Site, new_signin_token, return_target, same_origin, session_of, site_of,
                                    tokens_match)
from connector.webapp.mental import MentalViews
from connector.webapp.thinking import NEEDS_MODEL, ThinkingViews
from connector.webapp.pages import STATIC_TYPES, page_headers, render, static_file
from connector.webapp.review import ReviewViews
from connector.webapp.sessions import MAX_SESSIONS, WebSession, WebSessions
from connector.imports.errors import ImportRefused
from connector.imports.files import Upload
from connector.imports.load import FORMATS as IMPORT_FORMATS
from connector.imports.load import extracted, read_upload
from connector.imports.plan import ImportPlan, dry_run, plan_import
from connector.webapp.transfer import MAX_IMPORT_BYTES, check_holdable, export_disposition, export_memories, export_zip
from connector.webapp.views import CURRENT_VERSION, MODE_LABELS, TYPES, BrainViews, SearchForm, SearchResult
from connector.workcopy.core import BrainUnavailable, SignInAgain
from connector.workcopy.model import Account
from connector.workcopy.store_client import StoreUnauthorized
from common.limits import TrustedProxies, client_address

log = logging.getLogger("connector.webapp")

MAX_FORM_BYTES = 256 * 1024
# A form carrying a memory's text (or text to extract from): 50,000 characters of Chinese or
# Japanese are 150 KB of UTF-8 and 450 KB once the browser percent-encodes them (600 KB for
# emoji or 𠮷, four bytes each). Held to the 256 KB of other forms, a Japanese note of 30,000
# characters was answered with a bare 413 instead of being saved.
MAX_TEXT_FORM_BYTES = MAX_CONTENT_CHARS * 12 + MAX_FORM_BYTES
SIGNIN_COOKIE_AGE_S = 3600
MEMORY_ACTIONS = ("pin", "unpin", "forget", "restore", "approve", "reject")
# What the page says after an action; chosen from this table, never echoed from the request.
DONE_MESSAGES = {
    "pin": N_("Pinned."), "unpin": N_("Unpinned."), "forget": N_("Forgotten: moved to the archive."),
    "not_pinned": N_("This memory was not pinned; nothing changed."),
    "restore": N_("Restored from the archive."), "approve": N_("Approved."), "reject": N_("Rejected: moved to the archive."),
    "edit": N_("Saved as a new memory that supersedes the old one."), "brain": N_("Brain switched."),
    "import": N_("Imported."), "snapshot": N_("Snapshot restored: the brain is as it was then."),
    "new": N_("Saved."),
    "keep_new": N_("Kept the new memory: the old one is superseded."),
    "keep_old": N_("Kept the old memory: the new one is in the archive (restorable)."),
    "merge": N_("Merged into one new memory that supersedes both."),
    "dismiss": N_("Marked as not the same: you will not be asked about this pair again."),
    "refreshed": N_("Refreshed: the model was rewritten from your memories."),
    "deleted": N_("Mental model deleted; the memories it cited stay."),
    "created": N_("Mental model created. It has no text until it is refreshed."),
    "brain_created": N_("Brain created."),
    "brain_renamed": N_("Brain renamed."),
    "brain_deleted": N_("Brain deleted. The store keeps its memories and snapshots; its operator can bring it back."),
}
IMPORT_TTL_S = 900.0
# Imported memories the dry run gives the whole similar check (vectors); every memory gets the
# exact-duplicate check, whatever the count (connector/imports/plan.py).
SIMILAR_CHECKED = 500
OIDC_PENDING_TTL_S = 600.0
MAX_OIDC_PENDING = 1000
HELD_NOTE = N_("Saved here, not yet synced to the store; it will be pushed automatically.")
ENDED_MESSAGE = N_("Your brain store no longer accepts this sign-in (its token was changed or removed, "
                 "or the agent key was revoked). Sign in again.")


class WebApp:
    """The web app's state: sessions, sign-in provider, views and actions."""

    def __init__(self, settings: Any, *, manager: Any, tools: Any, provider: Any, state: OAuthState | None = None,
                 signin_checks: SignInChecks | None = None) -> None:
        """``state`` (the connector's) keeps sessions, OIDC sign-ins in flight and checked imports
        in its directory, so a browser's next request may land on any replica sharing it;
        ``signin_checks`` is the OAuth page's budget of sign-in attempts per address (shared)."""
        self.settings = settings
        self.provider = provider
        self.sessions = WebSessions(settings.webapp_session_ttl_ms / 1000.0, state=state)
        # Where a signed-in person's store credential is kept (the sign-in page says which).
        self.sessions_on_disk = state is not None and state.persistent
        self.views = BrainViews(manager, tools)
        self.actions = BrainActions(manager, tools)
        self.brains = BrainAdmin(manager)
        self.review = ReviewViews(self.views)
        self.mental = MentalViews(tools.mental)
        self.thinking = ThinkingViews(tools.mental.thinking)
        self._trusted = TrustedProxies.parse(settings.trust_proxy)
        self._signin_checks = signin_checks if signin_checks is not None else signin_limiter(
            None, settings.signin_attempts_per_min)
        # Checked imports waiting for the person's confirmation: one per session (keyed by its CSRF token).
        self._imports = self._sealed(state, "web-imports", "web-import", ttl_s=IMPORT_TTL_S, capacity=MAX_SESSIONS)
        # Sign-ins at the OIDC issuer in flight, by state: the browser's sign-in cookie, what to keep, read-only.
        self._oidc = self._sealed(state, "web-oidc", "web-oidc", ttl_s=OIDC_PENDING_TTL_S, capacity=MAX_OIDC_PENDING)

    @staticmethod
    def _sealed(state: OAuthState | None, place: str, kind: str, *, ttl_s: float,
                capacity: int) -> SealedDocs:
        """Records every replica sharing ``state`` sees (this process's memory without one)."""
        if state is not None:
            return state.sealed(place, kind, ttl_s=ttl_s, capacity=capacity)
        return SealedDocs(MemoryStore(), place, SecretBox(secrets.token_bytes(32)), kind, ttl_s=ttl_s,
                          capacity=capacity)

    def keep_oidc(self, state: str, browser: str, keep: dict[str, Any], read_only: bool, target: str = "") -> None:
        """Remember a sign-in sent to the issuer, bound to this browser's sign-in cookie (and the
        page of the app to return to, already checked by ``return_target``)."""
        record = {"browser": browser, "keep": keep, "read_only": read_only, "next": target}
        self._oidc.put(state, record, time.time() + OIDC_PENDING_TTL_S)

    def take_oidc(self, state: str | None, browser: str | None) -> tuple[dict[str, Any], bool, str] | None:
        """The sign-in this callback finishes (once), only in the browser that started it."""
        if not state or len(state) > 200:
            return None
        held = self._oidc.get(state)
        # Another browser presenting the callback neither finishes nor spends this sign-in.
        if held is None or not tokens_match(browser, str(held.get("browser", ""))):
            return None
        held = self._oidc.take(state)  # once, even with the same callback at two replicas
        if held is None:
            return None
        return dict(held["keep"]), bool(held["read_only"]), str(held.get("next") or "")

    @property
    def operator_model(self) -> Any:
        """The operator's model (CONNECTOR_MODEL_URL) conversations are extracted with, or None."""
        return self.views.tools.mental.thinking.model

    def keep_import(self, session: WebSession, plan: ImportPlan, brain_id: str | None) -> str:
        """Hold a checked import until it is confirmed (replacing this session's last one); its reference.
        ``brain_id`` is the brain it was checked against (None: the account had none yet)."""
        reference = secrets.token_urlsafe(16)
        record = {"reference": reference, "operation": plan.operation().to_dict(), "brain": brain_id}
        self._imports.put(session.csrf, record, time.time() + IMPORT_TTL_S)
        return reference

    def take_import(self, session: WebSession, reference: str | None) -> tuple[ImportPlan, str | None] | None:
        """The held import of this session (once) and the brain it was checked against, or None."""
        held = self._imports.get(session.csrf)
        if held is None or not tokens_match(reference, str(held.get("reference", ""))):
            return None
        held = self._imports.take(session.csrf)
        if held is None:
            return None
        operation = operation_from_dict(held["operation"])
        if not isinstance(operation, Memorize):  # only keep_import writes these records
            return None
        checked = held.get("brain")
        return (ImportPlan(inputs=operation.memories, ids=list(operation.ids or [])),
                checked if isinstance(checked, str) else None)

    # ----- helpers ----------------------------------------------------------------

    def site(self, request: Request[Any, Any, Any]) -> Site:
        """Where the app lives for this request."""
        return self.site_of_scope(request.scope)

    def session_subject(self, scope: dict[str, Any]) -> str | None:
        """The subject of the live session this request's cookie names, else None (connector/affinity.py)."""
        cookies = SimpleCookie()
        try:
            cookies.load(header(scope, "cookie") or "")
        except CookieError:
            return None
        morsel = cookies.get(self.site_of_scope(scope).session_cookie)
        session = self.sessions.get(morsel.value) if morsel is not None else None
        return session.subject if session is not None else None

    def site_of_scope(self, scope: dict[str, Any]) -> Site:
        """Where the app lives for a request's ASGI scope."""
        return site_of(scope, self.settings.public_url, tuple(self.settings.trust_proxy))

    def client_address(self, request: Request[Any, Any, Any]) -> str:
        """The person's address: the right-most untrusted X-Forwarded-For hop behind a trusted proxy."""
        return client_address(peer_address(request.scope), request.headers.get("x-forwarded-for"), self._trusted)

    async def signin_retry_after(self, request: Request[Any, Any, Any]) -> float | None:
        """Sign-in attempts per client address are limited (token guessing), as on the OAuth page."""
        return await signin_wait(self._signin_checks, self.client_address(request))

    def page(self, template: str, site: Site, session: WebSession | None, *, status: int = 200,
             cookies: list[Cookie] | None = None, **context: Any) -> Response[str]:
        """A rendered page with the app's security headers."""
        if status >= 400:
            not_this_address()  # the language switch leads home, not back to what was refused
        html = render(template, root=site.root, session=session, sessions_on_disk=self.sessions_on_disk,
                      can_write=session is not None and not session.read_only, **context)
        return Response(html, status_code=status, media_type="text/html; charset=utf-8", headers=page_headers(),
                        cookies=cookies or [])

    @staticmethod
    def redirect(location: str, cookies: list[Cookie] | None = None) -> Response[bytes]:
        """303 See Other (after a post the browser follows with a GET)."""
        return Response(b"", status_code=303, headers={"Location": location, "Cache-Control": "no-store"},
                        cookies=cookies or [])


@dataclass(frozen=True)
class Visit:
    """A signed-in request that passed its checks: where, who, and (for a post) its form."""

    site: Site
    session: WebSession
    form: dict[str, str]
    raw: Any  # the parsed form with its uploads (None for a page)


# The hidden field naming the brain a form was made for (macros.html's brain_field writes it).
BRAIN_FIELD = "for_brain"


class FormBrainRefused(Exception):
    """The brain a submitted form names is out of reach (unshared, deleted, never this person's):
    the form is refused (409) with the exception's message; nothing is read or written elsewhere."""

# The memories of pairs a decision closed with it that the review page names (the count is exact).
REVIEW_CLOSED_SHOWN = 20


def _flash(done: str | None, held: str | None) -> str | None:
    message = DONE_MESSAGES.get(done or "")
    if message and held == "1":
        return f"{gettext(message)} {gettext(HELD_NOTE)}"
    return gettext(message) if message else None


def _count(value: str | None) -> int:
    """A small count from a query parameter (0 when absent or not one)."""
    return int(value) if value and value.isdigit() and len(value) <= 6 else 0


def _in_brain(account: Account) -> dict[str, str]:
    """The query naming the brain ``account`` addresses (none for the brain in use)."""
    return {"brain": account.brain} if account.brain else {}


def _done_location(site: Site, action: str, done: Done, account: Account) -> str:
    """The memory's page after a write, in the brain the write went to."""
    query = {"done": action, **({} if done.synced else {"held": "1"}), **_in_brain(account)}
    return f"{site.root}/memory/{path_segment(done.memory_id)}?{urlencode(query)}"


def _asked_page(site: Site, request: Request[Any, Any, Any]) -> str:
    """The app page this request asked for, as a path under ``site.root`` with its query."""
    path = str(request.scope.get("path", ""))
    query = request.scope.get("query_string", b"").decode("latin-1")
    return site.root + path.removeprefix("/app") + (f"?{query}" if query else "")


def webapp_route_handlers(app: WebApp) -> list[Any]:
    """Litestar handlers of every ``/app`` route."""

    async def guarded_post(request: Request[Any, Any, Any], *, write: bool) -> Visit | Response[Any]:
        """The session and form of a state-changing request, or the refusal to send."""
        site = app.site(request)
        _, session = await session_of(request.cookies, site, app.sessions)
        if session is None:
            return app.page("error.html", site, None, status=401, title=N_("Signed out"),
                            message=N_("Your session has ended. Sign in again."))
        raw = await request.form()
        form = {key: value for key, value in raw.items() if isinstance(value, str)}
        if not same_origin(request.headers, site) or not session.csrf_ok(form.get("csrf")):
            return app.page("error.html", site, session, status=403, title=N_("Request refused"),
                            message=N_("This request did not come from this app's own page, so nothing was changed."))
        if write and session.read_only:
            return app.page("error.html", site, session, status=403, title=N_("Read-only sign-in"),
                            message=N_("This sign-in is read-only: it cannot change memories. Sign in with write access."))
        return Visit(site, session, form, raw)

    # ----- sign-in -----------------------------------------------------------------

    @get("/app/signin", cache=False, include_in_schema=False)
    async def signin_page(request: Request[Any, Any, Any]) -> Response[Any]:
        site = app.site(request)
        _, session = await session_of(request.cookies, site, app.sessions)
        target = return_target(site, request.query_params.get("next"))
        if session is not None:
            return app.redirect(target or site.root)
        token = new_signin_token()
        ended = request.query_params.get("ended") == "1"
        return app.page("signin.html", site, None, csrf=token, provider=app.provider.kind,
                        error=ENDED_MESSAGE if ended else None,
                        signed_out=request.query_params.get("out") == "1", next=target or "",
                        cookies=[site.cookie(site.signin_cookie, token, SIGNIN_COOKIE_AGE_S)])

    def signin_again(site: Site, status: int, error: str, target: str | None = None) -> Response[Any]:
        token = new_signin_token()
        return app.page("signin.html", site, None, status=status, csrf=token, provider=app.provider.kind,
                        error=error, signed_out=False, next=return_target(site, target) or "",
                        cookies=[site.cookie(site.signin_cookie, token, SIGNIN_COOKIE_AGE_S)])

    def signed_in(site: Site, identity: Any, read_only: bool, target: str | None = None) -> Response[Any]:
        cookie, _ = app.sessions.create(
            subject=identity.subject, credential=identity.store_credential, kind=app.provider.kind,
            read_only=read_only, credential_expires_at=identity.credential_expires_at)
        log.info("web sign-in", extra={"kind": app.provider.kind, "read_only": read_only})
        max_age = int(app.settings.webapp_session_ttl_ms / 1000)
        # Back to the page the person was going to (checked again: only a page of this app).
        return app.redirect(return_target(site, target) or site.root, cookies=[
            site.cookie(site.session_cookie, cookie, max_age),
            site.cookie(site.signin_cookie, "", 0),
        ])

    @get("/app/signin/start", cache=False, include_in_schema=False)
    async def signin_start(request: Request[Any, Any, Any]) -> Response[Any]:
        """Off to the organisation's issuer (redirect providers); the callback comes back here."""
        site = app.site(request)
        browser = request.cookies.get(site.signin_cookie)
        if app.provider.mode != "redirect" or not browser:
            return app.redirect(f"{site.root}/signin")
        if await app.signin_retry_after(request) is not None:
            return signin_again(site, 429, N_("Too many sign-in attempts from here. Wait a minute and try again."))
        try:
            start = await app.provider.start(f"{site.origin}{site.root}/oidc/callback")
        except ProviderUnavailable:
            return signin_again(site, 503, N_("Your organisation's sign-in cannot be reached right now. Try again shortly."))
        app.keep_oidc(start.state, browser, start.keep, request.query_params.get("access") == "read",
                      return_target(site, request.query_params.get("next")) or "")
        return Response(b"", status_code=303, headers={"Location": start.url, "Cache-Control": "no-store"})

    @get("/app/oidc/callback", cache=False, include_in_schema=False)
    async def oidc_callback(request: Request[Any, Any, Any]) -> Response[Any]:
        site = app.site(request)
        params = request.query_params
        pending = app.take_oidc(params.get("state"), request.cookies.get(site.signin_cookie))
        if pending is None or app.provider.mode != "redirect":
            return signin_again(site, 400, N_("This sign-in expired or was started in another browser. Please try again."))
        keep, read_only, target = pending
        if params.get("error") or not params.get("code"):
            return signin_again(site, 401, N_("Your organisation's sign-in did not let you in."))
        try:
            identity = await app.provider.finish(params.get("code"), f"{site.origin}{site.root}/oidc/callback", keep)
        except ProviderRefused:
            return signin_again(site, 401, N_("Your organisation's sign-in did not let you in."))
        except ProviderUnavailable:
            return signin_again(site, 503, N_("Your organisation's sign-in cannot be reached right now. Try again shortly."))
        return signed_in(site, identity, read_only, target)

    @post("/app/signin", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    async def signin_submit(request: Request[Any, Any, Any]) -> Response[Any]:
        site = app.site(request)
        form = {key: value for key, value in (await request.form()).items() if isinstance(value, str)}
        expected = request.cookies.get(site.signin_cookie)
        target = form.get("next")

        if not same_origin(request.headers, site) or not tokens_match(form.get("csrf"), expected):
            return signin_again(site, 403, N_("The sign-in form expired or came from another site. Please try again."), target)
        if app.provider.kind == "static" and not (form.get("token") or "").strip():
            # An empty field tried no token: it does not take one of the address's attempts.
            return signin_again(site, 400, N_("Enter your token."), target)
        if await app.signin_retry_after(request) is not None:
            return signin_again(site, 429, N_("Too many sign-in attempts from here. Wait a minute and try again."), target)
        if app.provider.mode != "page":
            return signin_again(site, 400, N_("Use the button to sign in with your organisation."), target)
        try:
            # The person's address goes to the store, which limits wrong tokens per address
            # (not per connector, whose address carries every signed-in user's requests).
            identity = await app.provider.sign_in(form.get("token"), app.client_address(request))
        except ProviderThrottled:
            # Counted like a wrong token (the attempt was taken above): never a free retry.
            return signin_again(site, 429, N_("Your brain store refuses more sign-in attempts from your network for now. "
                                           "Wait a minute and try again."), target)
        except ProviderRefused:
            return signin_again(site, 401, N_("That token was not accepted by your brain store. A token works only with the store that made it: "
                                                  "`brain-store user add` says which data directory it wrote to (for `make dev`, "
                                                  "add --data .dev-data/store)."), target)
        except ProviderUnavailable:
            return signin_again(site, 503, N_("Your brain store cannot be reached right now. Try again shortly."), target)
        return signed_in(site, identity, form.get("access") == "read", target)

    @post("/app/signout", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    async def signout(request: Request[Any, Any, Any]) -> Response[Any]:
        checked = await guarded_post(request, write=False)
        if isinstance(checked, Response):
            return checked
        site = checked.site
        app.sessions.end(request.cookies.get(site.session_cookie))
        return app.redirect(f"{site.root}/signin?out=1", cookies=[site.cookie(site.session_cookie, "", 0)])

    # ----- pages -------------------------------------------------------------------

    def page_route(handler: Callable[[Request[Any, Any, Any], Visit], Awaitable[Response[Any]]]) -> Any:
        """A GET page for a signed-in person: signed-out browsers go to the sign-in page."""

        async def route(request: Request[Any, Any, Any]) -> Response[Any]:
            site = app.site(request)
            _, session = await session_of(request.cookies, site, app.sessions)
            if session is None:
                # The sign-in page brings the person back here (``next``, checked there).
                asked = _asked_page(site, request)
                back = "" if asked in (site.root, site.root + "/") else f"?next={quote(asked, safe='')}"
                return app.redirect(f"{site.root}/signin{back}")
            return await unavailable_as_page(handler(request, Visit(site, session, {}, None)), site, session,
                                             request)

        route.__name__ = route.__qualname__ = handler.__name__
        return route

    def write_route(handler: Callable[[Request[Any, Any, Any], Visit], Awaitable[Response[Any]]]) -> Any:
        """A POST that changes the brain: session, CSRF, origin and write access checked first."""

        async def route(request: Request[Any, Any, Any]) -> Response[Any]:
            checked = await guarded_post(request, write=True)
            if isinstance(checked, Response):
                return checked
            return await unavailable_as_page(handler(request, checked), checked.site, checked.session, request)

        route.__name__ = route.__qualname__ = handler.__name__
        return route

    async def unavailable_as_page(answer: Awaitable[Response[Any]], site: Site, session: WebSession,
                                  request: Request[Any, Any, Any]) -> Response[Any]:
        try:
            return await answer
        except (SignInAgain, StoreUnauthorized):
            # The store refused this session's credential: the session ends here (and every
            # other using it, through the manager's hook), and the person is sent to sign in
            # instead of every page presenting the dead credential to the store again.
            app.sessions.end(request.cookies.get(site.session_cookie))
            return app.redirect(f"{site.root}/signin?ended=1", cookies=[site.cookie(site.session_cookie, "", 0)])
        except BrainUnavailable as exc:
            return app.page("error.html", site, session, status=503, title=N_("Brain unavailable"), message=message_of(exc))
        except FormBrainRefused as exc:
            return app.page("error.html", site, session, status=409, title=N_("Brain unavailable"), message=message_of(exc))

    def error_page(visit: Visit, status: int, title: str, message: str | Text) -> Response[Any]:
        """The error page with ``status``, ``title`` and ``message``."""
        return app.page("error.html", visit.site, visit.session, status=status, title=title, message=message)

    def read_only_refusal(visit: Visit) -> Response[Any]:
        """The page a read-only sign-in gets for a form that would change memories."""
        return error_page(visit, 403, N_("Read-only sign-in"),
                          N_("This sign-in is read-only: it cannot change memories."))

    def not_found(visit: Visit, message: str = N_("This brain has no memory with that id, live or archived.")) -> Response[Any]:
        return error_page(visit, 404, N_("No such memory"), message)

    def unknown_action(visit: Visit) -> Response[Any]:
        return error_page(visit, 404, N_("Unknown action"), N_("The app offers no such action."))

    async def page_account(visit: Visit, named: str | None) -> Account:
        """The account addressing one brain by id for a page and the forms on it: the brain a link
        names (``?brain=``), else the brain in use now. Its forms carry that id (`BRAIN_FIELD`), so
        what they write lands there even if another client switches the brain in use meanwhile."""
        if not named:
            return await app.actions.manager.pinned(visit.session.account)
        try:
            return await app.actions.addressed(visit.session.account, named)
        except ActionRefused as exc:  # shown as the brain being unavailable (a page, not a write)
            raise BrainUnavailable(message_of(exc)) from None

    async def form_account(visit: Visit) -> Account:
        """The account addressing the brain the submitted form was made for (its `BRAIN_FIELD`);
        the brain in use for a form without one. ActionRefused when that brain is out of reach."""
        return await app.actions.addressed(visit.session.account, visit.form.get(BRAIN_FIELD, ""))

    async def form_page_account(visit: Visit) -> Account:
        """`form_account` for a form answered with a page of its brain, by id (the brain in use now
        for a form naming none); `FormBrainRefused` when that brain is out of reach, never a page
        of another brain."""
        try:
            account = await form_account(visit)
        except ActionRefused as exc:
            raise FormBrainRefused(message_of(exc)) from None
        return account if account.brain else await app.actions.manager.pinned(account)

    @get(["/app", "/app/"], cache=False, include_in_schema=False)
    @page_route
    async def home(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        page = request.query_params.get("page") or "1"
        data = await app.views.home(visit.session.account, int(page) if page.isdigit() and len(page) < 7 else 1)
        review_waiting = await app.review.waiting(visit.session.account)
        params = request.query_params
        return app.page("home.html", visit.site, visit.session, home=data, review_waiting=review_waiting,
                        flash=_flash(params.get("done"), params.get("held")))

    @get("/app/search", cache=False, include_in_schema=False)
    @page_route
    async def search(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        params = request.query_params
        form = SearchForm(**{name: (params.get(name) or "").strip()[:2000]
                             for name in ("query", "type", "tag", "project", "as_of", "mode")})
        if not form.mode:
            form.mode = app.views.tools.recall_mode  # brain_recall's default: the server's setting
        elif form.mode not in MODE_LABELS:
            # A made-up mode searches nothing: the form comes back with the default and says why.
            form.mode = app.views.tools.recall_mode
            error = Text("Unknown recall mode: choose “%(exact)s” or “%(hybrid)s”.",
                         exact=gettext(MODE_LABELS["exact"]), hybrid=gettext(MODE_LABELS["hybrid"]))
            return app.page("search.html", visit.site, visit.session, status=400,
                            result=SearchResult(form=form, error=error), types=TYPES, modes=MODE_LABELS)
        if form.as_of and parse_iso_ms(form.as_of) is None:
            # A bookmarked or typed address can hold any text there: said in the page's language, nothing searched.
            error = Text("“%(value)s” is not a date: write it as 2026-03-01 (or 2026-03-01T09:30Z).", value=form.as_of)
            return app.page("search.html", visit.site, visit.session, status=400,
                            result=SearchResult(form=form, error=error), types=TYPES, modes=MODE_LABELS)
        result = await app.views.search(visit.session.account, form)
        return app.page("search.html", visit.site, visit.session, result=result, types=TYPES, modes=MODE_LABELS)

    @get("/app/memory/{memory_id:str}", cache=False, include_in_schema=False)
    @page_route
    async def memory(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        params = request.query_params
        account = await page_account(visit, params.get("brain"))
        view = await app.views.memory(account, request.path_params["memory_id"][:200])
        if view is None:
            return not_found(visit)
        # After an edit, what the new text repeats or updates elsewhere in the brain (as brain_memorize says).
        similar = (await app.views.similar_to(account, view.id)
                   if params.get("done") == "edit" and not view.archived else [])
        return app.page("memory.html", visit.site, visit.session, memory=view, error=None, offer_force=False,
                        flash=_flash(params.get("done"), params.get("held")), similar=similar,
                        page_brain=account.brain)

    @get("/app/memory/{memory_id:str}/edit", cache=False, include_in_schema=False)
    @page_route
    async def edit_page(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        if visit.session.read_only:
            return read_only_refusal(visit)
        account = await page_account(visit, request.query_params.get("brain"))
        view = await app.views.memory(account, request.path_params["memory_id"][:200])
        if view is None or view.archived:
            return not_found(visit, N_("Only memories in the brain (not in the archive) can be edited."))
        if view.superseded_by is not None:
            # An old version is history; the current one is what an edit would change.
            return error_page(visit, 409, N_("An old version"), old_version_refusal(view.superseded_by.id))
        return app.page("edit.html", visit.site, visit.session, memory=view, types=TYPES, error=None,
                        page_brain=account.brain)

    @get("/app/new", cache=False, include_in_schema=False)
    @page_route
    async def new_page(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        if visit.session.read_only:
            return read_only_refusal(visit)
        account = await page_account(visit, request.query_params.get("brain"))
        return app.page("new.html", visit.site, visit.session, types=TYPES, form={}, error=None,
                        page_brain=account.brain)

    @post("/app/new", request_max_body_size=MAX_TEXT_FORM_BYTES, include_in_schema=False)
    @write_route
    async def new_submit(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        form = visit.form
        try:
            account = await form_account(visit)
            done = await app.actions.create(account, title=form.get("title", ""),
                                            content=form.get("content", ""), type_=form.get("type", "learning"),
                                            tags=form.get("tags", ""))
        except ActionRefused as exc:
            # The form comes back as typed, for the same brain, with the reason; nothing was saved.
            return app.page("new.html", visit.site, visit.session, status=400, types=TYPES, form=form,
                            error=message_of(exc), page_brain=form.get(BRAIN_FIELD, "")[:200])
        return app.redirect(_done_location(visit.site, "new", done, account))

    @get("/app/archive", cache=False, include_in_schema=False)
    @page_route
    async def archive(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        account = await page_account(visit, request.query_params.get("brain"))
        lines = await app.views.archive(account)
        return app.page("archive.html", visit.site, visit.session, archived=lines, page_brain=account.brain)

    @get("/app/review", cache=False, include_in_schema=False)
    @page_route
    async def review(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        params = request.query_params
        account = await page_account(visit, params.get("brain"))
        data = await app.review.page(account)
        closed = _count(params.get("closed"))
        ids = [item for item in (params.get("with") or "").split(",")[:REVIEW_CLOSED_SHOWN] if is_memory_id(item)]
        closed_with = await app.review.lines(account, ids) if closed else []
        return app.page("review.html", visit.site, visit.session, review=data, error=None,
                        flash=_flash(params.get("done"), params.get("held")), closed=closed, closed_with=closed_with,
                        page_brain=account.brain)

    @get("/app/mental", cache=False, include_in_schema=False)
    @page_route
    async def mental_list(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        params = request.query_params
        account = await page_account(visit, params.get("brain"))
        data = await app.mental.listing(account)
        return app.page("mental.html", visit.site, visit.session, models=data, model=None, error=None,
                        flash=_flash(params.get("done"), params.get("held")), has_model=app.thinking.has_model,
                        needs_model=NEEDS_MODEL, form={}, page_brain=account.brain)

    @get("/app/mental/{model_id:str}", cache=False, include_in_schema=False)
    @page_route
    async def mental_model(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        params = request.query_params
        account = await page_account(visit, params.get("brain"))
        return await mental_page(visit, account, request.path_params["model_id"][:200], params.get("done"),
                                 params.get("held"))

    async def mental_page(visit: Visit, account: Account, model_id: str, done: str | None, held: str | None, *,
                          status: int = 200, error: str | None = None) -> Response[Any]:
        """One mental model of the brain ``account`` addresses; its forms act on that brain."""
        found = await app.mental.page(account, model_id)
        if found is None:
            return error_page(visit, 404, N_("No such mental model"),
                              N_("This brain has no mental model with that id (it may have been deleted)."))
        listing = await app.mental.listing(account)
        return app.page("mental.html", visit.site, visit.session, status=status, models=listing, model=found,
                        error=error, flash=_flash(done, held), has_model=app.thinking.has_model,
                        needs_model=NEEDS_MODEL, form={}, page_brain=account.brain)

    # ----- writes -------------------------------------------------------------------

    @post("/app/mental", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    @write_route
    async def mental_create(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        form = visit.form
        account = await form_page_account(visit)
        try:
            model_id, synced = await app.mental.create(account, form.get("name", ""), form.get("question", ""))
        except ActionRefused as exc:
            # The form comes back as typed, for the same brain, with the reason; nothing was written.
            data = await app.mental.listing(account)
            return app.page("mental.html", visit.site, visit.session, status=400, models=data, model=None,
                            error=message_of(exc), flash=None, has_model=app.thinking.has_model,
                            needs_model=NEEDS_MODEL, form=form, page_brain=account.brain)
        query = urlencode({"done": "created", **({} if synced else {"held": "1"}), **_in_brain(account)})
        return app.redirect(f"{visit.site.root}/mental/{path_segment(model_id)}?{query}")

    # ----- thinking: reflect and extract ----------------------------------------------------

    async def think_page(visit: Visit, account: Account, *, status: int = 200, **context: Any) -> Response[Any]:
        """The Think page of the brain ``account`` addresses: its forms reflect on and save into it."""
        context = {"reflection": None, "extraction": None, "error": None, "question": "", "form": {}, **context}
        return app.page("think.html", visit.site, visit.session, status=status, has_model=app.thinking.has_model,
                        needs_model=NEEDS_MODEL, viewer=await app.thinking.viewer(account), page_brain=account.brain,
                        **context)

    @get("/app/think", cache=False, include_in_schema=False)
    @page_route
    async def think(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        return await think_page(visit, await page_account(visit, request.query_params.get("brain")))

    @post("/app/think/reflect", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    async def think_reflect(request: Request[Any, Any, Any]) -> Response[Any]:
        # A read (any sign-in may reflect), but a POST with the CSRF and origin checks: it may spend the
        # operator's model, which another site must not make a signed-in browser do.
        checked = await guarded_post(request, write=False)
        if isinstance(checked, Response):
            return checked
        question = checked.form.get("question", "")

        async def answer() -> Response[Any]:
            account = await form_page_account(checked)
            try:
                reflection = await app.thinking.reflect(account, question)
            except ActionRefused as exc:
                return await think_page(checked, account, status=400, error=message_of(exc), question=question)
            return await think_page(checked, account, reflection=reflection, question=question)

        return await unavailable_as_page(answer(), checked.site, checked.session, request)

    @post("/app/think/extract", request_max_body_size=MAX_TEXT_FORM_BYTES, include_in_schema=False)
    @write_route
    async def think_extract(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        form = visit.form
        account = await form_page_account(visit)
        try:
            extraction = await app.thinking.extract(account, form.get("text", ""), form.get("title", ""))
        except ActionRefused as exc:
            # Nothing was written: the text comes back as pasted, for the same brain, with the reason.
            return await think_page(visit, account, status=409, error=message_of(exc), form=form)
        return await think_page(visit, account, extraction=extraction)

    @post("/app/mental/{model_id:str}/{action:str}", request_max_body_size=MAX_TEXT_FORM_BYTES, include_in_schema=False)
    @write_route
    async def mental_action(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        model_id, action = request.path_params["model_id"][:200], request.path_params["action"]
        if action not in ("refresh", "delete"):
            return unknown_action(visit)
        account = await form_page_account(visit)
        try:
            if action == "refresh":
                synced = await app.mental.refresh(account, model_id)
            else:
                synced = await app.mental.delete(account, model_id)
        except ActionRefused as exc:
            if action == "delete":
                return error_page(visit, 409, N_("Not deleted"), message_of(exc))
            return await mental_page(visit, account, model_id, None, None, status=409, error=message_of(exc))
        query = urlencode({"done": "refreshed" if action == "refresh" else "deleted", **({} if synced else {"held": "1"}),
                           **_in_brain(account)})
        target = f"/mental/{path_segment(model_id)}" if action == "refresh" else "/mental"
        return app.redirect(f"{visit.site.root}{target}?{query}")

    @post("/app/review", request_max_body_size=MAX_TEXT_FORM_BYTES, include_in_schema=False)
    @write_route
    async def review_decide(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        form = visit.form
        decision = form.get("decision", "")
        pair = (form.get("new", "")[:200], form.get("old", "")[:200])
        account = visit.session.account
        try:
            account = await form_account(visit)
            before = await app.review.open_pairs(account)
            done = await app.actions.decide(account, form.get("new", "")[:200], form.get("old", "")[:200],
                                            decision, title=form.get("title", ""), content=form.get("content", ""),
                                            type_=form.get("type", "learning"), tags=form.get("tags", ""))
        except ActionRefused as exc:
            data = await app.review.page(account)
            return app.page("review.html", visit.site, visit.session, status=409, review=data, error=message_of(exc),
                            flash=None, closed=0, closed_with=[], page_brain=account.brain)
        query = {"done": decision, **({} if done.synced else {"held": "1"}), **_in_brain(account)}
        # Pairs that closed with this one (their memory left the brain): the page names the other sides.
        after = set(await app.review.open_pairs(account))
        closed = [item for item in before if item != pair and item not in after]
        others = list(dict.fromkeys(side for item in closed for side in item if side not in pair))[:REVIEW_CLOSED_SHOWN]
        if closed:
            query |= {"closed": str(len(closed)), "with": ",".join(others)}
        return app.redirect(f"{visit.site.root}/review?{urlencode(query)}")

    @post("/app/memory/{memory_id:str}/edit", request_max_body_size=MAX_TEXT_FORM_BYTES, include_in_schema=False)
    @write_route
    async def edit_submit(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        memory_id, form = request.path_params["memory_id"][:200], visit.form
        account = visit.session.account
        try:
            account = await form_account(visit)
            done = await app.actions.edit(account, memory_id, title=form.get("title", ""),
                                          content=form.get("content", ""), type_=form.get("type", "learning"),
                                          tags=form.get("tags", ""))
        except ActionRefused as exc:
            view = await app.views.memory(account, memory_id) if account.brain or not form.get(BRAIN_FIELD) else None
            if view is None:
                return not_found(visit, message_of(exc))
            return app.page("edit.html", visit.site, visit.session, status=409, memory=view, types=TYPES,
                            error=message_of(exc), page_brain=account.brain)
        return app.redirect(_done_location(visit.site, "edit", done, account))

    @post("/app/memory/{memory_id:str}/{action:str}", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    @write_route
    async def memory_action(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        memory_id, action = request.path_params["memory_id"][:200], request.path_params["action"]
        if action not in MEMORY_ACTIONS:
            return unknown_action(visit)
        account = visit.session.account
        try:
            account = await form_account(visit)
            if action == "pin":
                done = await app.actions.pin(account, memory_id)
            elif action == "unpin":
                done = await app.actions.unpin(account, memory_id)
            elif action == "forget":
                done = await app.actions.forget(account, memory_id, force=visit.form.get("force") == "1")
            elif action == "restore":
                done = await app.actions.restore(account, memory_id)
            else:
                done = await app.actions.verify(account, memory_id, action)
        except ActionRefused as exc:
            view = await app.views.memory(account, memory_id) if account.brain or not visit.form.get(BRAIN_FIELD) else None
            if view is None:
                return not_found(visit, message_of(exc))
            return app.page("memory.html", visit.site, visit.session, status=409, memory=view, error=message_of(exc),
                            flash=None, offer_force=action == "forget" and "force" in message_of(exc),
                            page_brain=account.brain)
        said = action if done.changed else "not_pinned"  # an unpin that found no pin says so
        return app.redirect(_done_location(visit.site, said, done, account))

    async def brains_page(visit: Visit, *, status: int = 200, error: Any = None, done: str | None = None,
                          held: str | None = None) -> Response[Any]:
        entries = await app.brains.listing(visit.session.account)
        return app.page("brains.html", visit.site, visit.session, status=status, brains=entries, error=error,
                        flash=_flash(done, held), mcp_base=visit.site.origin + visit.site.root.removesuffix("/app"))

    @get("/app/brains", cache=False, include_in_schema=False)
    @page_route
    async def brains(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        return await brains_page(visit, done=request.query_params.get("done"))

    async def brain_changed(visit: Visit, change: Awaitable[Any], done: str, refused_status: int) -> Response[Any]:
        """The brains page again after a change: with what happened, or why nothing did."""
        try:
            await change
        except ActionRefused as exc:
            return await brains_page(visit, status=refused_status, error=message_of(exc))
        return app.redirect(f"{visit.site.root}/brains?done={done}")

    @post("/app/brains", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    @write_route
    async def brain_create(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        return await brain_changed(visit, app.brains.create(visit.session.account, visit.form.get("name", "")[:1000]),
                                   "brain_created", 400)

    @post("/app/brains/{brain_id:str}/rename", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    @write_route
    async def brain_rename(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        renamed = app.brains.rename(visit.session.account, request.path_params["brain_id"],
                                    visit.form.get("name", "")[:1000])
        return await brain_changed(visit, renamed, "brain_renamed", 400)

    @get("/app/brains/{brain_id:str}/delete", cache=False, include_in_schema=False)
    @page_route
    async def brain_delete_page(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        entry = await app.brains.find(visit.session.account, request.path_params["brain_id"])
        if entry is None or not entry.own:
            return error_page(visit, 404, N_("No such brain"), N_("This account owns no brain with that id."))
        return app.page("brain_delete.html", visit.site, visit.session, brain=entry, error=None)

    @post("/app/brains/{brain_id:str}/delete", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    @write_route
    async def brain_delete(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        if visit.form.get("confirm") != "yes":
            # Only the confirmation page's form deletes.
            return app.redirect(f"{visit.site.root}/brains/{path_segment(request.path_params['brain_id'])}/delete")
        deleted = app.brains.delete(visit.session.account, request.path_params["brain_id"])
        return await brain_changed(visit, deleted, "brain_deleted", 409)

    @post("/app/brain", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    @write_route
    async def use_brain(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        try:
            await app.actions.use_brain(visit.session.account, visit.form.get("brain", "")[:300])
        except ActionRefused as exc:
            return error_page(visit, 409, N_("Brain not switched"), message_of(exc))
        back = "/brains" if visit.form.get("back") == "brains" else ""
        return app.redirect(f"{visit.site.root}{back}?done=brain")

    # ----- export and import ----------------------------------------------------------

    @get("/app/transfer", cache=False, include_in_schema=False)
    @page_route
    async def transfer_page(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        return app.page("transfer.html", visit.site, visit.session, summary=None, reference=None, error=None,
                        chosen="auto")

    @get(["/app/export/memories.json", "/app/export/memories.zip"], cache=False, include_in_schema=False)
    @page_route
    async def export(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        snapshot = await app.actions.manager.snapshot(visit.session.account)
        brain = snapshot.brain or Brain()
        now = app.actions.manager.now()
        stamp = now.strftime("%Y%m%d-%H%M%S")
        headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
        if request.url.path.endswith(".zip"):
            data = await asyncio.to_thread(export_zip, brain)
            headers["Content-Disposition"] = export_disposition(snapshot.brain_name, stamp, "zip")
            return Response(data, media_type="application/zip", headers=headers)
        document = await asyncio.to_thread(export_memories, brain, brain_id=snapshot.brain_id,
                                           brain_name=snapshot.brain_name, now=now)
        headers["Content-Disposition"] = export_disposition(snapshot.brain_name, stamp, "json")
        body = json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8")
        return Response(body, media_type="application/json", headers=headers)

    @post("/app/import", request_max_body_size=MAX_IMPORT_BYTES + 64 * 1024, include_in_schema=False)
    @write_route
    async def import_preview(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        upload = visit.raw.get("file")
        chosen = visit.form.get("format") or "auto"
        if upload is None or isinstance(upload, str):
            return app.page("transfer.html", visit.site, visit.session, status=400, summary=None, reference=None,
                            error=N_("Choose a file to import."), chosen=chosen)
        payload = await upload.read()
        # One brain for the whole dry run (its plan and its similar memories), whatever is switched meanwhile.
        account = await app.actions.manager.pinned(visit.session.account)
        snapshot = await app.actions.manager.snapshot(account)
        now = app.actions.manager.now()
        if len(payload) > MAX_IMPORT_BYTES:
            plan = ImportPlan.refused([Text("The file is larger than %(mb)s MB.", mb=MAX_IMPORT_BYTES // 2**20)])
        else:
            try:
                name = str(upload.filename or "upload")[:200]
                found = await asyncio.to_thread(
                    lambda: read_upload(Upload.of_bytes(name, payload), chosen if chosen in IMPORT_FORMATS else None))
                # Conversations go through the operator's model here, once: the plan kept is what is confirmed.
                imported = await extracted(found, app.operator_model, now)
                plan = await asyncio.to_thread(plan_import, imported, snapshot.brain, now,
                                               similar=partial(app.views.tools.similar_for, snapshot),
                                               similar_limit=SIMILAR_CHECKED)
                if plan.inputs:  # what would be held until the confirmation (none: nothing is)
                    await asyncio.to_thread(check_holdable, plan.operation().to_dict())
            except ImportRefused as exc:
                plan = ImportPlan.refused(exc.reasons)
        summary = await asyncio.to_thread(dry_run, plan, snapshot.brain, now)
        # Off the loop: a checked import may be megabytes, sealed and written to the state directory.
        reference = (await asyncio.to_thread(app.keep_import, visit.session, plan, snapshot.brain_id)
                     if summary.new else None)
        # A file with nothing to import and errors is refused as such (400), the errors listed.
        status = 400 if summary.errors and not summary.new else 200
        # What the new memories repeat or update among those already here (the first ones checked).
        similar = await app.views.similar_to_new(account, [
            Incoming(memory.content, memory.title, memory.tags, memory.type) for memory in plan.inputs
        ]) if summary.new else []
        return app.page("transfer.html", visit.site, visit.session, status=status, summary=summary,
                        reference=reference, error=None, similar=similar, chosen=chosen, page_brain=account.brain)

    @post("/app/import/confirm", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    @write_route
    async def import_confirm(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        held = await asyncio.to_thread(app.take_import, visit.session, visit.form.get("reference"))
        if held is None:
            return app.page("transfer.html", visit.site, visit.session, status=409, summary=None, reference=None,
                            error=N_("That import expired or was already done. Upload the file again."))
        plan, checked_brain = held
        # The brain in use is the account's, shared with its MCP connections and other tabs: it may
        # change after the dry run (brain_use, the Brains page), even while this confirmation checks
        # the similar memories. The file was checked against one brain (what it skips, what it says)
        # and the person chose it: the write goes to that brain by id, never to another one, e.g. a
        # team's shared brain every member reads.
        try:
            account = await app.actions.addressed(visit.session.account, checked_brain or "")
            if checked_brain is None and (await app.actions.manager.snapshot(account)).brain_id is not None:
                # Checked before the account had a brain; it has one now (made or chosen elsewhere).
                return app.page("transfer.html", visit.site, visit.session, status=409, summary=None, reference=None,
                                error=N_("The brain in use changed since this file was checked; nothing was imported. "
                                         "Upload the file again to import it into the brain in use now."))
            done = await app.actions.import_memories(account, plan.operation())
        except ActionRefused as exc:
            return app.page("transfer.html", visit.site, visit.session, status=409, summary=None, reference=None,
                            error=message_of(exc))
        return app.redirect(f"{visit.site.root}?done=import" + ("" if done.synced else "&held=1"))

    # ----- history --------------------------------------------------------------------

    @get("/app/history", cache=False, include_in_schema=False)
    @page_route
    async def history(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        params = request.query_params
        account = await page_account(visit, params.get("brain"))
        name, versions = await app.views.history(account)
        current = await app.views.current_version(account)
        wanted = params.get("confirm")
        confirm = next((version for version in versions if version.name == wanted), None)
        return app.page("history.html", visit.site, visit.session, brain_name=name, versions=versions, error=None,
                        current=current, confirm=confirm, flash=_flash(params.get("done"), None),
                        page_brain=account.brain)

    @get("/app/history/changes", cache=False, include_in_schema=False)
    @page_route
    async def history_changes(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        """What one version changed from the version before it (consecutive versions)."""
        wanted = (request.query_params.get("version") or "")[:200]
        account = await page_account(visit, request.query_params.get("brain"))
        _, versions = await app.views.history(account)
        current = await app.views.current_version(account)
        listing = ([current] if current is not None else []) + versions  # newest first
        position = next((at for at, item in enumerate(listing) if item.name == wanted), None)
        if position is None:
            return error_page(visit, 404, N_("No such snapshot"),
                              N_("The store keeps no snapshot of this brain by that name."))
        record = listing[position]
        previous = listing[position + 1] if position + 1 < len(listing) else None
        changes = (await app.views.version_changes(account, record.name, previous.name)
                   if previous is not None else None)
        return app.page("history_changes.html", visit.site, visit.session, version=record, previous=previous,
                        changes=changes, current=record.name == CURRENT_VERSION, page_brain=account.brain)

    @get("/app/history/diff", cache=False, include_in_schema=False)
    @page_route
    async def history_diff(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        version = (request.query_params.get("version") or "")[:200]
        account = await page_account(visit, request.query_params.get("brain"))
        _, versions = await app.views.history(account)
        record = next((item for item in versions if item.name == version), None)
        changes = await app.views.diff(account, version) if record is not None else None
        if record is None or changes is None:
            return error_page(visit, 404, N_("No such snapshot"),
                              N_("The store keeps no snapshot of this brain by that name."))
        return app.page("history_diff.html", visit.site, visit.session, version=record, changes=changes,
                        page_brain=account.brain)

    @post("/app/history/restore", request_max_body_size=MAX_FORM_BYTES, include_in_schema=False)
    @write_route
    async def history_restore(request: Request[Any, Any, Any], visit: Visit) -> Response[Any]:
        try:
            account = await form_account(visit)
            await app.actions.restore_snapshot(account, visit.form.get("version", "")[:200])
        except ActionRefused as exc:
            return error_page(visit, 409, N_("Snapshot not restored"), message_of(exc))
        return app.redirect(f"{visit.site.root}/history?{urlencode({'done': 'snapshot', **_in_brain(account)})}")

    # ----- static files -----------------------------------------------------------------

    @get("/app/static/{name:str}", cache=False, include_in_schema=False)
    async def static(request: Request[Any, Any, Any]) -> Response[Any]:
        name = request.path_params["name"]
        data = static_file(name)
        if data is None:
            return Response(b"not found", status_code=404, media_type="text/plain")
        return Response(data, media_type=STATIC_TYPES[name],
                        headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})

    return [signin_page, signin_start, oidc_callback, signin_submit, signout, home, search, memory, edit_page, archive, edit_submit,
            new_page, new_submit, review, review_decide, mental_list, mental_model, mental_create, mental_action,
            think, think_reflect, think_extract,
            memory_action, use_brain, transfer_page, export, import_preview, import_confirm, history, history_diff,
            history_changes, history_restore, brains, brain_create, brain_rename, brain_delete_page, brain_delete,
            static]


def build_webapp(settings: Any, *, manager: Any, tools: Any, provider: Any,
                 state: OAuthState | None = None, signin_checks: SignInChecks | None = None) -> tuple[WebApp, list[Any]]:
    """The web app and its route handlers (``provider``: the connector's identity provider;
    ``state``: the connector's, shared by replicas; ``signin_checks``: the OAuth page's sign-in budget)."""
    web = WebApp(settings, manager=manager, tools=tools, provider=provider, state=state, signin_checks=signin_checks)
    return web, webapp_route_handlers(web)
