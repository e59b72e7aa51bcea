"""Both servers answer only for their own host names: DNS rebinding (issue 24, item 6).

A page on another name made to resolve to 127.0.0.1 sends `Host: <its name>`. Real
processes: `brain-connector serve --dev` and `brain-store dev` (store and connector)
answer such requests with 421 and nothing else, while loopback names, the public
URL's host, hosts added with `CONNECTOR_ALLOWED_HOSTS` / `STORE_ALLOWED_HOSTS` and the
health checks (probes use internal names) keep working. A connector that knows no
name of its own (no public URL, no allowed hosts, not --dev) answers as before.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import pytest

from common.host_guard import AllowedHosts
from tests.connector.conftest import RunningStore, running_store
from tests.ops.test_dev import brain_store_dev
from tests.support.processes import console_script, free_port, run_server

pytestmark = [pytest.mark.timeout(180)]

EVIL = "rebind.attacker.example"


def _get(base: str, path: str, host: str) -> httpx.Response:
    return httpx.get(base + path, headers={"Host": host}, timeout=30)


def _connector(tmp_path: Path, store: RunningStore, args: list[str], env: dict[str, str]):  # noqa: ANN202
    port = free_port()
    full = {"CONNECTOR_STORE_URL": store.url, "CONNECTOR_STATE_DIR": str(tmp_path / f"state-{port}"),
            "CONNECTOR_STATE_KEY": secrets.token_hex(32), "CONNECTOR_PORT": str(port), "CONNECTOR_HOST": "127.0.0.1",
            **env}
    return run_server([console_script("brain-connector"), "serve", *args], port=port, env=full,
                      log_path=tmp_path / f"connector-{port}.log", health_path="/health/live")


def test_the_dev_connector_answers_only_loopback_names(tmp_path: Path) -> None:
    with running_store(tmp_path) as store, _connector(tmp_path, store, ["--dev"], {}) as server:
        base, port = server.base_url, server.base_url.rsplit(":", 1)[1]
        for path in ("/app/signin", "/authorize", "/.well-known/oauth-authorization-server", "/metrics"):
            refused = _get(base, path, EVIL)
            assert refused.status_code == 421, path
            assert "answers only for its own host names" in refused.text and EVIL not in refused.text
        posted = httpx.post(base + "/mcp", headers={"Host": f"{EVIL}:{port}"}, json={}, timeout=30)
        assert posted.status_code == 421
        assert httpx.post(base + "/app/signin", headers={"Host": EVIL}, data={"csrf": "x"}).status_code == 421
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "[::1]", "app.localhost"):
            assert _get(base, "/app/signin", host).status_code == 200, host
        assert _get(base, "/health/live", EVIL).status_code == 200  # probes use internal names
        assert "Traceback" not in server.log()


def test_a_connector_with_a_public_url_answers_its_names_and_the_extra_ones(tmp_path: Path) -> None:
    env = {"CONNECTOR_IDP": "static", "CONNECTOR_PUBLIC_URL": "https://brain.example.org",
           "CONNECTOR_ALLOWED_HOSTS": "connector:8788"}
    with running_store(tmp_path) as store:
        with _connector(tmp_path, store, [], env) as server:
            base = server.base_url
            assert _get(base, "/app/signin", "brain.example.org").status_code == 200
            assert _get(base, "/app/signin", "BRAIN.example.org.:443").status_code == 200
            assert _get(base, "/app/signin", "connector:8788").status_code == 200
            assert _get(base, "/app/signin", "127.0.0.1").status_code == 200  # the container's own checks
            assert _get(base, "/app/signin", EVIL).status_code == 421
            assert _get(base, "/app/signin", "brain.example.org.evil.example").status_code == 421
            assert _get(base, "/health/ready", EVIL).status_code == 200
        # Knowing no name of its own (no public URL, no allowed hosts), it answers any, as before.
        with _connector(tmp_path, store, [], {"CONNECTOR_IDP": "static"}) as server:
            assert _get(server.base_url, "/app/signin", EVIL).status_code == 200


def test_a_store_with_allowed_hosts_refuses_other_names_on_every_route(tmp_path: Path) -> None:
    with running_store(tmp_path, env={"STORE_ALLOWED_HOSTS": "store:8787", "STORE_WORKERS": "1"}) as store:
        user = store.add_user("alice")
        auth = {"Authorization": f"Bearer {user.token}"}
        brain = httpx.get(store.url + "/api/brains", headers=auth, timeout=30).json()[0]["id"]
        for path in ("/api/brains", f"/api/brains/{brain}/sync", "/auth/me"):
            answer = httpx.get(store.url + path, headers={**auth, "Host": EVIL}, timeout=30)
            assert answer.status_code == 421, path
            assert httpx.get(store.url + path, headers={**auth, "Host": "store:8787"}, timeout=30).status_code in (200, 404)
        assert _get(store.url, "/health", EVIL).status_code == 200


def test_brain_store_dev_answers_only_loopback_names(tmp_path: Path) -> None:
    with brain_store_dev(tmp_path / "dev", free_port(), free_port()) as run:
        auth = {"Authorization": f"Bearer {run.token}"}
        mcp_base = run.mcp_url.removesuffix("/mcp")
        assert httpx.get(run.store_url + "/api/brains", headers={**auth, "Host": EVIL}).status_code == 421
        assert httpx.get(run.store_url + "/api/brains", headers={**auth, "Host": "localhost"}).status_code == 200
        assert _get(mcp_base, "/app/signin", EVIL).status_code == 421
        assert httpx.get(mcp_base + "/app/signin").status_code == 200


def test_allowed_hosts_rules() -> None:
    allowed = AllowedHosts.of(["https://brain.example.org/prefix"], ["connector:8788", "[2001:db8::1]:8788"])
    for host in ("brain.example.org", "brain.example.org:443", "connector", "[2001:db8::1]", "localhost:1",
                 "127.0.0.5", "[::1]:80", None):
        assert allowed.allows(host), host
    for host in ("evil.example", "brain.example.org@evil", "", "brain.example.org/x", "10.0.0.1", "[::2]"):
        assert not allowed.allows(host), host
