"""Authorization codes that any replica can redeem: sealed, self-contained, used once.

A code is everything its token request must match (client, redirect URI, PKCE
challenge, resource, scope) and the identity it grants, sealed with AES-256-GCM
under the state key, as access tokens and pending sign-ins are. The server keeps
nothing while a code waits for its token request, so a code issued by one
replica is redeemed at another. Single use is what needs sharing: redeeming
claims the code's random id in ``OnceMarkers`` (a marker file in the shared
state directory), and only the first claim gets tokens.

The code carries the store credential, like an access token does: sealed, it is
as opaque to the client (and to whatever logs its redirect URI) as the access
token it is exchanged for, and worthless after 60 s or one use.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from connector.identity.base import Identity
from connector.oauth.pending import open_fields, seal_fields
from connector.oauth.state import SecretBox

_CONTEXT = "authorization-code v1"


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
    code_id: str = ""


class CodeSeal:
    """Seals a ``Code`` into the value sent to the client's redirect URI, and opens it again."""

    def __init__(self, box: SecretBox) -> None:
        self._box = box

    def seal(self, code: Code) -> str:
        """The code value for ``code`` (given a fresh random id, which single use is tracked by)."""
        identity = code.identity
        fields: dict[str, Any] = {
            "j": secrets.token_urlsafe(16),
            "c": code.client_id,
            "n": code.client_name,
            "r": code.redirect_uri,
            "x": code.redirect_explicit,
            "p": code.challenge,
            "a": code.resource,
            "o": sorted(code.scope),
            "e": code.expires,
            "s": identity.subject,
            "k": identity.store_credential,
            "w": identity.renewal_secret,
            "t": identity.credential_expires_at,
        }
        return seal_fields(self._box, fields, _CONTEXT)

    def open(self, value: str | None, now: float) -> Code | None:
        """The code in ``value``; None when it is malformed, altered, foreign or expired."""
        fields = open_fields(self._box, value, _CONTEXT)
        if fields is None:
            return None
        try:
            expires_at = fields["t"]
            code = Code(
                code_id=str(fields["j"]),
                client_id=str(fields["c"]),
                client_name=str(fields["n"]),
                redirect_uri=str(fields["r"]),
                redirect_explicit=bool(fields["x"]),
                challenge=str(fields["p"]),
                resource=str(fields["a"]),
                scope=frozenset(str(scope) for scope in fields["o"]),
                expires=float(fields["e"]),
                identity=Identity(
                    subject=str(fields["s"]),
                    store_credential=str(fields["k"]),
                    renewal_secret=str(fields["w"]),
                    credential_expires_at=None if expires_at is None else float(expires_at),
                ),
            )
        except (ValueError, KeyError, TypeError):
            return None
        return code if code.expires > now and code.code_id else None
