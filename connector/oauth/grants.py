"""Refresh-token families: rotation, reuse detection and the replay grace window.

A family starts at a successful code exchange. Each refresh retires the token
presented and issues its successor; the family's window slides forward with
every use. Presenting a retired token revokes the whole family, except within
the grace window while the successor is still unused: then the same successor
is handed out again (a client retrying after a lost response).

Only SHA-256 hashes of refresh tokens are stored. A successor is derived from
its predecessor with HMAC under a key derived from the state key, so the grace
replay can return the same successor without ever storing it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from connector.identity.base import Identity
from connector.oauth.state import OAuthState
from connector.state.sealing import token_hash
from connector.oauth.tokens import ACCESS_TOKEN_TTL_S

REFRESH_PREFIX = "bcr1_"
_SUCCESSOR_INFO = b"brain-connector refresh successor v1"
_MAX_REFRESH_CHARS = 200
# Prune expired records at most this often (seconds).
_PRUNE_EVERY_S = 60.0


class RotationConflict(Exception):
    """The refresh token was retired by a concurrent request (or another replica)."""


@dataclass(frozen=True)
class Family:
    """One refresh-token family: a sign-in of one user at one client."""

    family_id: str
    client_id: str
    client_name: str
    subject: str
    scope: frozenset[str]
    resource: str
    idp: str
    store_credential: str
    renewal_secret: str
    credential_expires_at: float | None
    # The id of the brain the resource's URL named when the sign-in completed ("" for <base>/mcp).
    brain_id: str = ""


@dataclass(frozen=True)
class Presented:
    """What a presented refresh token turned out to be."""

    status: str  # "active", "replay", "reused", "expired", "unknown"
    family: Family | None = None
    successor: str | None = None


def new_family_id() -> str:
    """A random id for a new refresh family."""
    return secrets.token_urlsafe(18)


class RefreshGrants:
    """Refresh-token families on top of OAuthState (persisted when it is)."""

    def __init__(self, state: OAuthState, *, ttl_s: float, grace_s: float) -> None:
        self._state = state
        self._ttl = ttl_s
        self._grace = grace_s
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SUCCESSOR_INFO).derive(state.key)
        self._successor_key = key
        self._last_prune = 0.0

    # -- creation -----------------------------------------------------------

    def start_family(
        self,
        *,
        client_id: str,
        client_name: str,
        scope: frozenset[str],
        resource: str,
        idp: str,
        identity: Identity,
        now: float | None = None,
        brain_id: str = "",
        family_id: str | None = None,
    ) -> tuple[Family, str]:
        """A new family for a completed sign-in, and its first refresh token (``brain_id``: see Family;
        ``family_id``: one drawn with `new_family_id` beforehand, as a redeemed code's marker names it)."""
        current = time.time() if now is None else now
        self.prune(current)
        family_id = family_id or new_family_id()
        token = REFRESH_PREFIX + secrets.token_urlsafe(32)
        record = {
            "client_id": client_id,
            "client_name": client_name,
            "subject": identity.subject,
            "scope": " ".join(sorted(scope)),
            "resource": resource,
            "idp": idp,
            "secret": self._seal(family_id, identity),
            "credential_exp": identity.credential_expires_at,
            "created": current,
            "expires": current + self._ttl,
            **({"brain": brain_id} if brain_id else {}),
        }
        self._state.families.mutate(lambda records: records.__setitem__(family_id, record))
        self._state.refresh.mutate(
            lambda records: records.__setitem__(
                token_hash(token), {"family": family_id, "expires": current + self._ttl, "rotated_at": None}
            )
        )
        return self._family(family_id, record), token

    # -- lookup ---------------------------------------------------------------

    def family_of(self, token: str) -> str | None:
        """The family id a refresh token belongs to (any status), or None."""
        if not _plausible(token):
            return None
        record = self._state.refresh.get(token_hash(token))
        return record.get("family") if isinstance(record, dict) else None

    def family_revoked(self, family_id: str, now: float | None = None) -> bool:
        """True when the family was revoked (its access tokens must be refused).

        A revocation list rather than "is the family known": a replica that has
        not seen the family yet still accepts its sealed access tokens.
        """
        until = self._state.revoked.get(family_id)
        current = time.time() if now is None else now
        return isinstance(until, (int, float)) and until > current

    def subject_has_live_family(self, subject: str, now: float | None = None) -> bool:
        """True while ``subject`` still has a live session at any client."""
        current = time.time() if now is None else now
        return any(
            r.get("subject") == subject and r.get("expires", 0) > current for r in self._state.families.records.values()
        )

    def families_using(self, subject: str, store_credential: str) -> list[str]:
        """The ids of ``subject``'s families (OIDC ones aside) whose store credential is ``store_credential``.

        Only that subject's secrets are opened (a person has a few sign-ins, one per
        app and device), and each is compared in constant time.
        """
        wanted = store_credential.encode("utf-8")
        found: list[str] = []
        for family_id, record in list(self._state.families.records.items()):
            if not isinstance(record, dict) or record.get("subject") != subject or record.get("idp") == "oidc":
                continue
            family = self._family(family_id, record)
            if family is not None and hmac.compare_digest(family.store_credential.encode("utf-8"), wanted):
                found.append(family_id)
        return found

    def load_family(self, family_id: str) -> Family | None:
        """The family ``family_id`` (secrets opened), or None."""
        record = self._state.families.get(family_id)
        if not isinstance(record, dict):
            return None
        return self._family(family_id, record)

    def inspect(self, token: str, now: float | None = None) -> Presented:
        """Classify a presented refresh token without changing anything."""
        current = time.time() if now is None else now
        if not _plausible(token):
            return Presented("unknown")
        record = self._state.refresh.get(token_hash(token))
        if not isinstance(record, dict):
            return Presented("unknown")
        family = self.load_family(record["family"])
        if family is None:
            return Presented("unknown")
        if record["expires"] <= current:
            return Presented("expired", family)
        rotated_at = record.get("rotated_at")
        if rotated_at is None:
            return Presented("active", family)
        successor = self._successor_of(token)
        successor_record = self._state.refresh.get(record.get("successor") or "")
        successor_unused = isinstance(successor_record, dict) and successor_record.get("rotated_at") is None
        if (
            current - rotated_at <= self._grace
            and successor_unused
            and hmac.compare_digest(token_hash(successor), record.get("successor") or "")
        ):
            return Presented("replay", family, successor)
        return Presented("reused", family)

    # -- changes --------------------------------------------------------------

    def rotate(self, token: str, identity: Identity, now: float | None = None) -> tuple[Family, str]:
        """Retire ``token`` (which must be active) and return the family and successor.

        ``identity`` is the result of renewing at the provider; the family's store
        credential and renewal secret are updated from it. Raises RotationConflict
        when the token was retired meanwhile (by another request or replica).
        """
        current = time.time() if now is None else now
        old_hash = token_hash(token)
        successor = self._successor_of(token)
        new_hash = token_hash(successor)
        expires = current + self._ttl

        def change_tokens(records: dict[str, Any]) -> str:
            record = records.get(old_hash)
            if not isinstance(record, dict) or record.get("rotated_at") is not None:
                raise RotationConflict()
            records[old_hash] = {**record, "rotated_at": current, "successor": new_hash}
            records[new_hash] = {"family": record["family"], "expires": expires, "rotated_at": None}
            return str(record["family"])

        family_id = self._state.refresh.mutate(change_tokens)

        def change_family(records: dict[str, Any]) -> None:
            fam = records.get(family_id)
            if fam is None:
                raise RotationConflict()
            fam["secret"] = self._seal(family_id, identity)
            fam["credential_exp"] = identity.credential_expires_at
            fam["expires"] = expires

        self._state.families.mutate(change_family)
        family = self.load_family(family_id)
        if family is None:
            raise RotationConflict()
        return family, successor

    def revoke_family(self, family_id: str, now: float | None = None) -> None:
        """End a family: its refresh tokens die, and access tokens naming it are refused."""
        current = time.time() if now is None else now
        # Access tokens live an hour at most; remember the revocation a little longer.
        self._state.revoked.mutate(lambda records: records.__setitem__(family_id, current + ACCESS_TOKEN_TTL_S + 60))
        self._state.families.mutate(lambda records: records.pop(family_id, None))
        self._state.refresh.mutate(
            lambda records: [records.pop(h) for h in [h for h, r in records.items() if r.get("family") == family_id]]
        )

    def prune(self, now: float | None = None, *, force: bool = False) -> None:
        """Drop expired tokens and families (bounded work, at most once a minute)."""
        current = time.time() if now is None else now
        if not force and current - self._last_prune < _PRUNE_EVERY_S:
            return
        self._last_prune = current
        dead_tokens = [h for h, r in self._state.refresh.records.items() if r.get("expires", 0) <= current]
        if dead_tokens:
            self._state.refresh.mutate(lambda records: [records.pop(h, None) for h in dead_tokens])
        dead_families = [f for f, r in self._state.families.records.items() if r.get("expires", 0) <= current]
        if dead_families:
            self._state.families.mutate(lambda records: [records.pop(f, None) for f in dead_families])
        dead_revocations = [f for f, until in self._state.revoked.records.items() if until <= current]
        if dead_revocations:
            self._state.revoked.mutate(lambda records: [records.pop(f, None) for f in dead_revocations])

    # -- helpers --------------------------------------------------------------

    def _successor_of(self, token: str) -> str:
        digest = hmac.new(self._successor_key, token.encode("utf-8"), hashlib.sha256).digest()
        return REFRESH_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def _seal(self, family_id: str, identity: Identity) -> str:
        secret = json.dumps({"credential": identity.store_credential, "renewal": identity.renewal_secret})
        return self._state.box.seal(secret, f"family:{family_id}")

    def _family(self, family_id: str, record: dict[str, Any]) -> Family | None:
        opened = self._state.box.open(record.get("secret", ""), f"family:{family_id}")
        if opened is None:
            return None  # sealed under another key: treat as unknown, never as valid
        secret = json.loads(opened)
        return Family(
            family_id=family_id,
            client_id=record["client_id"],
            client_name=record.get("client_name", ""),
            subject=record["subject"],
            scope=frozenset(record["scope"].split()),
            resource=record["resource"],
            idp=record["idp"],
            store_credential=secret["credential"],
            renewal_secret=secret["renewal"],
            credential_expires_at=record.get("credential_exp"),
            brain_id=record["brain"] if isinstance(record.get("brain"), str) else "",
        )


def _plausible(token: str) -> bool:
    return isinstance(token, str) and token.startswith(REFRESH_PREFIX) and len(token) <= _MAX_REFRESH_CHARS
