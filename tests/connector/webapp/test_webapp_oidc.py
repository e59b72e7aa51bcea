"""Web sign-in at an OpenID Connect issuer: a real test issuer and a store that trusts it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from .conftest import app_client, oidc_store

pytestmark = pytest.mark.timeout(120)


def test_sign_in_through_the_issuer_binds_the_browser(tmp_path: Path) -> None:
    with oidc_store(tmp_path) as (issuer, store, oidc):
        with app_client(store.url, **oidc) as client:
            page = client.get("/app/signin")
            assert page.status_code == 200 and "Continue with your organisation" in page.text
            assert 'name="token"' not in page.text
            start = client.get("/app/signin/start?access=read")
            assert start.status_code == 303 and start.headers["location"].startswith(issuer.issuer)
            at_issuer = httpx.get(start.headers["location"], follow_redirects=False, timeout=30)
            assert at_issuer.status_code in (302, 303)
            callback = urlsplit(at_issuer.headers["location"])
            assert callback.path == "/app/oidc/callback"

            # Another browser (without this flow's sign-in cookie) can neither finish nor spend it.
            mine = client.cookies.get("brain-app-signin")
            assert mine
            for theirs in (None, "someone-elses-value"):
                client.cookies.delete("brain-app-signin")
                if theirs:
                    client.cookies.set("brain-app-signin", theirs)
                stolen = client.get(f"{callback.path}?{callback.query}")
                assert stolen.status_code == 400 and client.get("/app").status_code == 303
            client.cookies.delete("brain-app-signin")
            client.cookies.set("brain-app-signin", mine)

            done = client.get(f"{callback.path}?{callback.query}")
            assert done.status_code == 303 and done.headers["location"] == "/app"
            home = client.get("/app")
            assert home.status_code == 200, home.text
            assert "Read-only sign-in" in home.text
            # The state is used once.
            assert client.get(f"{callback.path}?{callback.query}").status_code == 400
