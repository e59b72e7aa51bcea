"""Static bearer tokens: ``bst_`` + 43 base64url characters (32 random bytes), kept only hashed."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets

TOKEN_PREFIX = "bst_"
_STATIC_TOKEN = re.compile(r"^bst_[A-Za-z0-9_-]{43}$")


def new_token() -> str:
    """A fresh static token from 32 random bytes."""
    return TOKEN_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")


def hash_token(token: str) -> str:
    """Lowercase hex SHA-256 of the token: the only form a token is stored in."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def is_static_token(token: str) -> bool:
    """True when ``token`` has the shape of a static token."""
    return _STATIC_TOKEN.match(token) is not None
