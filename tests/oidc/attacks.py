"""Forged and invalid ID tokens, each differing from a valid one by a single defect.

Each builder takes the issuer and a ``mint`` function (the issuer's, or one that adds
claims a store's allow-list needs), so the defect is the only reason for a rejection.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

from tests.support.oidc_issuer import IssuerClient

Mint = Callable[..., str]


def b64(data: bytes) -> str:
    """base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def tamper(token: str, **changes: Any) -> str:
    """Change claims of a signed token, keeping its header and signature."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    return f"{header}.{b64(json.dumps(claims).encode())}.{signature}"


def _now() -> int:
    return int(time.time())


ATTACKS: dict[str, Callable[[IssuerClient, Mint], str]] = {
    "alg none": lambda i, mint: mint("none", sub="x"),
    "HS256 keyed with the public key": lambda i, mint: mint("HS256-public", sub="x"),
    "EC signature naming the RSA key": lambda i, mint: mint("ES256-with-rsa-kid", sub="x"),
    "unknown kid": lambda i, mint: mint(kid="no-such-key", sub="x"),
    "tampered payload": lambda i, mint: tamper(mint(sub="x"), sub="admin"),
    "tampered header alg": lambda i, mint: ".".join([b64(b'{"alg":"ES256","kid":"x"}'), *mint(sub="x").split(".")[1:]]),
    "expired": lambda i, mint: mint(sub="x", iat=_now() - 900, exp=_now() - 120),
    "no exp": lambda i, mint: mint(sub="x", exp=None),
    "future iat": lambda i, mint: mint(sub="x", iat=_now() + 300),
    "future nbf": lambda i, mint: mint(sub="x", nbf=_now() + 300),
    "wrong iss": lambda i, mint: mint(sub="x", iss="https://evil.example"),
    "iss with trailing slash": lambda i, mint: mint(sub="x", iss=i.issuer + "/"),
    "wrong aud": lambda i, mint: mint(sub="x", aud="someone-else"),
    "several audiences, foreign azp": lambda i, mint: mint(sub="x", aud=[i.audience, "other"], azp="other"),
    "several audiences, no azp": lambda i, mint: mint(sub="x", aud=[i.audience, "other"]),
    "missing sub": lambda i, mint: mint(sub=None),
    "empty sub": lambda i, mint: mint(sub=""),
    "256-character sub": lambda i, mint: mint(sub="s" * 256),
    "critical header extension": lambda i, mint: mint(sub="x", headers={"crit": ["exp"]}),
    "access token type": lambda i, mint: mint(sub="x", headers={"typ": "at+jwt"}),
    "signature stripped": lambda i, mint: mint(sub="x").rsplit(".", 1)[0] + ".",
    "signature of another token": lambda i, mint: mint(sub="x").rsplit(".", 1)[0] + "." + mint(sub="y").split(".")[2],
}

JUNK = ["junk", "a.b", "a.b.c", "a.b.c.d", "e30.e30.", "e30.e30.e30", "x" * 20000, "...", "bst_" + "A" * 43,
        "bst_short"]
