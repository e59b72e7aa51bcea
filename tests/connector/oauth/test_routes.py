"""The OAuth routes over HTTP (Litestar test client): metadata, page headers, form flow, limits."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from connector.oauth.pkce import s256
from connector.oauth.routes import ConfigurationError, build_oauth, choose_provider
from connector.oauth.state import OAuthState
from connector.oauth.tokens import AccessTokenCodec
from connector.settings import ConnectorSettings

from .conftest import GOOD_TOKEN, FakeStoreProvider, query_of

REDIRECT = "http://127.0.0.1:33418/callback"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient[Litestar]]:
    settings = ConnectorSettings(store_url="http://127.0.0.1:9", idp="static", state_dir=tmp_path / "s")
    key = secrets.token_bytes(32)
    mount = build_oauth(settings, state=OAuthState(settings.state_dir, key), codec=AccessTokenCodec(key),
                        provider=FakeStoreProvider())
    app = Litestar(route_handlers=mount.route_handlers)
    app.state.mount = mount
    with TestClient(app, base_url="http://127.0.0.1:8788") as test_client:
        yield test_client


def _register(client: TestClient[Litestar]) -> str:
    response = client.post("/register", json={"redirect_uris": [REDIRECT], "client_name": "<b>Evil</b> Client"})
    assert response.status_code == 201, response.text
    return str(response.json()["client_id"])


def _authorize_url(client_id: str, verifier: str, **extra: str) -> str:
    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "state": "s1",
        "code_challenge": s256(verifier), "code_challenge_method": "S256", "resource": "http://127.0.0.1:8788/mcp",
        **extra,
    }
    return "/authorize?" + urlencode(params)


def test_metadata_documents(client: TestClient[Litestar]) -> None:
    prm = client.get("/.well-known/oauth-protected-resource").json()
    assert prm == {
        "resource": "http://127.0.0.1:8788/mcp",
        "authorization_servers": ["http://127.0.0.1:8788"],
        "scopes_supported": ["brain.read", "brain.write"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Brain",
    }
    assert client.get("/.well-known/oauth-protected-resource/mcp").json() == prm
    asm = client.get("/.well-known/oauth-authorization-server").json()
    assert asm["issuer"] == "http://127.0.0.1:8788"
    assert asm["token_endpoint"] == "http://127.0.0.1:8788/token"
    assert asm["registration_endpoint"] == "http://127.0.0.1:8788/register"
    assert asm["revocation_endpoint"] == "http://127.0.0.1:8788/revoke"
    assert asm["code_challenge_methods_supported"] == ["S256"]
    assert asm["token_endpoint_auth_methods_supported"] == ["none"]
    assert asm["authorization_response_iss_parameter_supported"] is True
    assert asm["grant_types_supported"] == ["authorization_code", "refresh_token"]


def test_forwarded_headers_from_untrusted_peer_are_ignored(client: TestClient[Litestar]) -> None:
    prm = client.get("/.well-known/oauth-protected-resource",
                     headers={"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}).json()
    assert prm["resource"] == "http://127.0.0.1:8788/mcp"


def test_page_flow_over_http(client: TestClient[Litestar]) -> None:
    client_id = _register(client)
    verifier = secrets.token_urlsafe(48)
    page = client.get(_authorize_url(client_id, verifier))
    assert page.status_code == 200
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["referrer-policy"] == "no-referrer"
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "script-src 'none'" in csp
    assert "form-action 'self' http://127.0.0.1:33418" in csp
    html = page.text
    assert "&lt;b&gt;Evil&lt;/b&gt; Client" in html and "<b>Evil</b>" not in html
    assert "read your memories" in html and "add, pin, verify and archive memories" in html
    assert not re.search(r"(src|href)=\"?https?:", html), "the page must load nothing external"
    login_id = re.search(r'name="login_id" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]

    wrong = client.post("/authorize/complete", data={"login_id": login_id, "token": "bst_wrong", "action": "allow"})
    assert wrong.status_code == 401 and "not accepted" in wrong.text and "2 attempts left" in wrong.text
    # The page is shown again at /authorize/complete: its form must still post to the same place.
    assert 'action="/authorize/complete"' in wrong.text and 'action="/authorize/complete"' in html

    done = client.post("/authorize/complete", data={"login_id": login_id, "token": GOOD_TOKEN, "action": "allow"},
                       follow_redirects=False)
    assert done.status_code == 303
    location = done.headers["location"]
    assert location.startswith(REDIRECT + "?")
    query = query_of(location)
    assert query["iss"] == "http://127.0.0.1:8788" and query["state"] == "s1"

    token = client.post("/token", data={"grant_type": "authorization_code", "code": query["code"],
                                        "client_id": client_id, "redirect_uri": REDIRECT, "code_verifier": verifier,
                                        "resource": "http://127.0.0.1:8788/mcp"})
    assert token.status_code == 200, token.text
    assert token.headers["cache-control"] == "no-store"
    body = token.json()
    mount = client.app.state.mount
    assert mount.verify_access(body["access_token"], "http://127.0.0.1:8788") is not None
    assert mount.verify_access(body["access_token"], "http://127.0.0.1:9999") is None

    refreshed = client.post("/token", data={"grant_type": "refresh_token", "refresh_token": body["refresh_token"],
                                            "client_id": client_id})
    assert refreshed.status_code == 200
    revoked = client.post("/revoke", data={"token": refreshed.json()["refresh_token"], "client_id": client_id})
    assert revoked.status_code == 200
    assert mount.verify_access(refreshed.json()["access_token"], "http://127.0.0.1:8788") is None


def test_an_empty_token_asks_for_one_and_takes_no_attempt(client: TestClient[Litestar]) -> None:
    client_id = _register(client)
    page = client.get(_authorize_url(client_id, secrets.token_urlsafe(48)))
    login_id = re.search(r'name="login_id" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    provider = client.app.state.mount.provider
    # More empty submissions than the sign-in's three attempts: each asks for the token again.
    for empty in ("", "   ", "", "\t", ""):
        again = client.post("/authorize/complete", data={"login_id": login_id, "token": empty, "action": "allow"})
        assert again.status_code == 400, again.text
        assert "Enter your token." in again.text and "3 attempts left" in again.text
    assert provider.addresses == []  # the store was never asked
    # The three attempts are all still there: a wrong token takes the first.
    wrong = client.post("/authorize/complete", data={"login_id": login_id, "token": "bst_wrong", "action": "allow"})
    assert wrong.status_code == 401 and "2 attempts left" in wrong.text
    done = client.post("/authorize/complete", data={"login_id": login_id, "token": GOOD_TOKEN, "action": "allow"},
                       follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"].startswith(REDIRECT + "?")


def test_token_endpoint_wants_a_form(client: TestClient[Litestar]) -> None:
    response = client.post("/token", json={"grant_type": "authorization_code"})
    assert response.status_code == 400 and response.json()["error"] == "invalid_request"
    assert client.post("/register", content=b"not json").status_code == 400


def test_errors_redirect_with_iss_over_http(client: TestClient[Litestar]) -> None:
    client_id = _register(client)
    response = client.get(_authorize_url(client_id, secrets.token_urlsafe(48), code_challenge_method="plain"),
                          follow_redirects=False)
    assert response.status_code == 302
    query = query_of(response.headers["location"])
    assert query["error"] == "invalid_request" and query["iss"] == "http://127.0.0.1:8788"
    bad = client.get(_authorize_url(client_id, "v" * 43, redirect_uri="https://evil.example/cb"), follow_redirects=False)
    assert bad.status_code == 400 and "location" not in bad.headers


def test_register_is_rate_limited(client: TestClient[Litestar]) -> None:
    statuses = [client.post("/register", json={"redirect_uris": [REDIRECT]}).status_code for _ in range(12)]
    assert statuses[:10] == [201] * 10
    assert statuses[10] == 429
    limited = client.post("/register", json={"redirect_uris": [REDIRECT]})
    assert limited.json() == {"error": "rate_limited"} and int(limited.headers["retry-after"]) >= 1


def test_authorize_group_limit_is_shared(client: TestClient[Litestar]) -> None:
    statuses = [client.get("/authorize?client_id=x").status_code for _ in range(20)]
    statuses += [client.post("/authorize/complete", data={"login_id": "x"}).status_code for _ in range(10)]
    assert 429 not in statuses
    assert client.get("/oidc/callback?state=x").status_code == 429


def test_no_provider_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        choose_provider(ConnectorSettings(store_url="http://127.0.0.1:9"))
    assert choose_provider(ConnectorSettings(store_url="http://127.0.0.1:9", dev=True)).kind == "dev"
    assert choose_provider(ConnectorSettings(store_url="http://127.0.0.1:9", idp="static")).kind == "static"


def test_trust_proxy_true_is_refused() -> None:
    from connector.settings import SettingsError

    for value in ("true", "1"):
        with pytest.raises(SettingsError):
            ConnectorSettings.load({"CONNECTOR_STORE_URL": "http://127.0.0.1:9", "CONNECTOR_TRUST_PROXY": value})


def test_dev_page_says_so(tmp_path: Path) -> None:
    settings = ConnectorSettings(store_url="http://127.0.0.1:9", dev=True)
    key = secrets.token_bytes(32)
    mount = build_oauth(settings, state=OAuthState(None, key), codec=AccessTokenCodec(key))
    with TestClient(Litestar(route_handlers=mount.route_handlers), base_url="http://127.0.0.1:8788") as c:
        client_id = _register(c)
        page = c.get(_authorize_url(client_id, secrets.token_urlsafe(48)))
        assert "DEVELOPMENT MODE" in page.text
        login_id = re.search(r'name="login_id" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        done = c.post("/authorize/complete", data={"login_id": login_id, "action": "allow"}, follow_redirects=False)
        assert done.status_code == 303 and "code=" in done.headers["location"]


def _unused(_: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", "/authorize?%ZZ=%%&client_id=%FF%FE", {}),
        ("GET", "/authorize?" + "a=1&" * 200, {}),
        ("GET", "/authorize?client_id=" + "x" * 5000, {}),
        ("GET", "/oidc/callback?state=%00&code=%FF", {}),
        ("POST", "/token", {"content": b"\xff\xfe\x00", "headers": {"content-type": "application/x-www-form-urlencoded"}}),
        ("POST", "/token", {"content": b"grant_type=refresh_token&refresh_token=" + b"x" * 20000,
                            "headers": {"content-type": "application/x-www-form-urlencoded"}}),
        ("POST", "/token", {"content": b"x" * 100_000, "headers": {"content-type": "application/x-www-form-urlencoded"}}),
        ("POST", "/register", {"content": b"[" * 30_000}),
        ("POST", "/register", {"json": {"redirect_uris": [1, None]}}),
        ("POST", "/register", {"json": {"redirect_uris": ["https://a.example/cb"], "client_name": 5}}),
        ("POST", "/register", {"json": {"redirect_uris": ["https://a.example/cb"], "client_uri": "not a url"}}),
        ("POST", "/revoke", {"content": b"token=", "headers": {"content-type": "application/x-www-form-urlencoded"}}),
        ("POST", "/authorize/complete", {"content": b"login_id=%ZZ", "headers": {"content-type": "text/plain"}}),
    ],
)
def test_bad_input_is_4xx_never_500(client: TestClient[Litestar], method: str, path: str, kwargs: dict) -> None:
    response = client.request(method, path, **kwargs)
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:200])


def test_public_url_fixes_the_base(tmp_path: Path) -> None:
    settings = ConnectorSettings(store_url="http://127.0.0.1:9", idp="static", public_url="https://brain.example.org")
    key = secrets.token_bytes(32)
    mount = build_oauth(settings, state=OAuthState(None, key), codec=AccessTokenCodec(key), provider=FakeStoreProvider())
    with TestClient(Litestar(route_handlers=mount.route_handlers), base_url="http://127.0.0.1:8788") as c:
        assert c.get("/.well-known/oauth-protected-resource").json()["resource"] == "https://brain.example.org/mcp"
        assert c.get("/.well-known/oauth-authorization-server").json()["issuer"] == "https://brain.example.org"


def test_an_unregistered_redirect_uri_shows_a_page_to_a_browser_and_json_to_programs(
    client: TestClient[Litestar],
) -> None:
    client_id = _register(client)
    url = _authorize_url(client_id, "v" * 43, redirect_uri="http://127.0.0.1:9/elsewhere")
    browser = client.get(url, headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert browser.status_code == 400 and browser.headers["content-type"].startswith("text/html")
    assert "redirect_uri is not registered for this client" in browser.text
    assert "Start again from your app" in browser.text and 'error_description' not in browser.text
    assert "default-src 'none'" in browser.headers["content-security-policy"]
    program = client.get(url, headers={"accept": "application/json"})
    assert program.status_code == 400 and program.json()["error"] == "invalid_request"
