"""PKCE (RFC 7636), S256 only."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

# A verifier is 43-128 unreserved characters; an S256 challenge is exactly 43 base64url characters.
_VERIFIER = re.compile(r"[A-Za-z0-9\-._~]{43,128}")
_CHALLENGE = re.compile(r"[A-Za-z0-9_\-]{43}")


def s256(verifier: str) -> str:
    """The S256 challenge of ``verifier``."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def is_valid_challenge(challenge: str) -> bool:
    """True when ``challenge`` has the shape of an S256 challenge."""
    return bool(_CHALLENGE.fullmatch(challenge))


def verifier_matches(verifier: str | None, challenge: str) -> bool:
    """True when ``verifier`` is well formed and its S256 equals ``challenge``."""
    if not verifier or not _VERIFIER.fullmatch(verifier):
        return False
    return hmac.compare_digest(s256(verifier), challenge)
