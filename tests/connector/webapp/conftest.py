"""The web app against a real store process, in process (litestar's TestClient) or as a real connector."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from connector.app import create_app
from connector.engine.format.text import memory_body
from connector.settings import ConnectorSettings

from tests.contract.harness import running_store as running_store_process
from tests.support.oidc_issuer import start_issuer

from ..conftest import RunningStore, brains_of, download_brain, store  # noqa: F401 - the store fixture

KEY_HEX = bytes(range(32)).hex()
OIDC_CLIENT_ID = "brain-connector-web"
BASE = "http://127.0.0.1:8788"


def connector_settings(store_url: str, **changes: Any) -> ConnectorSettings:
    """Settings of an in-process connector with the static provider over ``store_url``."""
    base = ConnectorSettings.load({"CONNECTOR_STORE_URL": store_url, "CONNECTOR_IDP": "static",
                                   "CONNECTOR_STATE_KEY": KEY_HEX, "CONNECTOR_REPULL_TTL_MS": "0"})
    return base.with_overrides(**changes)


@contextmanager
def app_client(store_url: str, base_url: str = BASE, **changes: Any) -> Iterator[TestClient[Any]]:
    """A TestClient of the connector app (cookies kept between requests, redirects not followed)."""
    app = create_app(connector_settings(store_url, **changes))
    with TestClient(app, base_url=base_url) as client:
        client.follow_redirects = False
        yield client


def csrf_of(html: str) -> str:
    """The CSRF token of the first form in a page."""
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field in the page"
    return match.group(1)


def sign_in(client: TestClient[Any], token: str, *, access: str = "write") -> str:
    """Sign in through the form like a browser; returns the session's CSRF token."""
    page = client.get("/app/signin")
    assert page.status_code == 200, page.text
    done = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": token, "access": access})
    assert done.status_code == 303, done.text
    home = client.get("/app")
    assert home.status_code == 200, home.text
    return csrf_of(home.text)


def web_sign_in(base: str, token: str, address: str) -> httpx.Response:
    """One sign-in through a real connector's `/app/signin` from ``address`` (through its
    trusted loopback proxy), on fresh connections (with several workers, any may answer);
    the POST's answer."""
    headers = {"X-Forwarded-For": address, "Connection": "close"}
    with httpx.Client(base_url=base, timeout=30, headers=headers) as http:
        page = http.get("/app/signin")
        assert page.status_code == 200, page.text
        return http.post("/app/signin", data={"csrf": csrf_of(page.text), "token": token, "access": "write"})


def signed_in_browser(base: str, token: str, address: str) -> httpx.Client:
    """A 'browser' signed in to a real connector's web app with ``token`` (its cookies kept); close it."""
    http = httpx.Client(base_url=base, timeout=30, headers={"X-Forwarded-For": address})
    page = http.get("/app/signin")
    done = http.post("/app/signin", data={"csrf": csrf_of(page.text), "token": token, "access": "write"})
    assert done.status_code == 303, done.text
    assert http.get("/app").status_code == 200
    return http


def at_store(store: RunningStore, token: str) -> dict[str, dict[str, Any]]:
    """Live memories in the store's archive by title: index entry, body and file text."""
    brain_id = brains_of(store.url, token)[0]["id"]
    try:
        brain, _ = download_brain(store.url, token, brain_id)
    except Exception:  # no archive yet: an empty brain
        return {}
    out = {}
    for entry in (brain.read_json("index.json") or {}).get("memories", {}).values():
        text = brain.read_text(entry["path"]) or ""
        out[entry["title"]] = {**entry, "body": memory_body(text), "text": text}
    return out


@pytest.fixture
def running_store(store: RunningStore) -> RunningStore:  # noqa: F811 - re-exported fixture
    """The real store process."""
    return store


@contextmanager
def oidc_store(tmp_path: Path) -> Iterator[tuple[Any, Any, dict[str, Any]]]:
    """A test OpenID Connect issuer, a store trusting it, and the connector settings signing in there."""
    with start_issuer(tmp_path, audience=OIDC_CLIENT_ID) as issuer:
        env = {"STORE_OIDC_ISSUER": issuer.issuer, "STORE_OIDC_AUDIENCE": OIDC_CLIENT_ID,
               "STORE_OIDC_ALLOWED_DOMAINS": "example.com"}
        with running_store_process(tmp_path / "store", env=env) as store:
            yield issuer, store, {"idp": "oidc", "oidc_issuer": issuer.issuer, "oidc_client_id": OIDC_CLIENT_ID,
                                  "oidc_client_secret": "not-checked-by-the-test-issuer"}
