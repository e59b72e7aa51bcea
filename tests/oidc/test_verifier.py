"""OidcVerifier against a real test issuer process on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from common.oidc import (
    OidcConfig,
    OidcConfigError,
    OidcIdentity,
    OidcRejected,
    OidcUnavailable,
    OidcVerifier,
    looks_like_jwt,
    normalise_issuer,
    user_id_for,
)
from tests.oidc.attacks import ATTACKS
from tests.support.oidc_issuer import IssuerClient

T = TypeVar("T")

pytestmark = pytest.mark.timeout(60)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion on a fresh event loop."""
    return asyncio.run(coro)


def verifier_for(issuer: IssuerClient, **tuning: Any) -> OidcVerifier:
    """A verifier configured for ``issuer`` (extra keywords: allow-lists, tuning)."""
    domains = tuning.pop("allowed_domains", ())
    emails = tuning.pop("allowed_emails", ())
    clock: Callable[[], float] = tuning.pop("clock", time.time)
    config = OidcConfig.create(issuer.issuer, issuer.audience, domains, emails, **tuning)
    return OidcVerifier(config, clock=clock)


def accept(verifier: OidcVerifier, token: str) -> OidcIdentity:
    """Verify and return the identity (the verifier keeps its caches between calls)."""
    return run(verifier.authenticate(token))


def reject(verifier: OidcVerifier, token: str) -> OidcRejected:
    """Assert the token is rejected as invalid (not an outage)."""
    with pytest.raises(OidcRejected) as caught:
        run(verifier.authenticate(token))
    return caught.value


# -- accepted tokens ---------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_valid_tokens_are_accepted(issuer: IssuerClient, alg: str) -> None:
    verifier = verifier_for(issuer)
    identity = accept(verifier, issuer.mint(alg, sub="alice", email="Alice@Example.com", email_verified=True))
    assert identity.subject == "alice"
    assert identity.email == "alice@example.com"
    assert identity.user_id == user_id_for(issuer.issuer, "alice")
    assert identity.user_id.startswith("oidc_")


def test_user_id_ignores_trailing_slash_in_configuration(issuer: IssuerClient) -> None:
    plain = verifier_for(issuer)
    slashed = OidcVerifier(OidcConfig.create(issuer.issuer + "/", issuer.audience))
    token = issuer.mint(sub="bob")
    assert accept(plain, token).user_id == accept(slashed, token).user_id
    assert normalise_issuer("HTTPS://Issuer.Example/realms/x//") == "https://issuer.example/realms/x"


def test_issuer_publishing_trailing_slash_is_matched_exactly(issuer: IssuerClient) -> None:
    """An issuer that names itself with a trailing slash (as Auth0 does) works and gets the same id."""
    issuer.behave(discovery={"issuer": issuer.issuer + "/"})
    verifier = verifier_for(issuer)
    identity = accept(verifier, issuer.mint(sub="carol", iss=issuer.issuer + "/"))
    assert identity.user_id == user_id_for(issuer.issuer, "carol")
    reject(verifier, issuer.mint(sub="carol"))  # iss must equal the published issuer exactly


def test_expiry_within_skew_is_accepted(issuer: IssuerClient) -> None:
    now = int(time.time())
    accept(verifier_for(issuer), issuer.mint(sub="skew", iat=now - 600, exp=now - 30))


def test_several_audiences_with_our_azp_are_accepted(issuer: IssuerClient) -> None:
    token = issuer.mint(sub="multi", aud=[issuer.audience, "other"], azp=issuer.audience)
    accept(verifier_for(issuer), token)


def test_sub_of_255_characters_is_accepted(issuer: IssuerClient) -> None:
    accept(verifier_for(issuer), issuer.mint(sub="s" * 255))


# -- attacks and invalid tokens -------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attacks_are_rejected(issuer: IssuerClient, name: str) -> None:
    reject(verifier_for(issuer), ATTACKS[name](issuer, issuer.mint))


@pytest.mark.parametrize(
    "junk", ["", "junk", "a.b", "a.b.c", "a.b.c.d", "bst_" + "A" * 43, "e30.e30.", "x" * 20000, "é.é.é", "..."]
)
def test_junk_is_rejected(issuer: IssuerClient, junk: str) -> None:
    reject(verifier_for(issuer), junk)


def test_only_jwt_shaped_tokens_are_tried() -> None:
    assert looks_like_jwt("eyJh.eyJz.c2ln")
    assert not looks_like_jwt("bst_" + "A" * 43)
    assert not looks_like_jwt("a.b")
    assert not looks_like_jwt("a b.c.d")


# -- allow-lists ------------------------------------------------------------------------------------


def test_allow_lists(issuer: IssuerClient) -> None:
    verifier = verifier_for(issuer, allowed_domains=["corp.example"], allowed_emails=["guest@else.example"])
    accept(verifier, issuer.mint(sub="a1", email="guest@else.example", email_verified=True))
    accept(verifier, issuer.mint(sub="a2", email="someone@corp.example", email_verified=True))
    # The string "true" counts as verified (documented in common.oidc).
    accept(verifier, issuer.mint(sub="a3", email="someone@CORP.example", email_verified="true"))
    accept(verifier, issuer.mint(sub="a4", hd="corp.example"))
    reject(verifier, issuer.mint(sub="r1", email="someone@corp.example", email_verified=False))
    reject(verifier, issuer.mint(sub="r2", email="someone@corp.example"))
    reject(verifier, issuer.mint(sub="r3", email="someone@corp.example", email_verified="yes"))
    reject(verifier, issuer.mint(sub="r4", email="guest@else.example", email_verified=False))
    reject(verifier, issuer.mint(sub="r5", email="x@other.example", email_verified=True))
    reject(verifier, issuer.mint(sub="r6", email="x@sub.corp.example", email_verified=True))
    reject(verifier, issuer.mint(sub="r7", hd="other.example"))
    reject(verifier, issuer.mint(sub="r8"))


def test_unverified_email_identity_has_no_email(issuer: IssuerClient) -> None:
    identity = accept(verifier_for(issuer), issuer.mint(sub="u", email="u@x.example", email_verified=False))
    assert identity.email == "" and not identity.email_verified


# -- configuration ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("issuer", "audience", "domains", "emails"),
    [
        ("https://accounts.google.com", "client", (), ()),
        ("https://accounts.google.com/", "client", (), ()),
        ("https://login.microsoftonline.com/common/v2.0", "client", (), ()),
        ("http://issuer.example", "client", (), ()),
        ("http://10.0.0.1:8080", "client", (), ()),
        ("ftp://127.0.0.1", "client", (), ()),
        ("https://issuer.example", "", (), ()),
        ("", "client", (), ()),
        ("https://issuer.example?x=1", "client", (), ()),
        ("not a url", "client", (), ()),
    ],
)
def test_unusable_configuration_is_refused(issuer: str, audience: str, domains: tuple[str, ...],
                                           emails: tuple[str, ...]) -> None:
    with pytest.raises(OidcConfigError):
        OidcConfig.create(issuer, audience, domains, emails)


def test_usable_configuration() -> None:
    assert OidcConfig.create("https://accounts.google.com", "c", ["corp.example"]).issuer == "https://accounts.google.com"
    assert OidcConfig.create("http://127.0.0.1:9000/", "c").issuer == "http://127.0.0.1:9000"
    assert OidcConfig.create("http://localhost:9000", "c").issuer == "http://localhost:9000"
    assert OidcConfig.create("http://[::1]:9000", "c").issuer == "http://[::1]:9000"


def test_discovery_naming_another_issuer_is_refused(issuer: IssuerClient) -> None:
    issuer.behave(discovery={"issuer": "https://evil.example"})
    with pytest.raises(OidcUnavailable):
        run(verifier_for(issuer).authenticate(issuer.mint(sub="x")))


def test_jwks_uri_must_be_https_or_loopback(issuer: IssuerClient) -> None:
    issuer.behave(discovery={"jwks_uri": "http://evil.example/jwks"})
    with pytest.raises(OidcUnavailable):
        run(verifier_for(issuer).authenticate(issuer.mint(sub="x")))


# -- caching, rotation, failures -------------------------------------------------------------------------


def test_documents_are_fetched_once_for_many_tokens(issuer: IssuerClient) -> None:
    verifier = verifier_for(issuer)

    async def many() -> None:
        tokens = [issuer.mint(alg, sub=f"m{n}") for n, alg in enumerate(["RS256", "ES256"] * 5)]
        for token in tokens:
            await verifier.authenticate(token)
        await asyncio.gather(*(verifier.authenticate(token) for token in tokens))

    run(many())
    counts = issuer.counts()
    assert counts == {"/.well-known/openid-configuration": 1, "/jwks": 1}


def test_concurrent_cold_start_fetches_once(issuer: IssuerClient) -> None:
    verifier = verifier_for(issuer)
    issuer.behave(delay=0.3)
    tokens = [issuer.mint(sub=f"c{n}") for n in range(8)]

    async def together() -> None:
        await asyncio.gather(*(verifier.authenticate(token) for token in tokens))

    run(together())
    assert issuer.counts() == {"/.well-known/openid-configuration": 1, "/jwks": 1}


def test_unknown_kids_refetch_at_most_once_per_interval(issuer: IssuerClient) -> None:
    fake_now = [time.time()]
    verifier = verifier_for(issuer, clock=lambda: fake_now[0])
    reject(verifier, issuer.mint(kid="unknown-first", sub="k"))  # cold start: one fetch, no second
    assert issuer.counts()["/jwks"] == 1
    accept(verifier, issuer.mint(sub="k"))
    for n in range(20):
        reject(verifier, issuer.mint(kid=f"unknown-{n}", sub="k"))
    assert issuer.counts()["/jwks"] == 2
    fake_now[0] += 30
    reject(verifier, issuer.mint(kid="unknown-again", sub="k"))
    assert issuer.counts()["/jwks"] == 2
    fake_now[0] += 31
    reject(verifier, issuer.mint(kid="unknown-later", sub="k"))
    assert issuer.counts()["/jwks"] == 3


def test_key_rotation_is_picked_up(fresh_issuer: IssuerClient) -> None:
    issuer = fresh_issuer
    verifier = verifier_for(issuer)
    accept(verifier, issuer.mint("RS256", sub="r"))
    old_token = issuer.mint("ES256", sub="r-old")
    issuer.rotate(keep_old=False)
    for alg in ("RS256", "ES256"):
        accept(verifier, issuer.mint(alg, sub="r"))
    assert issuer.counts()["/jwks"] == 2
    # The old key is gone from the key set: a token it signed no longer verifies.
    reject(verifier, old_token)


def test_key_rotation_with_short_interval(fresh_issuer: IssuerClient) -> None:
    issuer = fresh_issuer
    verifier = verifier_for(issuer, refetch_interval=0.0)
    accept(verifier, issuer.mint(sub="r"))
    issuer.rotate(keep_old=True)
    accept(verifier, issuer.mint(sub="r2"))


@pytest.mark.parametrize("behaviour", [{"status": 500}, {"status": 404}, {"jwks_padding": 600 * 1024}])
def test_failing_issuer_is_not_hammered(issuer: IssuerClient, behaviour: dict[str, Any]) -> None:
    issuer.behave(**behaviour)
    verifier = verifier_for(issuer)

    async def many() -> None:
        for n in range(30):
            with pytest.raises(OidcUnavailable):
                await verifier.authenticate(issuer.mint(sub=f"f{n}"))

    run(many())
    assert issuer.total_requests() <= 2


def test_hanging_issuer_times_out_and_is_not_asked_again(issuer: IssuerClient) -> None:
    issuer.behave(hang=True, hang_seconds=10)
    verifier = verifier_for(issuer, fetch_timeout=1.0)
    token = issuer.mint(sub="h")
    started = time.monotonic()
    with pytest.raises(OidcUnavailable):
        run(verifier.authenticate(token))
    assert time.monotonic() - started < 4  # the deadline, plus slack for a loaded machine
    started = time.monotonic()
    for _ in range(10):
        with pytest.raises(OidcUnavailable):
            run(verifier.authenticate(token))
    # Waiting for the issuer again would take at least 10 x 1 s; remembering the failure takes none.
    assert time.monotonic() - started < 5
    assert issuer.total_requests() == 1


@pytest.mark.parametrize("behaviour", [{"delay": 8.0}, {"drip": 0.2}])
def test_slow_answers_are_cut_by_the_total_timeout(issuer: IssuerClient, behaviour: dict[str, float]) -> None:
    issuer.behave(**behaviour)
    verifier = verifier_for(issuer, fetch_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(OidcUnavailable):
        run(verifier.authenticate(issuer.mint(sub="slow")))
    assert time.monotonic() - started < 5


def test_failure_is_retried_after_the_failure_window(issuer: IssuerClient) -> None:
    fake_now = [time.time()]
    verifier = verifier_for(issuer, clock=lambda: fake_now[0])
    issuer.behave(status=500)
    token = issuer.mint(sub="w")
    with pytest.raises(OidcUnavailable):
        run(verifier.authenticate(token))
    issuer.behave()
    with pytest.raises(OidcUnavailable):
        run(verifier.authenticate(token))  # still inside the failure window
    fake_now[0] += 16
    accept(verifier, token)


def test_stale_keys_serve_while_issuer_fails(issuer: IssuerClient) -> None:
    fake_now = [time.time()]
    verifier = verifier_for(issuer, clock=lambda: fake_now[0], token_cache_seconds=0)
    accept(verifier, issuer.mint(sub="s"))
    issuer.behave(status=503)
    fake_now[0] += 3700  # discovery and keys are stale; the tokens below are still valid
    for n in range(5):
        token = issuer.mint(sub=f"s{n}", ttl=7200)
        accept(verifier, token)
    assert issuer.total_requests() <= 4


def test_cached_verdict_never_outlives_expiry(issuer: IssuerClient) -> None:
    fake_now = [time.time()]
    verifier = verifier_for(issuer, clock=lambda: fake_now[0])
    token = issuer.mint(sub="e", ttl=120)
    accept(verifier, token)
    fake_now[0] += 120 + 61
    reject(verifier, token)


def test_forget_user_drops_cached_verdicts(issuer: IssuerClient) -> None:
    verifier = verifier_for(issuer)
    token = issuer.mint(sub="gone")
    identity = accept(verifier, token)
    assert verifier._tokens  # noqa: SLF001 - the cache is what this test is about
    verifier.forget_user(identity.user_id)
    assert not verifier._tokens  # noqa: SLF001


def test_nonce_is_checked(issuer: IssuerClient) -> None:
    verifier = verifier_for(issuer)
    token = issuer.mint(sub="n", nonce="abc123")
    assert run(verifier.authenticate(token, nonce="abc123")).subject == "n"
    with pytest.raises(OidcRejected):
        run(verifier.authenticate(token, nonce="other"))
    with pytest.raises(OidcRejected):
        run(verifier.authenticate(issuer.mint(sub="n2"), nonce="abc123"))


def test_metadata_for_clients(issuer: IssuerClient) -> None:
    document = run(verifier_for(issuer).metadata())
    assert document["authorization_endpoint"] == issuer.issuer + "/authorize"
    assert document["token_endpoint"] == issuer.issuer + "/token"
    issuer.behave(discovery={"token_endpoint": "http://evil.example/token"})
    with pytest.raises(OidcUnavailable):
        run(verifier_for(issuer).metadata())


def test_connector_setting_names_in_errors() -> None:
    with pytest.raises(OidcConfigError, match="OIDC_ALLOWED_DOMAINS"):
        OidcConfig.create("https://accounts.google.com", "client", setting_prefix="OIDC_")
    with pytest.raises(OidcConfigError, match="OIDC_CLIENT_ID"):
        OidcConfig.create("https://issuer.example", "", setting_prefix="OIDC_")


def test_arbitrary_jwt_shaped_input_is_only_ever_refused(issuer: IssuerClient) -> None:
    """Random headers, claims and signatures: a refusal every time, never another exception."""
    import base64
    import json

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    verifier = verifier_for(issuer)
    accept(verifier, issuer.mint(sub="warm-up"))  # keys cached: examples exercise the checks, not fetches
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=8,
    )
    headers = st.fixed_dictionaries(
        {"alg": st.sampled_from(["RS256", "ES256", "none", "HS256", "RS512"]) | json_values},
        optional={"kid": st.sampled_from([None, "x"]) | json_values, "typ": json_values, "crit": json_values},
    )
    claims = st.dictionaries(
        st.sampled_from(["iss", "aud", "sub", "exp", "iat", "nbf", "azp", "email", "email_verified", "hd"]),
        json_values, max_size=8,
    )

    def b64(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(headers, claims, st.binary(max_size=300))
    def check(header: dict[str, object], payload: dict[str, object], signature: bytes) -> None:
        token = f"{b64(header)}.{b64(payload)}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"
        with pytest.raises((OidcRejected, OidcUnavailable)):
            run(verifier.authenticate(token))

    check()


def test_key_set_parsing_and_key_fit() -> None:
    """Pure key selection: type, curve, size, declared alg and use all have to fit."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    from common.oidc import parse_key_set, pick_key

    def rsa_jwk(bits: int, **extra: Any) -> dict[str, Any]:
        return {**RSAAlgorithm.to_jwk(rsa.generate_private_key(65537, bits).public_key(), as_dict=True), **extra}

    def ec_jwk(curve: Any, **extra: Any) -> dict[str, Any]:
        return {**ECAlgorithm.to_jwk(ec.generate_private_key(curve).public_key(), as_dict=True), **extra}

    keys = parse_key_set({"keys": [
        rsa_jwk(2048, kid="rsa"),
        rsa_jwk(1024, kid="small"),
        rsa_jwk(2048, kid="enc", use="enc"),
        rsa_jwk(2048, kid="declared-ps", alg="PS256"),
        ec_jwk(ec.SECP256R1(), kid="ec"),
        ec_jwk(ec.SECP384R1(), kid="p384"),
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
        "not a key",
    ]})
    assert {key.kid for key in keys} == {"rsa", "small", "declared-ps", "ec", "p384"}
    assert pick_key(keys, "rsa", "RS256") is not None
    assert pick_key(keys, "ec", "ES256") is not None
    for kid, alg in [("rsa", "ES256"), ("ec", "RS256"), ("small", "RS256"), ("declared-ps", "RS256"),
                     ("p384", "ES256")]:
        with pytest.raises(OidcRejected):
            pick_key(keys, kid, alg)
    assert pick_key(keys, "hmac", "RS256") is None  # never even parsed
    assert pick_key(keys, None, "ES256") is not None and pick_key(keys, None, "ES256").kid == "ec"
    with pytest.raises(OidcUnavailable):
        parse_key_set({"nokeys": []})
