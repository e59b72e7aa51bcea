"""Pending sign-ins carried by the browser, sealed, instead of kept in a server table.

A sign-in started at ``GET /authorize`` used to wait in a bounded in-memory table
for the sign-in page to be submitted (or the OIDC issuer to send the browser
back); strangers could fill that table and lock every real sign-in out. Now
everything the sign-in needs travels with the browser, sealed with AES-256-GCM
under the state key (so it can be neither read nor altered) and carrying its own
expiry: in the page's hidden ``login_id`` field, or, for OIDC, in a short-lived
cookie bound to the ``state`` sent to the issuer. Starting a sign-in therefore
costs the server nothing it has to keep, and any replica can finish it.

What the server still remembers (``SignInAttempts``) is how many wrong tokens a
sign-in has seen and which sign-ins are finished (completed, declined, or out of
attempts), so a sealed value cannot be submitted again. Only sign-ins with a
failure or an end are recorded, failures are limited per address, and losing a
record to the cap only ever gives that one sign-in its attempts back; the
per-address limit still applies. Each replica keeps its own records, so behind a
load balancer a sign-in gets at most three wrong tokens per replica (docs/replicas.md);
a completed sign-in is also claimed in the shared ``OnceDocs``, so it completes
once on every replica.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from connector.state.memory import MemoryStore
from connector.state.sealed import SealedDocs
from connector.state.sealing import SecretBox

_CONTEXT = "pending-sign-in v1"
# What SecretBox.seal writes; anything else (even what lenient base64 would read the same) is refused.
_SEALED = re.compile(r"sec1:(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?")
MAX_SEALED_CHARS = 16_384
MAX_TRACKED_SIGN_INS = 100_000
# Where the wrong-token counts of sign-ins are kept in the state, and for how long at most (a
# sign-in expires after 10 minutes).
ATTEMPTS_PLACE = "sign-in-tries"
ATTEMPTS_KIND = "sign-in-tries"
ATTEMPTS_TTL_S = 600.0


@dataclass(frozen=True)
class Pending:
    """A sign-in started at /authorize and not finished yet."""

    sign_in_id: str
    client_id: str
    client_name: str
    redirect_uri: str
    redirect_explicit: bool
    state: str | None
    challenge: str
    resource: str
    scope: frozenset[str]
    issuer: str
    expires: float
    # OIDC only: the state sent to the issuer (the callback must name it) and what the provider keeps.
    bound_to: str = ""
    keep: Mapping[str, Any] = field(default_factory=dict)


def cookie_name(oidc_state: str) -> str:
    """The cookie carrying the OIDC sign-in sent to the issuer with ``oidc_state``."""
    return "brain_signin_" + hashlib.sha256(oidc_state.encode("utf-8")).hexdigest()[:16]


def new_sign_in_id() -> str:
    """A random id naming one sign-in (for its attempt count)."""
    return secrets.token_urlsafe(16)


class PendingSeal:
    """Seals a ``Pending`` into a form value and opens it again."""

    def __init__(self, box: SecretBox) -> None:
        self._box = box

    def seal(self, pending: Pending) -> str:
        """The sealed form value of ``pending``."""
        fields: dict[str, Any] = {
            "i": pending.sign_in_id,
            "c": pending.client_id,
            "n": pending.client_name,
            "r": pending.redirect_uri,
            "x": pending.redirect_explicit,
            "s": pending.state,
            "p": pending.challenge,
            "a": pending.resource,
            "o": sorted(pending.scope),
            "u": pending.issuer,
            "e": pending.expires,
            "b": pending.bound_to,
            "k": dict(pending.keep),
        }
        return self._box.seal(json.dumps(fields, separators=(",", ":")), _CONTEXT)

    def open(self, value: str | None, now: float) -> Pending | None:
        """The pending sign-in in ``value``; None when it is malformed, altered, foreign or expired."""
        if not value or len(value) > MAX_SEALED_CHARS or not _SEALED.fullmatch(value):
            return None
        text = self._box.open(value, _CONTEXT)
        if text is None:
            return None
        try:
            fields = json.loads(text)
            pending = Pending(
                sign_in_id=str(fields["i"]),
                client_id=str(fields["c"]),
                client_name=str(fields["n"]),
                redirect_uri=str(fields["r"]),
                redirect_explicit=bool(fields["x"]),
                state=None if fields["s"] is None else str(fields["s"]),
                challenge=str(fields["p"]),
                resource=str(fields["a"]),
                scope=frozenset(str(scope) for scope in fields["o"]),
                issuer=str(fields["u"]),
                expires=float(fields["e"]),
                bound_to=str(fields["b"]),
                keep=dict(fields["k"]),
            )
        except (ValueError, KeyError, TypeError):
            return None
        return pending if pending.expires > now else None


class SignInAttempts:
    """Wrong tokens per sign-in id (``MAX_ATTEMPTS`` once it is finished), kept where the replicas
    share them (``OAuthState.sealed(ATTEMPTS_PLACE, ATTEMPTS_KIND, ...)``), so a sign-in gets its
    three tries in all, not three at each replica. Blocking (a small read or write of the state):
    call it off the event loop."""

    def __init__(self, records: SealedDocs) -> None:
        self._records = records

    @classmethod
    def in_memory(cls, box: SecretBox, *, clock: Callable[[], float] = time.time) -> SignInAttempts:
        """Counts in this process's memory (a connector without shared state)."""
        return cls(SealedDocs(MemoryStore(), ATTEMPTS_PLACE, box, ATTEMPTS_KIND, ttl_s=ATTEMPTS_TTL_S,
                              capacity=MAX_TRACKED_SIGN_INS, clock=clock))

    def count(self, sign_in_id: str) -> int:
        """The wrong tokens seen so far by this sign-in."""
        record = self._records.get(sign_in_id)
        count = record.get("count") if record is not None else 0
        return count if isinstance(count, int) and not isinstance(count, bool) else 0

    def set(self, sign_in_id: str, count: int, expires: float) -> None:
        """Remember ``count`` for this sign-in until ``expires`` (the sign-in's own expiry)."""
        self._records.put(sign_in_id, {"count": count}, expires)
