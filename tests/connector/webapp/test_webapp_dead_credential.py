"""A web session whose store credential died ends at the first 401 (issue 24, item 2).

A real store and a real connector. Browsers signed in to `/app` with a user's token
(then `user rotate`), with an agent key (then `key revoke`) and with a user's token
(then `user remove`). Reloaded 40 times each, the first request that meets the
store's 401 ends the session and sends the person to sign in again (a 303, never a
500); every later request, and a second browser holding the same credential, is
sent to sign in without the dead credential reaching the store again. Before the
fix every page answered 500 and presented the dead credential to the store, which
counts each as a failed login against the connector's address.
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from litestar.testing import TestClient

from connector.app import create_app

from ..conftest import RunningStore, StoreUser, brains_of, direct_memorize
from ..oauth.live import running_connector
from ..oauth.test_dead_credential import _store_answers
from ..test_e2e_sharing import store_cli
from .conftest import app_client, connector_settings, csrf_of, sign_in, signed_in_browser, web_sign_in

pytestmark = [pytest.mark.timeout(120)]

RELOADS = 40


def _reloads(http: httpx.Client) -> list[tuple[int, str]]:
    return [(answer.status_code, answer.headers.get("location", "")) for answer in
            (http.get("/app") for _ in range(RELOADS))]


def test_a_dead_credential_ends_the_web_session_at_the_first_401(store: RunningStore, tmp_path: Path) -> None:
    alice, bob, carol = (store.add_user(name) for name in ("alice", "bob", "carol"))
    key = store_cli(store, "key", "create", "--user", "carol", "--brain", brains_of(store.url, carol.token)[0]["id"],
                    "--scope", "write", "--label", "web")
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as connector:
        base = connector.base_url
        killers = {
            "rotate": (alice.token, lambda: store.rotate(alice)),
            "key revoke": (key, lambda: store_cli(store, "key", "revoke", key[:12])),
            "user remove": (bob.token, lambda: store_cli(store, "user", "remove", "bob")),
        }
        for number, (what, (credential, kill)) in enumerate(killers.items()):
            first = signed_in_browser(base, credential, f"198.51.100.{number}")
            second = signed_in_browser(base, credential, f"198.51.100.{number + 10}")
            kill()
            refused_before = _store_answers(store, 401)
            answers = _reloads(first)
            assert answers[0] == (303, "/app/signin?ended=1"), (what, answers[0])
            assert answers[1:] == [(303, "/app/signin")] * (RELOADS - 1), what
            page = first.get("/app/signin?ended=1")
            assert page.status_code == 200 and "no longer accepts this sign-in" in page.text
            # The other browser with the same credential is signed out too, without asking the store.
            assert second.get("/app").status_code == 303
            assert second.post("/app/brain", data={"brain": "default", "csrf": "x"}).status_code == 401
            assert _store_answers(store, 401) - refused_before == 1, what
            first.close()
            second.close()
        # The person signs in again with what works now and is in.
        assert web_sign_in(base, store.rotate(alice), "198.51.100.30").status_code == 303
        log = connector.log()
        assert '"status": 500' not in log and "Traceback" not in log


def test_every_500_is_logged_with_its_traceback(store: RunningStore, caplog: pytest.LogCaptureFixture) -> None:
    user: StoreUser = store.add_user("dave")
    app = create_app(connector_settings(store.url))

    async def broken(*_args: object) -> None:
        raise RuntimeError("the home view broke")

    app.state.webapp.views.home = broken
    with TestClient(app, base_url="http://127.0.0.1:8788") as client:
        client.follow_redirects = False
        caplog.set_level(logging.ERROR, logger="connector.http")
        page = client.get("/app/signin")
        assert client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": user.token}).status_code == 303
        assert client.get("/app").status_code == 500
    failures = [record for record in caplog.records if record.name == "connector.http" and record.exc_info]
    assert failures, "the 500 was not logged"
    assert "the home view broke" in failures[0].getMessage()
    assert failures[0].path == "/app" and failures[0].status == 500


def test_a_revoked_agent_key_reads_no_page_from_the_connectors_copy(store: RunningStore) -> None:
    """With the default freshness (brain list 30 s, copy 120 s) a page served from the copy held
    asked the store nothing: a revoked key's session kept reading the brain for up to 30 s. Its
    very next page now ends the session, as a key at /mcp is refused at its next call."""
    dana = store.add_user("dana")
    brain_id = brains_of(store.url, dana.token)[0]["id"]
    memory_id = direct_memorize(store.url, dana.token, brain_id, "The vault code is kept in the safe deposit box.")
    key = store_cli(store, "key", "create", "--user", "dana", "--brain", brain_id, "--scope", "read")
    key = key.strip().splitlines()[-1]
    with app_client(store.url, repull_ttl_ms=120_000) as client:
        sign_in(client, key)
        assert "safe deposit box" in client.get(f"/app/memory/{memory_id}").text
        store_cli(store, "key", "revoke", key[:12])
        for page in (f"/app/memory/{memory_id}", "/app/search?query=vault"):
            answer = client.get(page)
            assert answer.status_code == 303 and answer.headers["location"].startswith("/app/signin"), page
            assert "safe deposit box" not in answer.text
