"""Authorization codes that any replica can redeem, once.

A code is a random value (32 bytes) naming a record of everything its token
request must match (client, redirect URI, PKCE challenge, resource, scope) and the
identity it grants. The record is kept in ``SealedDocs``: one document per code under
``codes/`` in the connector's state, sealed under the state key and named by a hash of
the code, so the replica that issued a code need not be the one that redeems it.
Redeeming *takes* the record (the store's take-exactly-once), so a code is used once
whatever happens next. Codes expire after 60 s; older documents are pruned. The store
credential never travels in the redirect URL: the code is only a random name.

A redeemed code leaves a marker naming the refresh family it started, for the rest of its
60 s: a second use of the code means it leaked (RFC 6749 section 4.1.2), so the server
revokes what the first use was given.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from connector.identity.base import Identity
from connector.state.memory import MemoryStore
from connector.state.sealed import SealedDocs
from connector.state.sealing import SecretBox

CODE_TTL_S = 60.0
CODE_KIND = "authorization-code"
CODES_PLACE = "codes"
# Codes waiting for their token request, at most (beyond it the oldest are dropped: their sign-ins start again).
MAX_CODES = 10_000
_MAX_CODE_CHARS = 100
# The key of a redeemed code's marker (codes are base64url, so no code is named like one).
_SPENT = "spent:"


@dataclass(frozen=True)
class Code:
    """An issued authorization code and everything it is bound to."""

    client_id: str
    client_name: str
    redirect_uri: str
    redirect_explicit: bool
    challenge: str
    resource: str
    scope: frozenset[str]
    identity: Identity
    expires: float


class CodeStore:
    """Issues codes and redeems each once, at any replica sharing where they are kept."""

    def __init__(self, records: SealedDocs) -> None:
        """``records``: where codes are kept (``OAuthState.sealed(CODES_PLACE, CODE_KIND, ...)``)."""
        self._records = records

    @classmethod
    def in_memory(cls, box: SecretBox, *, clock: Callable[[], float] = time.time) -> CodeStore:
        """Codes in this process's memory (a connector without shared state)."""
        return cls(SealedDocs(MemoryStore(), CODES_PLACE, box, CODE_KIND, ttl_s=CODE_TTL_S, capacity=MAX_CODES,
                              clock=clock))

    def issue(self, code: Code) -> str:
        """A new code value for ``code`` (blocking: a small file write; call it off the event loop)."""
        value = secrets.token_urlsafe(32)
        identity = code.identity
        record: dict[str, Any] = {
            "client_id": code.client_id,
            "client_name": code.client_name,
            "redirect_uri": code.redirect_uri,
            "redirect_explicit": code.redirect_explicit,
            "challenge": code.challenge,
            "resource": code.resource,
            "scope": sorted(code.scope),
            "subject": identity.subject,
            "store_credential": identity.store_credential,
            "renewal_secret": identity.renewal_secret,
            "credential_expires_at": identity.credential_expires_at,
            "expires": code.expires,
        }
        self._records.put(value, record, code.expires)
        return value

    def redeem(self, value: str | None) -> Code | None:
        """The code named ``value``, taken (never usable again), or None when unknown, used or expired.

        Blocking (a rename and a read): call it off the event loop.
        """
        if not value or len(value) > _MAX_CODE_CHARS or value.startswith(_SPENT):
            return None  # (a marker is never a code: presenting one must not take it away)
        record = self._records.take(value)
        if record is None:
            return None
        try:
            expires_at = record["credential_expires_at"]
            return Code(
                client_id=str(record["client_id"]),
                client_name=str(record["client_name"]),
                redirect_uri=str(record["redirect_uri"]),
                redirect_explicit=bool(record["redirect_explicit"]),
                challenge=str(record["challenge"]),
                resource=str(record["resource"]),
                scope=frozenset(str(scope) for scope in record["scope"]),
                identity=Identity(
                    subject=str(record["subject"]),
                    store_credential=str(record["store_credential"]),
                    renewal_secret=str(record["renewal_secret"]),
                    credential_expires_at=None if expires_at is None else float(expires_at),
                ),
                expires=float(record["expires"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def mark_spent(self, value: str, family_id: str, expires: float) -> None:
        """Remember until ``expires`` (the code's own expiry) that ``value`` started ``family_id``.

        Blocking (a small write): call it off the event loop.
        """
        self._records.put(_SPENT + value, {"family": family_id}, expires)

    def spent_family(self, value: str | None) -> str | None:
        """The family a code already redeemed started, while its marker lives; else None.

        Blocking (a small read): call it off the event loop.
        """
        if not value or len(value) > _MAX_CODE_CHARS:
            return None
        record = self._records.get(_SPENT + value)
        family = record.get("family") if record is not None else None
        return family if isinstance(family, str) and family else None
