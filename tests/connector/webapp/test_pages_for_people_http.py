"""Issue #36 items 6 and 7 over HTTP, the connector in process over a real store: the sign-in
page returns to the page asked for, and only to a page of the app (no open redirect); people
get pages at ``/``, at the MCP URLs and at unknown ``/app`` addresses, while MCP clients and
programs keep getting JSON."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from connector.webapp.guard import Site, return_target

from ..conftest import RunningStore, brains_of, shared_store
from ..test_e2e_sharing import store_cli
from .conftest import app_client, csrf_of, sign_in

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

MCP_CLIENT_ACCEPT = "application/json, text/event-stream"
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

EVIL_TARGETS = [
    "https://evil.example/app", "//evil.example/app", "/\\evil.example", "/app\\..\\evil", "/app/../evil",
    "/app/%2e%2e/signout", "/app/%2E./x", "/appx", "/ap", "app/memory/x", "/app/signin", "/app/signin?next=/app",
    "/app/signout", "/app/oidc/callback", "/app/memory/x\n", "/app/memory/\u00e9", " /app", "javascript:alert(1)",
    "/app/" + "a" * 2100,
]


@pytest.mark.parametrize("target", EVIL_TARGETS)
def test_only_pages_of_the_app_are_return_targets(target: str) -> None:
    site = Site(origin="http://127.0.0.1:8788", root="/app", secure=False)
    assert return_target(site, target) is None


def test_pages_of_the_app_are_return_targets_even_behind_a_path_prefix() -> None:
    site = Site(origin="https://example.org", root="/brain/app", secure=True)
    assert return_target(site, "/brain/app/memory/m-1?done=pin") == "/brain/app/memory/m-1?done=pin"
    assert return_target(site, "/brain/app") == "/brain/app"
    assert return_target(site, "/app/memory/m-1") is None  # not under this site's root


def test_sign_in_returns_to_the_page_asked_for_and_nowhere_else(running_store: RunningStore) -> None:
    alice = running_store.add_user("alice")
    with app_client(running_store.url) as client:
        asked = client.get("/app/search?query=boiler%20service&mode=exact")
        assert asked.status_code == 303
        location = asked.headers["location"]
        assert location == "/app/signin?next=" + quote("/app/search?query=boiler%20service&mode=exact", safe="")
        page = client.get(location)
        assert 'name="next" value="/app/search?query=boiler%20service&amp;mode=exact"' in page.text
        # A wrong token first: the page keeps where the person was going.
        wrong = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": "bst_" + "x" * 43,
                                                 "access": "write", "next": "/app/search?query=boiler"})
        assert wrong.status_code == 401 and 'name="next" value="/app/search?query=boiler"' in wrong.text
        assert "A token works only with the store that made it" in wrong.text
        done = client.post("/app/signin", data={"csrf": csrf_of(wrong.text), "token": alice.token, "access": "write",
                                                "next": "/app/search?query=boiler"})
        assert done.status_code == 303 and done.headers["location"] == "/app/search?query=boiler"
        # Signed in already: the sign-in page sends a next target straight on.
        assert client.get("/app/signin?next=/app/brains").headers["location"] == "/app/brains"
    for evil in EVIL_TARGETS[:8]:
        with app_client(running_store.url) as client:
            page = client.get("/app/signin?next=" + quote(evil, safe=""))
            assert 'name="next"' not in page.text
            done = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": alice.token,
                                                    "access": "write", "next": evil})
            assert done.status_code == 303 and done.headers["location"] == "/app", evil


def test_people_get_pages_programs_keep_their_json(running_store: RunningStore) -> None:
    alice = running_store.add_user("alice")
    with app_client(running_store.url) as client:
        welcome = client.get("/", headers={"Accept": BROWSER_ACCEPT})
        assert welcome.status_code == 200 and welcome.headers["content-type"].startswith("text/html")
        assert "Open the web app" in welcome.text and "http://127.0.0.1:8788/mcp" in welcome.text
        assert "default-src 'none'" in welcome.headers["content-security-policy"]
        assert "ようこそ" in client.get("/?lang=ja").text
        assert "Welcome" in client.get("/?lang=en").text  # (the choice is remembered: back to English)

        for url in ("/mcp", "/mcp/brains/default"):
            page = client.get(url, headers={"Accept": BROWSER_ACCEPT})
            assert page.status_code == 200 and "This address is for AI assistants" in page.text, url
            assert f"http://127.0.0.1:8788{url}" in page.text
            # An MCP client (or anything not asking for HTML) gets the JSON 401 and its challenge.
            for headers in ({"Accept": MCP_CLIENT_ACCEPT}, {}, {"Accept": BROWSER_ACCEPT, "Authorization": "Bearer x"}):
                refused = client.get(url, headers=headers)
                assert refused.status_code == 401, (url, headers)
                assert refused.headers["content-type"] == "application/json"
                assert refused.headers["www-authenticate"].startswith("Bearer resource_metadata=")
            posted = client.post(url, headers={"Accept": BROWSER_ACCEPT}, json={})
            assert posted.status_code == 401 and posted.json()["error"] == "unauthorized"

        signed_out = client.get("/app/no-such-page")
        assert signed_out.status_code == 404 and "Page not found" in signed_out.text
        sign_in(client, alice.token)
        for url in ("/app/no-such-page", "/app/memory/x/y/z", "/app/static/missing.css/more"):
            page = client.get(url)
            assert page.status_code == 404 and "Page not found" in page.text, url
            assert 'href="/app/brains"' in page.text  # signed in: the app's navigation
        assert "ページが見つかりません" in client.get("/app/nothing?lang=ja").text
        assert "找不到页面" in client.get("/app/nothing?lang=zh-Hans").text
        client.get("/?lang=en")
        # Elsewhere programs get the JSON they got before.
        other = client.get("/no-such-thing")
        assert other.status_code == 404 and other.json()["status_code"] == 404
        assert re.match(r"application/json", other.headers["content-type"])


def test_an_agent_key_creating_a_brain_is_told_why_not(store: RunningStore) -> None:
    """The store refuses every agent key a new brain (403): the Brains page says that, not that
    the account has as many brains as the store allows."""
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    key = store_cli(store, "key", "create", "--user", alice.name, "--brain", brain_id, "--scope", "write")
    key = key.strip().splitlines()[-1]
    with app_client(store.url) as client:
        csrf = sign_in(client, key)
        refused = client.post("/app/brains", data={"csrf": csrf, "name": "scratch"})
        assert refused.status_code == 400
        assert "An agent key cannot create brains" in refused.text
        assert "as many brains as the store allows" not in refused.text
    assert [brain["name"] for brain in brains_of(store.url, alice.token)] == ["default"]
