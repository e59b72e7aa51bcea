"""The connector app in process (no store needed): rate limit on /mcp, security headers, logs."""

from __future__ import annotations

import json
import logging
import time

from litestar.testing import TestClient

from connector.app import JsonLogFormatter, create_app
from connector.oauth.tokens import AccessClaims, AccessTokenCodec
from connector.settings import ConnectorSettings

KEY = bytes(range(32))


def settings(**changes: object) -> ConnectorSettings:
    base = ConnectorSettings.load(
        {"CONNECTOR_STORE_URL": "http://127.0.0.1:9", "CONNECTOR_IDP": "static", "CONNECTOR_STATE_KEY": KEY.hex()}
    )
    return base.with_overrides(**changes)


def test_mcp_rate_limit_per_address() -> None:
    app = create_app(settings(mcp_rate_per_min=3))
    with TestClient(app) as client:
        statuses = [client.post("/mcp", json={}).status_code for _ in range(3)]
        assert statuses == [401, 401, 401]
        limited = client.post("/mcp", json={})
        assert limited.status_code == 429
        assert limited.json() == {"error": "rate_limited"}
        assert int(limited.headers["retry-after"]) >= 1


def test_security_headers_and_401_for_get() -> None:
    app = create_app(settings())
    with TestClient(app) as client:
        response = client.get("/mcp")
        assert response.status_code == 401 and "resource_metadata=" in response.headers["www-authenticate"]
        assert "error=" not in response.headers["www-authenticate"]
        health = client.get("/health")
        assert health.status_code == 200
        assert health.headers["x-content-type-options"] == "nosniff"
        assert health.headers["x-frame-options"] == "DENY"
        assert health.headers["referrer-policy"] == "no-referrer"
        assert client.get("/health/ready").status_code == 503  # nothing listens on the store port


def test_wrong_audience_and_expired_tokens_are_refused() -> None:
    app = create_app(settings())
    codec = AccessTokenCodec(KEY)

    def token(aud: str, exp: int) -> str:
        return codec.issue(
            AccessClaims(
                sub="static:u", scope=frozenset({"brain.read"}), aud=aud, exp=exp, client_id="c", client_name="c",
                idp="static", store_credential="bst_x",
            )
        )

    with TestClient(app, base_url="http://127.0.0.1:8788") as client:
        for bad in (token("http://other.example/mcp", int(time.time()) + 60), token("http://127.0.0.1:8788/mcp", 1)):
            response = client.post("/mcp", json={}, headers={"Authorization": f"Bearer {bad}"})
            assert response.status_code == 401
            assert 'error="invalid_token"' in response.headers["www-authenticate"]


def test_json_logs_carry_no_secrets() -> None:
    record = logging.LogRecord("connector.http", logging.INFO, __file__, 1, "request", (), None)
    record.method, record.path, record.status = "POST", "/mcp", 200
    line = json.loads(JsonLogFormatter().format(record))
    assert line["msg"] == "request" and line["path"] == "/mcp" and line["level"] == "info"


def test_cors_for_browser_clients() -> None:
    app = create_app(settings())
    with TestClient(app) as client:
        preflight = client.options(
            "/mcp",
            headers={
                "Origin": "https://inspector.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version",
            },
        )
        assert preflight.status_code in (200, 204)
        assert preflight.headers["access-control-allow-origin"] == "*"
        refused = client.post("/mcp", json={}, headers={"Origin": "https://inspector.example"})
        assert refused.status_code == 401
        assert refused.headers["access-control-allow-origin"] == "*"
        assert "www-authenticate" in refused.headers["access-control-expose-headers"].lower()
        metadata = client.get("/.well-known/oauth-protected-resource", headers={"Origin": "https://x.example"})
        assert metadata.headers.get_list("access-control-allow-origin") == ["*"]
