"""Sealed access tokens: round trip, audience, expiry, tampering, secrecy."""

from __future__ import annotations

import pytest
import base64

import msgspec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from connector.oauth.tokens import TOKEN_PREFIX, AccessClaims, AccessTokenCodec, bearer_challenge, derive_access_key

# Dates inside: tests/test_clock_ahead.py runs this module again with the clock a year ahead.
pytestmark = pytest.mark.clock

AUD = "http://127.0.0.1:8788/mcp"


def _claims(exp: int = 2_000_000_000, **overrides: object) -> AccessClaims:
    values: dict[str, object] = dict(
        sub="static:u1",
        scope=frozenset({"brain.read", "brain.write"}),
        aud=AUD,
        exp=exp,
        client_id="client-1",
        client_name="Test client",
        idp="static",
        store_credential="bst_secretsecretsecret",
        family="fam1",
        iat=1_900_000_000,
    )
    values.update(overrides)
    return AccessClaims(**values)  # type: ignore[arg-type]


def test_round_trip_survives_a_new_codec_with_the_same_key() -> None:
    token = AccessTokenCodec(b"k" * 32).issue(_claims())
    assert AccessTokenCodec(b"k" * 32).verify(token, AUD, now=1_950_000_000) == _claims()


def test_other_audience_expired_and_other_key_refused() -> None:
    codec = AccessTokenCodec(b"k" * 32)
    token = codec.issue(_claims(exp=1_950_000_000))
    assert codec.verify(token, "http://127.0.0.1:9999/mcp", now=1_900_000_000) is None
    assert codec.verify(token, AUD, now=1_950_000_000) is None
    assert codec.verify(token, AUD, now=1_949_999_999) is not None
    assert AccessTokenCodec(b"j" * 32).verify(token, AUD, now=1_900_000_000) is None


def test_tampered_or_malformed_tokens_refused() -> None:
    codec = AccessTokenCodec(b"k" * 32)
    token = codec.issue(_claims())
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    for bad in [flipped, token[:-10], "", "bca1_", "bca1_!!!!", "Bearer x", "x" * 100_000, token.replace("bca1_", "bca2_")]:
        assert codec.verify(bad, AUD, now=1_900_000_000) is None


def test_store_credential_is_not_readable_from_the_token() -> None:
    token = AccessTokenCodec(b"k" * 32).issue(_claims())
    raw = base64.urlsafe_b64decode(token[5:] + "=" * (-len(token[5:]) % 4))
    assert b"bst_" not in raw and b"static:u1" not in raw
    assert "bst_" not in token


def test_bearer_challenge_names_resource_metadata_and_scope() -> None:
    url = "https://c.example/.well-known/oauth-protected-resource"
    assert bearer_challenge(url, "brain.read brain.write") == f'Bearer resource_metadata="{url}", scope="brain.read brain.write"'
    assert bearer_challenge(url, "brain.read", "invalid_token") == (
        f'Bearer resource_metadata="{url}", scope="brain.read", error="invalid_token"'
    )


class EarlierWire(msgspec.Struct, forbid_unknown_fields=True):
    """The claims as a replica of the version before bound brains reads them."""

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


def plain(token: str) -> bytes:
    """The sealed claims of ``token`` (key ``k`` * 32)."""
    body = token[len(TOKEN_PREFIX):]
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    return AESGCM(derive_access_key(b"k" * 32)).decrypt(raw[:12], raw[12:], TOKEN_PREFIX.encode("ascii"))


def test_a_bound_brain_id_round_trips_and_is_left_out_when_empty() -> None:
    codec = AccessTokenCodec(b"k" * 32)
    bound = codec.issue(_claims(brain_id="0b9e2a34-5a5e-4b7c-9d6e-3f1a2b3c4d5e"))
    assert codec.verify(bound, AUD, now=1_950_000_000) == _claims(brain_id="0b9e2a34-5a5e-4b7c-9d6e-3f1a2b3c4d5e")
    # A token of no brain's URL reads at a replica that knows no bound brain (a rolling upgrade).
    assert msgspec.json.decode(plain(codec.issue(_claims())), type=EarlierWire).s == "static:u1"
    assert b'"b"' in plain(bound)
