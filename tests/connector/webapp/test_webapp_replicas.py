"""The web app on two connectors sharing one state directory: a browser's requests may land on either.

Two in-process connector apps (the same state key and directory) over a real store
process, and a real OpenID Connect test issuer for the organisation sign-in. The
browser's cookies are copied between the two clients, as a load balancer without
sticky sessions would mix its requests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from litestar.testing import TestClient

from tests.connector.conftest import RunningStore, brains_of, download_brain, memory_ids

from .conftest import app_client, oidc_store, sign_in

pytestmark = pytest.mark.timeout(120)


@contextmanager
def two_replicas(store_url: str, state_dir: Path, **changes: Any) -> Iterator[tuple[TestClient[Any], TestClient[Any]]]:
    with ExitStack() as stack:
        yield (stack.enter_context(app_client(store_url, state_dir=state_dir, **changes)),
               stack.enter_context(app_client(store_url, state_dir=state_dir, **changes)))


def same_browser(source: TestClient[Any], target: TestClient[Any]) -> None:
    """The browser's next request goes to ``target`` with the cookies it holds from ``source``."""
    target.cookies.clear()
    for name, value in source.cookies.items():
        target.cookies.set(name, value)


def test_a_web_session_works_and_ends_at_every_replica(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    state_dir = tmp_path / "state"
    with two_replicas(store.url, state_dir) as (a, b):
        csrf = sign_in(a, alice.token)
        cookie = a.cookies.get("brain-app")
        assert cookie
        same_browser(a, b)
        assert b.get("/app").status_code == 200

        # Sessions on disk: named by a hash, sealed (neither cookie nor store token readable), 0600.
        files = [path for path in (state_dir / "web-sessions").iterdir() if not path.name.startswith(".")]
        assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
        assert (state_dir / "web-sessions").stat().st_mode & 0o777 == 0o700
        assert cookie not in files[0].name
        raw = files[0].read_bytes()
        assert cookie.encode() not in raw and alice.token.encode() not in raw

        # An import checked at one replica is confirmed at the other, once.
        payload = json.dumps({"format": "brain-store/memories", "version": 1, "memories": [
            {"title": "Boiler", "type": "learning", "path": "home/", "content": "The boiler is serviced in May."}]})
        preview = b.post("/app/import", data={"csrf": csrf}, files={"file": ("b.json", payload, "application/json")})
        assert preview.status_code == 200, preview.text
        match = re.search(r'name="reference" value="([^"]+)"', preview.text)
        assert match
        same_browser(b, a)
        done = a.post("/app/import/confirm", data={"csrf": csrf, "reference": match.group(1)})
        assert done.status_code == 303, done.text
        same_browser(a, b)
        assert b.post("/app/import/confirm", data={"csrf": csrf, "reference": match.group(1)}).status_code == 409
        brain, _ = download_brain(store.url, alice.token, brains_of(store.url, alice.token)[0]["id"])
        assert len(memory_ids(brain)) == 1

        # Signed out at one replica: the same cookie opens nothing at the other.
        assert b.post("/app/signout", data={"csrf": csrf}).status_code == 303
        for client in (a, b):
            client.cookies.clear()
            client.cookies.set("brain-app", cookie)
            assert client.get("/app").status_code == 303
        assert [path for path in (state_dir / "web-sessions").iterdir() if not path.name.startswith(".")] == []


def test_an_organisation_sign_in_started_at_one_replica_finishes_at_the_other_once(tmp_path: Path) -> None:
    with oidc_store(tmp_path) as (_, store, oidc), two_replicas(store.url, tmp_path / "state", **oidc) as (a, b):
        assert a.get("/app/signin").status_code == 200
        start = a.get("/app/signin/start")
        assert start.status_code == 303
        at_issuer = httpx.get(start.headers["location"], follow_redirects=False, timeout=30)
        callback = urlsplit(at_issuer.headers["location"])
        same_browser(a, b)
        done = b.get(f"{callback.path}?{callback.query}")
        assert done.status_code == 303 and done.headers["location"] == "/app", done.text
        assert b.get("/app").status_code == 200
        same_browser(b, a)
        assert a.get("/app").status_code == 200
        # The state is used once, at whichever replica it comes back to.
        assert a.get(f"{callback.path}?{callback.query}").status_code == 400
