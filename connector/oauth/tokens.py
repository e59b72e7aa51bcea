"""Self-contained access tokens for /mcp.

An access token is the JSON of its claims sealed with AES-256-GCM under a key
derived (HKDF-SHA256) from the connector's state key. Sealing, not signing:
the claims carry the bearer the connector presents to the store, which the
MCP client must never be able to read. Any replica holding the same state key
can verify a token without shared memory, so restarts keep sessions.
"""

from __future__ import annotations

import base64
import hmac
import os
import time
from dataclasses import dataclass, field

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

ACCESS_TOKEN_TTL_S = 3600
TOKEN_PREFIX = "bca1_"  # "brain connector access", format version 1
_NONCE_BYTES = 12
_HKDF_INFO = b"brain-connector access-token v1"
# Refuse absurd inputs before any base64 or crypto work.
_MAX_TOKEN_CHARS = 16_384


@dataclass(frozen=True)
class AccessClaims:
    """What an access token says about its holder.

    ``sub`` is the connector's subject (``static:<user id>``, ``oidc:<iss>|<sub>``
    or ``dev:local``); ``aud`` the resource (``<base>/mcp``); ``exp`` the expiry
    in seconds since the epoch; ``store_credential`` the bearer used at the store.
    ``family`` names the refresh-token family the token was minted for (empty
    when none), so a revoked family can be refused by the server.
    """

    sub: str
    scope: frozenset[str]
    aud: str
    exp: int
    client_id: str
    client_name: str
    idp: str
    store_credential: str
    family: str = ""
    iat: int = field(default_factory=lambda: int(time.time()))
    # For a token of one brain's URL: that brain's id, resolved from the URL's name when the
    # sign-in completed ("" when it could not be, and for <base>/mcp). The connection stays on
    # this brain whatever is created or shared later under the same name.
    brain_id: str = ""

    def has_scope(self, scope: str) -> bool:
        """True when the token grants ``scope``."""
        return scope in self.scope


class _Wire(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Compact on-the-wire form of AccessClaims (short keys keep tokens small; members at their
    default are left out, so a token without a bound brain reads at replicas that know no ``b``)."""

    s: str
    sc: list[str]
    a: str
    e: int
    c: str
    cn: str
    i: str
    k: str
    f: str = ""
    t: int = 0
    b: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Wire)


def derive_access_key(state_key: bytes) -> bytes:
    """The 32-byte AES key for access tokens, derived from the state key."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(state_key)


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class AccessTokenCodec:
    """Issues and verifies sealed access tokens.

    ``key`` is the connector's state key (any length, normally 32 bytes); the
    token key is derived from it, so the same state key on every replica
    yields tokens every replica accepts.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("state key too short")
        self._aead = AESGCM(derive_access_key(key))

    def issue(self, claims: AccessClaims) -> str:
        """Seal ``claims`` into an opaque bearer token."""
        wire = _Wire(
            s=claims.sub,
            sc=sorted(claims.scope),
            a=claims.aud,
            e=int(claims.exp),
            c=claims.client_id,
            cn=claims.client_name,
            i=claims.idp,
            k=claims.store_credential,
            f=claims.family,
            t=int(claims.iat),
            b=claims.brain_id,
        )
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, _encoder.encode(wire), TOKEN_PREFIX.encode("ascii"))
        return TOKEN_PREFIX + _b64encode(nonce + sealed)

    def open(self, token: str) -> AccessClaims | None:
        """The claims sealed in ``token`` (no expiry or audience check), or None."""
        if not isinstance(token, str) or len(token) > _MAX_TOKEN_CHARS or not token.startswith(TOKEN_PREFIX):
            return None
        try:
            raw = _b64decode(token[len(TOKEN_PREFIX) :])
        except (ValueError, TypeError):
            return None
        if len(raw) < _NONCE_BYTES + 16:
            return None
        try:
            plain = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], TOKEN_PREFIX.encode("ascii"))
            wire = _decoder.decode(plain)
        except (InvalidTag, msgspec.DecodeError, msgspec.ValidationError):
            return None
        return AccessClaims(
            sub=wire.s,
            scope=frozenset(wire.sc),
            aud=wire.a,
            exp=wire.e,
            client_id=wire.c,
            client_name=wire.cn,
            idp=wire.i,
            store_credential=wire.k,
            family=wire.f,
            iat=wire.t,
            brain_id=wire.b,
        )

    def verify(self, token: str, audience: str | tuple[str, ...], now: float | None = None) -> AccessClaims | None:
        """The claims of a genuine, unexpired token issued for ``audience`` (or one of them), else None."""
        claims = self.open(token)
        if claims is None:
            return None
        current = time.time() if now is None else now
        if claims.exp <= current:
            return None
        wanted = (audience,) if isinstance(audience, str) else audience
        aud = claims.aud.encode("utf-8")
        # Every audience compared (no early exit): the time says nothing about which one matched.
        matches = [hmac.compare_digest(aud, one.encode("utf-8")) for one in wanted]
        return claims if any(matches) else None


def bearer_challenge(metadata_url: str, scope: str, error: str | None = None) -> str:
    """The WWW-Authenticate value of a 401 from /mcp: where the RFC 9728 metadata is, the scopes
    to ask for (MCP authorization 2025-11-25), and ``error`` only when a token was presented
    (RFC 6750 section 3.1: a request without credentials gets no error code)."""
    challenge = f'Bearer resource_metadata="{metadata_url}", scope="{scope}"'
    return challenge + (f', error="{error}"' if error else "")
