"""Helpers for OAuth tests against real processes: the connector, and a headless sign-in."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from tests.support.processes import ServerProcess, console_script, free_port, run_server


@contextmanager
def running_connector(
    tmp_path: Path, store_url: str, *, state_dir: Path, port: int | None = None, extra_env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """`brain-connector serve` with the static provider on a free loopback port."""
    port = port or free_port()
    env = {
        "CONNECTOR_STORE_URL": store_url,
        "CONNECTOR_IDP": "static",
        "CONNECTOR_STATE_DIR": str(state_dir),
        "CONNECTOR_PORT": str(port),
        "CONNECTOR_HOST": "127.0.0.1",
        **(extra_env or {}),
    }
    with run_server([console_script("brain-connector"), "serve"], port=port, env=env,
                    log_path=tmp_path / f"connector-{port}.log", health_path="/health/live") as server:
        yield server


def login_id_of(html: str) -> str:
    """The login id hidden in the sign-in page's form."""
    match = re.search(r'name="login_id" value="([^"]+)"', html)
    assert match, "no sign-in form in the page"
    return match.group(1)


def flat_query(url: str) -> dict[str, str]:
    """A URL's query as a flat dict."""
    return {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}


async def sign_in_with_form(authorization_url: str, token: str) -> dict[str, str]:
    """Do what a person does on the page (GET it, POST the token); the client's callback query."""
    async with httpx.AsyncClient(timeout=30) as http:
        page = await http.get(authorization_url)
        assert page.status_code == 200, page.text
        form = re.search(r'<form method="post" action="([^"]+)"', page.text)
        assert form, "no sign-in form in the page"
        action = urljoin(str(page.url), form.group(1))
        done = await http.post(action, data={"login_id": login_id_of(page.text), "token": token, "action": "allow"})
        assert done.status_code == 303, done.text
        return flat_query(done.headers["location"])
