"""A person signs in with headless Chromium: a wrong token first, then the right one."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
import pytest

from connector.oauth.pkce import s256
from tests.support.loopback import Answer, LoopbackServer
from tests.support.browser import chromium, needs_chromium

from ..conftest import RunningStore
from .live import flat_query, running_connector


pytestmark = [
    pytest.mark.timeout(240),
    needs_chromium(),
]


class CallbackServer(LoopbackServer):
    """The client app's redirect endpoint on loopback: remembers what arrived."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        super().__init__(self._answer)
        self.url = self.base + "/callback"

    def _answer(self, path: str) -> Answer:
        self.paths.append(path)
        return 200, "text/html", b"<!doctype html><title>done</title><p>Signed in; return to the app.</p>"


@pytest.fixture
def callback() -> Iterator[CallbackServer]:
    server = CallbackServer()
    yield server
    server.close()


def test_person_signs_in_with_chromium(store: RunningStore, tmp_path: Path, callback: CallbackServer) -> None:
    alice = store.add_user("alice")
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as connector:
        base = connector.base_url
        registered = httpx.post(base + "/register", json={"redirect_uris": [callback.url],
                                                          "client_name": "Browser Test App"}).json()
        verifier = secrets.token_urlsafe(48)
        authorize_url = base + "/authorize?" + urlencode({
            "response_type": "code", "client_id": registered["client_id"], "redirect_uri": callback.url,
            "state": "xyz", "code_challenge": s256(verifier), "code_challenge_method": "S256",
            "resource": base + "/mcp", "scope": "brain.read brain.write"})

        requested_hosts: set[str] = set()
        with chromium() as browser:
            page = browser.new_page()
            page.on("request", lambda request: requested_hosts.add(urlsplit(request.url).netloc))
            console_errors: list[str] = []
            page.on("console", lambda message: console_errors.append(message.text) if message.type == "error" else None)
            response = page.goto(authorize_url)
            assert response is not None and response.status == 200
            assert response.headers["x-frame-options"] == "DENY"
            assert "Browser Test App" in page.content()
            assert page.get_by_text("read your memories").is_visible()

            # A wrong token first: the page says so and how many attempts are left.
            page.fill("#token", "bst_this-is-not-the-right-token")
            page.click("button[value=allow]")
            page.wait_for_selector(".error")
            assert "not accepted" in page.inner_text(".error")
            assert "2 attempts left" in page.inner_text(".error")

            # Then the right one: the browser lands on the app's callback with a code.
            page.fill("#token", alice.token)
            with page.expect_navigation(url=lambda url: url.startswith(callback.url)):
                page.click("button[value=allow]")
            assert "Signed in" in page.content()
            # The inline stylesheet is allowed by its hash; nothing was blocked by the CSP.
            assert not [e for e in console_errors if "Content Security Policy" in e], console_errors

        assert requested_hosts <= {urlsplit(base).netloc, urlsplit(callback.url).netloc}, requested_hosts
        arrivals = [path for path in callback.paths if path.startswith("/callback")]
        assert len(arrivals) == 1, callback.paths
        answer = flat_query(arrivals[0])
        assert answer["state"] == "xyz" and answer["iss"] == base
        tokens = httpx.post(base + "/token", data={
            "grant_type": "authorization_code", "code": answer["code"], "client_id": registered["client_id"],
            "redirect_uri": callback.url, "code_verifier": verifier, "resource": base + "/mcp"})
        assert tokens.status_code == 200, tokens.text
        assert tokens.json()["scope"] == "brain.read brain.write"
