"""OAuth attacks over HTTP, one test each, against the connector's routes (in-process app)."""

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
from connector.oauth.routes import build_oauth
from connector.oauth.state import OAuthState
from connector.oauth.tokens import AccessTokenCodec
from connector.settings import ConnectorSettings

from .conftest import GOOD_TOKEN, FakeStoreProvider, query_of

BASE = "http://127.0.0.1:8788"
RESOURCE = BASE + "/mcp"
REDIRECT = "http://127.0.0.1:33418/callback"


class Attacker:
    """A registered client driving the flow by hand."""

    def __init__(self, http: TestClient[Litestar], mount: Any) -> None:
        self.http = http
        self.mount = mount
        self.client_id = http.post("/register", json={"redirect_uris": [REDIRECT]}).json()["client_id"]
        self.verifier = secrets.token_urlsafe(48)

    def authorize(self, **overrides: Any) -> Any:
        params = {"response_type": "code", "client_id": self.client_id, "redirect_uri": REDIRECT, "state": "s",
                  "code_challenge": s256(self.verifier), "code_challenge_method": "S256", "resource": RESOURCE}
        params.update(overrides)
        return self.http.get("/authorize?" + urlencode({k: v for k, v in params.items() if v is not None}),
                             follow_redirects=False)

    def code(self) -> str:
        page = self.authorize()
        login_id = re.search(r'name="login_id" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        done = self.http.post("/authorize/complete", data={"login_id": login_id, "token": GOOD_TOKEN},
                              follow_redirects=False)
        return query_of(done.headers["location"])["code"]

    def exchange(self, code: str, **overrides: Any) -> Any:
        form = {"grant_type": "authorization_code", "code": code, "client_id": self.client_id,
                "redirect_uri": REDIRECT, "code_verifier": self.verifier, "resource": RESOURCE}
        form.update(overrides)
        return self.http.post("/token", data={k: v for k, v in form.items() if v is not None})


@pytest.fixture
def attacker(tmp_path: Path) -> Iterator[Attacker]:
    settings = ConnectorSettings(store_url="http://127.0.0.1:9", idp="static", state_dir=tmp_path / "s",
                                 refresh_grace_ms=0)
    key = secrets.token_bytes(32)
    mount = build_oauth(settings, state=OAuthState(settings.state_dir, key), codec=AccessTokenCodec(key),
                        provider=FakeStoreProvider())
    with TestClient(Litestar(route_handlers=mount.route_handlers), base_url=BASE) as http:
        yield Attacker(http, mount)


def _redirect_error(response: Any) -> str:
    assert response.status_code == 302, response.text
    query = query_of(response.headers["location"])
    assert query["iss"] == BASE
    return query["error"]


def test_no_pkce_refused(attacker: Attacker) -> None:
    assert _redirect_error(attacker.authorize(code_challenge=None, code_challenge_method=None)) == "invalid_request"
    assert _redirect_error(attacker.authorize(code_challenge=None)) == "invalid_request"
    code = attacker.code()
    assert attacker.exchange(code, code_verifier=None).json()["error"] == "invalid_grant"


def test_plain_pkce_refused(attacker: Attacker) -> None:
    response = attacker.authorize(code_challenge=attacker.verifier, code_challenge_method="plain")
    assert _redirect_error(response) == "invalid_request"


def test_wrong_verifier_refused(attacker: Attacker) -> None:
    code = attacker.code()
    response = attacker.exchange(code, code_verifier=secrets.token_urlsafe(48))
    assert response.status_code == 400 and response.json()["error"] == "invalid_grant"


def test_code_reuse_refused(attacker: Attacker) -> None:
    code = attacker.code()
    assert attacker.exchange(code).status_code == 200
    again = attacker.exchange(code)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


def test_unregistered_redirect_refused_without_redirecting(attacker: Attacker) -> None:
    response = attacker.authorize(redirect_uri="https://attacker.example/steal")
    assert response.status_code == 400 and "location" not in response.headers
    code = attacker.code()
    stolen = attacker.exchange(code, redirect_uri="https://attacker.example/steal")
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"


def test_wrong_resource_refused(attacker: Attacker) -> None:
    assert _redirect_error(attacker.authorize(resource="https://other-server.example/mcp")) == "invalid_target"
    code = attacker.code()
    response = attacker.exchange(code, resource="https://other-server.example/mcp")
    assert response.status_code == 400 and response.json()["error"] == "invalid_target"


def test_token_for_another_audience_refused(attacker: Attacker) -> None:
    tokens = attacker.exchange(attacker.code()).json()
    assert attacker.mount.verify_access(tokens["access_token"], BASE) is not None
    assert attacker.mount.verify_access(tokens["access_token"], "https://other-server.example") is None


def test_refresh_reuse_after_grace_revokes_family(attacker: Attacker) -> None:
    tokens = attacker.exchange(attacker.code()).json()
    form = {"grant_type": "refresh_token", "client_id": attacker.client_id, "refresh_token": tokens["refresh_token"]}
    rotated = attacker.http.post("/token", data=form).json()
    reuse = attacker.http.post("/token", data=form)  # grace window is 0 here
    assert reuse.status_code == 400 and reuse.json()["error"] == "invalid_grant"
    follow = attacker.http.post("/token", data={**form, "refresh_token": rotated["refresh_token"]})
    assert follow.status_code == 400
    assert attacker.mount.verify_access(rotated["access_token"], BASE) is None


def test_expired_access_token_refused(attacker: Attacker) -> None:
    import time

    tokens = attacker.exchange(attacker.code()).json()
    server = attacker.mount.server
    assert server.verify_access(tokens["access_token"], BASE, now=time.time() + 3500) is not None
    assert server.verify_access(tokens["access_token"], BASE, now=time.time() + 3700) is None


def test_removed_store_user_at_refresh_refused(attacker: Attacker) -> None:
    tokens = attacker.exchange(attacker.code()).json()
    attacker.mount.provider.valid.clear()  # the store no longer knows the token
    response = attacker.http.post("/token", data={"grant_type": "refresh_token", "client_id": attacker.client_id,
                                                  "refresh_token": tokens["refresh_token"]})
    assert response.status_code == 400 and response.json()["error"] == "invalid_grant"
    assert attacker.mount.verify_access(tokens["access_token"], BASE) is None


def test_client_id_in_http_basic_is_accepted_and_must_agree(attacker: Attacker) -> None:
    import base64

    code = attacker.code()
    basic = "Basic " + base64.b64encode(f"{attacker.client_id}:".encode()).decode()
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
            "code_verifier": attacker.verifier, "resource": RESOURCE}
    ok = attacker.http.post("/token", data=form, headers={"Authorization": basic})
    assert ok.status_code == 200, ok.text
    other = "Basic " + base64.b64encode(b"someone-else:").decode()
    clash = attacker.http.post("/token", data={"grant_type": "refresh_token", "client_id": attacker.client_id,
                                               "refresh_token": ok.json()["refresh_token"]},
                               headers={"Authorization": other})
    assert clash.status_code == 400
