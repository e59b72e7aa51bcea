"""Web app sessions: a random cookie value, kept server-side only as its SHA-256.

A session holds what the app needs to act for the person (their subject and the
store credential their identity provider gave) and whether the sign-in was
read-only. Sessions live in this process's memory with a bounded lifetime and a
bounded count: a restart (or another replica) signs everyone out, which is the
safe direction. Sign-out deletes the record, so a copied cookie stops working.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from connector.workcopy.model import Account

COOKIE_BYTES = 32
MAX_SESSIONS = 10_000
CLIENT_NAME = "web app"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


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
    """Create, look up and end sessions; only hashes of cookie values are kept."""

    def __init__(self, ttl_s: float, *, clock: Callable[[], float] = time.time, capacity: int = MAX_SESSIONS) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._capacity = capacity
        self._records: OrderedDict[str, WebSession] = OrderedDict()

    def create(self, *, subject: str, credential: str, kind: str, read_only: bool,
               credential_expires_at: float | None = None) -> tuple[str, WebSession]:
        """A new session; returns the cookie value (shown to the browser once) and the record."""
        now = self._clock()
        self._expire(now)
        expires = now + self._ttl_s
        if credential_expires_at is not None:
            # An identity whose store credential expires (an OIDC ID token) cannot outlive it here.
            expires = min(expires, credential_expires_at)
        cookie = secrets.token_urlsafe(COOKIE_BYTES)
        session = WebSession(subject=subject, credential=credential, kind=kind, read_only=read_only,
                             csrf=secrets.token_urlsafe(32), expires_at=expires)
        self._records[_digest(cookie)] = session
        while len(self._records) > self._capacity:
            self._records.popitem(last=False)  # the oldest sign-in goes first
        return cookie, session

    def get(self, cookie: str | None) -> WebSession | None:
        """The live session for a cookie value, else None (unknown, expired or ended)."""
        if not cookie or len(cookie) > 200:
            return None
        key = _digest(cookie)
        session = self._records.get(key)
        if session is None:
            return None
        if session.expires_at <= self._clock():
            del self._records[key]
            return None
        return session

    def end(self, cookie: str | None) -> bool:
        """Sign out: forget the session server-side. True when one was ended."""
        if not cookie:
            return False
        return self._records.pop(_digest(cookie), None) is not None

    def _expire(self, now: float) -> None:
        for key in [key for key, session in self._records.items() if session.expires_at <= now]:
            del self._records[key]

    def __len__(self) -> int:
        return len(self._records)
