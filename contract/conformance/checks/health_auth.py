"""Health endpoint, bearer authentication and /auth/me."""

from __future__ import annotations

import secrets

from contract.conformance.context import Context, random_uuid
from contract.conformance.registry import check, expect_error, expect_status, json_body, require


@check("health.status", "GET /health answers 200 without a token: status ok, contract 1.1, capabilities")
def health_status(ctx: Context) -> str | None:
    resp = expect_status(ctx.anonymous("GET", "/health"), 200)
    body = json_body(resp)
    require(isinstance(body, dict) and body.get("status") == "ok", 'status must be "ok"', resp)
    require(body.get("contract") == "1.1", 'contract must be "1.1"', resp)
    caps = body.get("capabilities")
    require(isinstance(caps, list) and all(isinstance(c, str) for c in caps), "capabilities must be a list of strings", resp)
    for needed in ("static-token", "conditional-sync"):
        require(needed in caps, f"capabilities lack {needed!r}", resp)
    return f"capabilities: {', '.join(caps)}"


def _protected_requests() -> list[tuple[str, str]]:
    some = random_uuid()
    return [
        ("GET", "/auth/me"),
        ("GET", "/api/brains"),
        ("POST", "/api/brains"),
        ("GET", f"/api/brains/{some}"),
        ("DELETE", f"/api/brains/{some}"),
        ("PUT", f"/api/brains/{some}/sync"),
        ("GET", f"/api/brains/{some}/sync"),
        ("GET", f"/api/brains/{some}/versions"),
        ("POST", f"/api/brains/{some}/versions/v1/restore"),
    ]


def _expect_401(resp) -> None:  # type: ignore[no-untyped-def]
    expect_error(resp, 401)
    challenge = resp.headers.get("www-authenticate", "")
    require(challenge.lower().startswith("bearer"), "401 must carry WWW-Authenticate: Bearer", resp)


@check("auth.missing", "every endpoint but /health needs a token: none -> 401 + WWW-Authenticate: Bearer, before any lookup")
def auth_missing(ctx: Context) -> None:
    for method, path in _protected_requests():
        _expect_401(ctx.anonymous(method, path))


@check("auth.malformed", "malformed Authorization headers (other scheme, empty bearer, junk) -> 401 + WWW-Authenticate")
def auth_malformed(ctx: Context) -> None:
    bad = [
        f"Basic {ctx.user.token}",
        "Bearer",
        f"Token {ctx.user.token}",
        f"{ctx.user.token}",
        f"Bearer {ctx.user.token}x",
        f"Bearer {ctx.user.token[:-1]}",
    ]
    for value in bad:
        # One endpoint each: failed logins may be rate limited per address.
        _expect_401(ctx.user.request("GET", "/auth/me", headers={"Authorization": value}))


@check("auth.unknown", "a well-formed but unknown token -> 401 + WWW-Authenticate on every endpoint")
def auth_unknown(ctx: Context) -> None:
    token = "bst_" + secrets.token_urlsafe(32)
    for method, path in _protected_requests():
        _expect_401(ctx.user.request(method, path, headers={"Authorization": f"Bearer {token}"}))


@check("auth.me", "GET /auth/me -> 200 {user: {id, email (string)}, storage_used: integer >= 0}")
def auth_me(ctx: Context) -> None:
    resp = expect_status(ctx.user.request("GET", "/auth/me"), 200)
    body = json_body(resp)
    require(isinstance(body, dict) and isinstance(body.get("user"), dict), "body must have a user object", resp)
    user = body["user"]
    require(isinstance(user.get("id"), str) and user["id"], "user.id must be a non-empty string", resp)
    require(isinstance(user.get("email"), str), "user.email must be a string (may be empty)", resp)
    used = body.get("storage_used")
    require(isinstance(used, int) and not isinstance(used, bool) and used >= 0, "storage_used must be an integer >= 0", resp)

