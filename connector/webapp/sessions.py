"""Web app sessions: a random cookie value, kept server-side only as its SHA-256.

A session holds what the app needs to act for the person (their subject and the
store credential their identity provider gave) and whether the sign-in was
read-only. Sessions have a bounded lifetime and a bounded count. They are documents
under ``web-sessions/`` in the connector's state (``SealedDocs``: named by the cookie's
hash, sealed under the state key; files 0600 in a state directory, objects in a bucket),
so a browser is signed in at every replica sharing the state and across restarts;
without a shared state they live in this process's memory. Sign-out deletes the record,
so a copied cookie stops working at every replica at once. A store credential the store
refused (rotated or removed user, revoked agent key) is remembered as ended (sealed,
under ``web-ended/``), so every session using it ends at its next request without
presenting the dead credential to the store again. A page reads its session with
``find``, in a thread: with the state in a bucket that is two requests to S3.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from connector.state.memory import MemoryStore
from connector.state.sealed import SealedDocs
from connector.state.sealing import SecretBox
from connector.workcopy.model import Account

COOKIE_BYTES = 32
MAX_SESSIONS = 10_000
CLIENT_NAME = "web app"
SESSIONS_PLACE = "web-sessions"
ENDED_PLACE = "web-ended"


@dataclass(frozen=True)
class WebSession:
    """One signed-in browser."""

    subject: str
    credential: str
    kind: str
    read_only: bool
    csrf: str
    expires_at: float

    @property
    def account(self) -> Account:
        """The caller the working-copy manager sees (as an MCP tool call would)."""
        return Account(subject=self.subject, credential=self.credential, kind=self.kind, client_name=CLIENT_NAME)

    def csrf_ok(self, presented: str | None) -> bool:
        """Constant-time check of a form's CSRF token against this session's."""
        return bool(presented) and hmac.compare_digest(presented.encode("utf-8"), self.csrf.encode("utf-8"))


class WebSessions:
    """Create, look up and end sessions; only hashes of cookie values name them."""

    def __init__(self, ttl_s: float, *, clock: Callable[[], float] = time.time, capacity: int = MAX_SESSIONS,
                 state: Any = None) -> None:
        """``state`` (the connector's ``OAuthState``, shared by replicas) keeps the sessions and the
        credentials the store refused; without it they live in this process."""
        self._ttl_s = ttl_s
        self._clock = clock
        self._records: SealedDocs
        self._ended: SealedDocs
        if state is not None:
            self._records = state.sealed(SESSIONS_PLACE, "web-session", ttl_s=ttl_s, capacity=capacity, clock=clock)
            # No session outlives ttl_s, so neither need the marks of the credentials it may hold.
            self._ended = state.sealed(ENDED_PLACE, "web-ended-credential", ttl_s=ttl_s, capacity=capacity,
                                       clock=clock)
        else:
            box, memory = SecretBox(secrets.token_bytes(32)), MemoryStore()
            self._records = SealedDocs(memory, SESSIONS_PLACE, box, "web-session", ttl_s=ttl_s, capacity=capacity,
                                       clock=clock)
            self._ended = SealedDocs(memory, ENDED_PLACE, box, "web-ended-credential", ttl_s=ttl_s,
                                     capacity=capacity, clock=clock)

    def create(self, *, subject: str, credential: str, kind: str, read_only: bool,
               credential_expires_at: float | None = None) -> tuple[str, WebSession]:
        """A new session; returns the cookie value (shown to the browser once) and the record."""
        expires = self._clock() + self._ttl_s
        if credential_expires_at is not None:
            # An identity whose store credential expires (an OIDC ID token) cannot outlive it here.
            expires = min(expires, credential_expires_at)
        cookie = secrets.token_urlsafe(COOKIE_BYTES)
        session = WebSession(subject=subject, credential=credential, kind=kind, read_only=read_only,
                             csrf=secrets.token_urlsafe(32), expires_at=expires)
        self._records.put(cookie, dataclasses.asdict(session), expires)
        # The store has just accepted the credential: a mark from an earlier refusal no longer holds.
        self._ended.delete(credential)
        return cookie, session

    def get(self, cookie: str | None) -> WebSession | None:
        """The live session for a cookie value, else None (unknown, expired or ended)."""
        if not cookie or len(cookie) > 200:
            return None
        record = self._records.get(cookie)
        if record is None:
            return None
        try:
            session = WebSession(subject=str(record["subject"]), credential=str(record["credential"]),
                                 kind=str(record["kind"]), read_only=bool(record["read_only"]),
                                 csrf=str(record["csrf"]), expires_at=float(record["expires_at"]))
        except (KeyError, TypeError, ValueError):
            return None
        if self._ended.get(session.credential) is not None:
            self._records.delete(cookie)
            return None
        return session

    async def find(self, cookie: str | None) -> WebSession | None:
        """``get`` run in a thread, for the event loop (the state may be a bucket)."""
        if not cookie or len(cookie) > 200:
            return None  # nothing to read
        return await asyncio.to_thread(self.get, cookie)

    def end_credential(self, credential: str) -> None:
        """The store refused ``credential``: every session using it ends at its next request."""
        self._ended.put(credential, {}, self._clock() + self._ttl_s)

    def end(self, cookie: str | None) -> bool:
        """Sign out: forget the session at every replica. True when one was ended."""
        if not cookie or len(cookie) > 200:
            return False
        return self._records.delete(cookie)

    def __len__(self) -> int:
        return len(self._records)
