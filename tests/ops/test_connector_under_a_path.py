"""The connector under a path of a shared domain, behind a real Caddy.

``CONNECTOR_PUBLIC_URL=http://127.0.0.1:<port>/brain``, with Caddy on that port either as
deploy/Caddyfile.path says (``/brain`` passed on, the root well-known documents of ``/brain``
sent to the connector) or stripping ``/brain`` (``handle_path``). The official MCP client SDK
discovers the OAuth metadata where RFC 9728 and RFC 8414 put it for URLs with a path, registers,
signs in, calls tools; the sign-in page, the welcome page, the web app and their redirects lead
only to URLs under ``/brain``.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

from connector.app import create_app
from connector.metrics import METRICS_PATH
from connector.public_path import OWN_NAMES
from connector.settings import ConnectorSettings
from tests.connector.conftest import StoreUser, running_store
from tests.connector.oauth.live import MemoryStorage, login_id_of, signed_in_provider
from tests.connector.oauth.test_e2e_mcp_client import REDIRECT, TOOLS, list_tool_names
from tests.connector.oauth.test_e2e_oidc import CLIENT_ID, follow_to_client
from tests.support.oidc_issuer import start_issuer
from tests.support.processes import console_script, free_port
from tests.support.under_a_path import PREFIX, connector_under_a_path

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

# Pages a request may be sent to from the web app without changing anything (not sign-out, not exports).
SKIPPED_LINKS = ("/signout", "/export", "/static/")


def links_of(page: str) -> list[str]:
    """Every URL a page links to, loads or submits to."""
    return [html.unescape(url) for url in re.findall(r'\b(?:href|src|action|formaction)="([^"]*)"', page)]


def assert_under(base: str, page_url: str, page: str) -> list[str]:
    """Every link of ``page`` (at ``page_url``) to this site stays under ``base``; those links, absolute."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(base))
    inside = []
    for link in links_of(page):
        if link.startswith(("#", "data:", "mailto:")):
            continue
        absolute = urljoin(page_url, link)
        if not absolute.startswith(origin + "/"):
            continue  # another site (documentation, the identity provider)
        assert absolute == base or absolute.startswith(base + "/"), (page_url, link)
        inside.append(absolute)
    return inside


def check_metadata(base: str) -> None:
    """The 401 challenge and both metadata documents, where RFC 9728 and RFC 8414 put them."""
    origin = base.removesuffix(PREFIX)
    # A brain's name as the client wrote it (percent-encoded) is the resource the documents speak of.
    for resource in (f"{base}/mcp", f"{base}/mcp/brains/default", f"{base}/mcp/brains/Work%20(2024)"):
        answer = httpx.post(resource, json={}, timeout=30)
        assert answer.status_code == 401
        expected = f'{origin}/.well-known/oauth-protected-resource{PREFIX}{resource.removeprefix(base)}'
        assert f'resource_metadata="{expected}"' in answer.headers["www-authenticate"], answer.headers
        document = httpx.get(expected, timeout=30)
        assert document.status_code == 200, (expected, document.text)
        assert document.json()["resource"] == resource and document.json()["authorization_servers"] == [base]
    server = httpx.get(f"{origin}/.well-known/oauth-authorization-server{PREFIX}", timeout=30)
    assert server.status_code == 200, server.text
    metadata = server.json()
    assert metadata["issuer"] == base
    for name in ("authorization", "token", "registration", "revocation"):
        assert metadata[f"{name}_endpoint"].startswith(base + "/"), metadata
    # The domain's own root documents are not the connector's.
    assert httpx.get(f"{origin}/.well-known/oauth-authorization-server", timeout=30).status_code == 404


async def sign_in_and_call_tools(base: str, user: StoreUser) -> tuple[str, str]:
    """The SDK signs ``user`` in through Caddy (discovery from the MCP URL alone), memorizes,
    recalls and searches; the authorization URL it opened and the web app's URL of the memory."""
    attempts: list[str] = []
    mcp_url = base + "/mcp"
    provider = signed_in_provider(mcp_url, user.token, MemoryStorage(), client_name="Path client", attempts=attempts)
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:  # type: ignore[arg-type]
            saved = await client.call_tool("brain_memorize", {"content": "The boiler is serviced every October.",
                                                              "origin": "user"})
            body: dict[str, Any] = saved.structured_content or {}
            assert not saved.is_error and body.get("synced") is True, saved.content
            found = await client.call_tool("brain_recall", {"query": "boiler service"})
            assert not found.is_error and "October" in str(found.structured_content), found.content
            searched = await client.call_tool("search", {"query": "boiler service"})
            hits = json.loads(searched.content[0].text)["results"]  # type: ignore[union-attr]
    assert len(attempts) == 1 and attempts[0].startswith(base + "/authorize?"), attempts
    # The link names the brain searched (the web app otherwise opens the brain in use).
    assert hits and hits[0]["url"].startswith(f"{base}/app/memory/{body['stored']['id']}?brain="), hits
    return attempts[0], hits[0]["url"]


def check_pages(base: str, user: StoreUser, authorize_url: str, memory_url: str) -> None:
    """The sign-in page, the welcome page, the assistants' page and the web app link only under
    ``base``; the web app's redirects stay there, every page it links to opens, and so does the
    memory's URL the ``search`` tool gave."""
    origin = base.removesuffix(PREFIX)
    with httpx.Client(timeout=30, follow_redirects=False) as browser:
        signin = browser.get(authorize_url, headers={"Accept": "text/html"})
        assert signin.status_code == 200 and login_id_of(signin.text)
        assert f'action="{PREFIX}/authorize/complete"' in signin.text
        assert_under(base, authorize_url, signin.text)
        for url in (base, base + "/", base + "/mcp"):
            page = browser.get(url, headers={"Accept": "text/html"}, follow_redirects=True)
            assert page.status_code == 200, (url, page.status_code)
            assert base + "/mcp" in page.text
            assert_under(base, url, page.text)

        first = browser.get(base + "/app/archive")
        assert first.status_code == 303 and first.headers["location"].startswith(f"{PREFIX}/app/signin"), first.headers
        page = browser.get(urljoin(base, first.headers["location"]))
        assert page.status_code == 200
        assert_under(base, base + "/app/signin", page.text)
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        done = browser.post(base + "/app/signin", data={"csrf": csrf, "token": user.token, "next": f"{PREFIX}/app/archive"},
                            headers={"Origin": origin})
        assert done.status_code == 303 and done.headers["location"] == f"{PREFIX}/app/archive", done.headers
        assert re.search(r"(?i)\bpath=/(;|$)", done.headers["set-cookie"]), done.headers["set-cookie"]
        memory = browser.get(memory_url)
        assert memory.status_code == 200 and "October" in memory.text
        home = browser.get(base + "/app")
        assert home.status_code == 200
        visited = set()
        for link in assert_under(base, base + "/app", home.text):
            target = link.split("#", 1)[0]
            if target in visited or any(part in target for part in SKIPPED_LINKS):
                continue
            visited.add(target)
            opened = browser.get(target)
            assert opened.status_code == 200, (target, opened.status_code, opened.headers.get("location"))
            if "text/html" in opened.headers.get("content-type", ""):
                assert_under(base, target, opened.text)
        assert len(visited) >= 3, visited
        static = [link for link in links_of(home.text) if "/static/" in link]
        assert static and all(browser.get(urljoin(base + "/app", link)).status_code == 200 for link in static)
        csrf = home.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        out = browser.post(base + "/app/signout", data={"csrf": csrf}, headers={"Origin": origin})
        assert out.status_code == 303 and out.headers["location"].startswith(f"{PREFIX}/app/signin")
        assert browser.get(base + "/app").status_code == 303
        metrics = browser.get(base + "/metrics")
        assert metrics.status_code == 404 and "brain_connector" not in metrics.text


@pytest.mark.parametrize("strip", [False, True], ids=["documented-caddyfile", "proxy-strips-the-path"])
async def test_mcp_clients_sign_in_and_people_browse_under_a_path(tmp_path: Path, strip: bool) -> None:
    with running_store(tmp_path) as store, connector_under_a_path(tmp_path, store, strip=strip) as (base, connector):
        alice = store.add_user("alice")
        check_metadata(base)
        authorize_url, memory_url = await sign_in_and_call_tools(base, alice)
        check_pages(base, alice, authorize_url, memory_url)
        # The connector answers /metrics at its own root only, never under the public path.
        assert "brain_connector" in httpx.get(connector.base_url + "/metrics", timeout=30).text
        assert httpx.get(connector.base_url + PREFIX + "/metrics", timeout=30).status_code == 404


async def test_an_oidc_sign_in_comes_back_under_the_path(tmp_path: Path) -> None:
    # The issuer sends the browser back to /brain/oidc/callback, whose cookie (Path=/brain/oidc/callback)
    # the browser sends there: the SDK ends signed in.
    env = {"CONNECTOR_IDP": "oidc", "OIDC_CLIENT_ID": CLIENT_ID, "OIDC_CLIENT_SECRET": "not-checked-by-the-test-issuer"}
    answers: dict[str, str] = {}

    async def redirect_handler(url: str) -> None:
        answers.update(await follow_to_client(url))

    async def callback_handler() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=answers["code"], state=answers.get("state"), iss=answers.get("iss"))

    with (start_issuer(tmp_path, audience=CLIENT_ID) as issuer, running_store(tmp_path) as store,
          connector_under_a_path(tmp_path, store, strip=False, env={**env, "OIDC_ISSUER": issuer.issuer}) as (base, _)):
        provider = OAuthClientProvider(
            server_url=base + "/mcp",
            client_metadata=OAuthClientMetadata(redirect_uris=[REDIRECT], client_name="OIDC under a path",  # type: ignore[list-item]
                                                token_endpoint_auth_method="none"),
            storage=MemoryStorage(), redirect_handler=redirect_handler, callback_handler=callback_handler,
        )
        assert await list_tool_names(base + "/mcp", provider) == TOOLS
        assert issuer.counts().get("/token", 0) == 1


def test_a_prefix_a_client_sends_through_caddy_is_not_read(tmp_path: Path) -> None:
    """Why the public URL must be set under a path: Caddy sets X-Forwarded-Proto and -Host, but passes a
    client's own X-Forwarded-Prefix on, so read from the trusted proxy it would let anyone choose the
    paths of the issuer and endpoints. Without CONNECTOR_PUBLIC_URL the connector says at start that it
    must be set under a path, and once in its log that such a header came and is not read."""
    forged = {"X-Forwarded-Prefix": "/elsewhere"}
    for place in ("unset", "set"):
        (tmp_path / place).mkdir()
    with running_store(tmp_path) as store:
        with connector_under_a_path(tmp_path / "unset", store, strip=True, env={"CONNECTOR_PUBLIC_URL": ""}) as (base, _):
            origin = base.removesuffix(PREFIX)
            for _ in range(2):
                metadata = httpx.get(base + "/.well-known/oauth-authorization-server", headers=forged, timeout=30)
                assert metadata.status_code == 200 and metadata.json()["issuer"] == origin, metadata.text
            [log] = (tmp_path / "unset").glob("connector-*.log")
            said = log.read_text()
            assert "CONNECTOR_PUBLIC_URL is not set" in said and "X-Forwarded-Prefix is not read" in said, said
            # the client's value reached the connector through Caddy: trusting the proxy is not enough
            assert said.count("a proxy sends X-Forwarded-Prefix '/elsewhere', which is not read") == 1, said
        with connector_under_a_path(tmp_path / "set", store, strip=True) as (base, _):
            metadata = httpx.get(base + "/.well-known/oauth-authorization-server", headers=forged, timeout=30)
            assert metadata.json()["issuer"] == base, metadata.text
            [log] = (tmp_path / "set").glob("connector-*.log")
            assert "X-Forwarded-Prefix" not in log.read_text() and "is not set" not in log.read_text()


@pytest.mark.parametrize(("url", "said"), [
    ("https://example.com/app", "cannot begin with /app"),
    ("https://example.com/mcp/team", "cannot begin with /mcp"),
    ("https://example.com/metrics", "cannot begin with /metrics"),
    ("https://example.com/br%61in", "plain names"),
    ("https://example.com/tools/../brain", "plain names"),
    ("https://example.com/.well-known", "plain names"),
    ("https://example.com//brain", "plain names"),
])
def test_a_public_path_that_cannot_be_served_under_is_refused_at_start(tmp_path: Path, url: str, said: str) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "HOME": str(tmp_path), "CONNECTOR_STORE_URL": "http://127.0.0.1:9", "CONNECTOR_IDP": "static",
           "CONNECTOR_STATE_DIR": str(state), "CONNECTOR_PUBLIC_URL": url}
    done = subprocess.run([console_script("brain-connector"), "serve", "--host", "127.0.0.1", "--port", str(free_port())],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode != 0
    assert "CONNECTOR_PUBLIC_URL" in done.stderr and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not state.exists()  # nothing was created


def test_the_names_a_public_path_may_not_begin_with_are_every_path_the_connector_serves(tmp_path: Path) -> None:
    settings = ConnectorSettings.load({"CONNECTOR_STORE_URL": "http://127.0.0.1:9", "CONNECTOR_IDP": "static",
                                       "CONNECTOR_STATE_DIR": str(tmp_path / "state")})
    served = {route.path.split("/")[1] for route in create_app(settings).routes} | {METRICS_PATH.split("/")[1]}
    assert served - {"", ".well-known"} == OWN_NAMES
