"""The clients people's hosts run, against a real connector and store, signing in through the
connector's page in headless Chromium:

- the official TypeScript SDK client (what Claude Code and Claude Desktop are built on), as a
  host built on it (tests/browser/mcp_clients/ts_sdk_client.mjs) at ``/mcp``;
- ``mcp-remote``, the stdio bridge docs/connecting.md tells Claude Desktop users to run, at the
  URL of one brain (``/mcp/brains/default``), spoken to over stdio by the official MCP Python SDK.

Both register, sign in, use tools, resources and prompts, and refresh their token after the
server refuses it. The npm packages are pinned in tests/browser/package-lock.json (``npm ci
--prefix tests/browser``, run by .ci/run). Under ``CI=true`` a missing node, package or Chromium
fails the test instead of skipping it.

Each runs against a connector at the root of its URL and against one under a path
(``/brain``) behind a real Caddy (tests/support/under_a_path.py), where the OAuth metadata is
found at the domain's root (RFC 9728, RFC 8414) and every URL the connector writes carries the
path.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.support.browser import CHROMIUM, chromium
from tests.support.processes import ServerProcess, free_port
from tests.support.tools import missing_tool
from tests.support.under_a_path import connector_under_a_path

from ..conftest import RunningStore
from .live import flat_query, running_connector

PACKAGES = Path(__file__).resolve().parents[2] / "browser"
TS_CLIENT = PACKAGES / "mcp_clients" / "ts_sdk_client.mjs"
TS_SDK = PACKAGES / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
MCP_REMOTE = PACKAGES / "node_modules" / "mcp-remote" / "dist" / "proxy.js"
TOOLS = {"brain_recall", "brain_status", "brain_read", "brain_use", "brain_memorize", "brain_pin", "brain_unpin",
         "brain_forget", "brain_verify", "search", "fetch",
         "brain_reflect", "brain_extract", "brain_mental_model"}
AUTHORIZE_LINE = "Please authorize this client by visiting:"

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("node-clients")]
# Under a path, one Caddy mode per client (each run costs ~10 s): what a mode changes is what the
# connector sees (``/brain/mcp`` or ``/mcp``), the same for every client, and
# tests/ops/test_connector_under_a_path.py runs the Python SDK through both; what the node clients
# add is their own discovery, resource indicators and refresh. The SDK host (Claude's) gets the
# documented Caddyfile; mcp-remote the stripping proxy, its brain URL's metadata passed on unstripped.
TS_SDK_PLACES = ["root", "documented-caddyfile"]
MCP_REMOTE_PLACES = ["root", "proxy-strips-the-path"]


def require(present: bool, what: str) -> None:
    """Skip without ``what`` on a developer's machine; under CI a missing tool is a failure."""
    if not present:
        missing_tool(f"missing: {what} (npm ci --prefix tests/browser; apt-get install chromium nodejs npm)")


@contextmanager
def served(where: str, tmp_path: Path, store: RunningStore) -> Iterator[tuple[str, ServerProcess]]:
    """The connector ``where`` a test asks: at the root of its own URL (``root``), or under
    ``/brain`` behind Caddy as deploy/Caddyfile.path says (``documented-caddyfile``) or with
    Caddy stripping the path (``proxy-strips-the-path``); its public URL and the connector."""
    if where == "root":
        with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as connector:
            yield connector.base_url, connector
    else:
        with connector_under_a_path(tmp_path, store, strip=where == "proxy-strips-the-path") as (base, connector):
            yield base, connector


@pytest.fixture
def node() -> str:
    """The node binary, with Chromium and the pinned packages present."""
    found = shutil.which("node")
    require(found is not None, "node")
    require(shutil.which(CHROMIUM) is not None, "Debian chromium")
    require(TS_SDK.is_file() and MCP_REMOTE.is_file(), "the npm packages of tests/browser")
    assert found is not None
    return found


def sign_in_in_chromium(authorization_url: str, store_token: str) -> str:
    """What a person does: open the URL the host gave, enter the store token, allow; the page's HTML.

    Returns once the browser reached the host's redirect URI (the host has its code then).
    """
    redirect_uri = flat_query(authorization_url)["redirect_uri"]
    with chromium() as browser:
        page = browser.new_page()
        response = page.goto(authorization_url)
        assert response is not None and response.status == 200, response and response.status
        html = page.content()
        page.fill("#token", store_token)
        with page.expect_navigation(url=lambda url: url.startswith(redirect_uri)):
            page.click("button[value=allow]")
        return html


def private_home(tmp_path: Path) -> dict[str, str]:
    """An environment for node: its own HOME, and an `xdg-open` that opens nothing (the test's
    Chromium does the signing in) so no host browser is ever started."""
    home = tmp_path / "home"
    bin_dir = tmp_path / "bin"
    home.mkdir(mode=0o700)
    bin_dir.mkdir()
    opener = bin_dir / "xdg-open"
    opener.write_text("#!/bin/sh\nexit 0\n")
    opener.chmod(stat.S_IRWXU)
    return {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "BROWSER": str(opener),
            "TMPDIR": str(tmp_path), "NO_COLOR": "1"}


class LineReader:
    """A process's stdout lines as JSON events, read in a thread, waited for with a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert process.stdout is not None
        stream = process.stdout
        threading.Thread(target=lambda: [self.lines.put(line) for line in stream], daemon=True).start()

    def next_event(self, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no event from the client; it printed: {self.seen}"
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.startswith("{"):
                event: dict[str, Any] = json.loads(line)
                assert event["event"] != "error", event["message"]
                return event


@pytest.mark.parametrize("where", TS_SDK_PLACES)
def test_typescript_sdk_host_signs_in_uses_everything_and_refreshes(
    node: str, store: RunningStore, tmp_path: Path, where: str
) -> None:
    alice = store.add_user("alice")
    fact = "The lighthouse keeper's logbook is kept in the red cabinet"
    with served(where, tmp_path, store) as (base, connector):
        process = subprocess.Popen(
            [node, str(TS_CLIENT), base + "/mcp", fact, "where is the lighthouse logbook"],
            cwd=PACKAGES, env={**private_home(tmp_path), "PATH": os.environ.get("PATH", "")},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            events = LineReader(process)
            authorize = events.next_event()
            assert authorize["event"] == "authorize" and authorize["url"].startswith(base + "/authorize?")
            query = flat_query(authorize["url"])
            assert query["resource"] == base + "/mcp" and query["code_challenge_method"] == "S256"
            assert query["scope"] == "brain.read brain.write"  # from the 401 challenge
            page = sign_in_in_chromium(authorize["url"], alice.token)
            assert "TypeScript SDK host" in page
            signed_in = events.next_event()
            assert signed_in == {"event": "signed_in", "scope": "brain.read brain.write", "has_refresh_token": True}

            used = events.next_event()
            assert set(used["tools"]) == TOOLS
            assert used["memorized"]["error"] is False and used["memorized"]["synced"] is True
            assert used["recalled"][0] == used["memorized"]["id"]
            assert used["searched"]["results"][0]["id"] == used["memorized"]["id"]
            assert used["resources"] == ["brain://pinned"] and used["pinned_mime"] == "application/json"
            assert fact in used["memory_text"]
            assert used["prompts"] == ["session_start"] and fact in used["prompt_text"]

            refreshed = events.next_event()
            assert refreshed == {"event": "refreshed", "redirects": 1, "status_error": False, "memory_count": 1,
                                 "new_access_token": True, "rotated_refresh_token": True}
            assert events.next_event()["event"] == "done"
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)
        assert alice.token not in connector.log()


def _authorization_url(errlog: Path, deadline_s: float = 120.0) -> str:
    """The URL mcp-remote asks the person to visit, from its stderr (bounded wait)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        lines = errlog.read_text(errors="replace").splitlines() if errlog.exists() else []
        for index, line in enumerate(lines[:-1]):
            if AUTHORIZE_LINE in line and lines[index + 1].startswith("http"):
                return lines[index + 1].strip()
        time.sleep(0.2)
    raise AssertionError("mcp-remote never asked to authorize: " + errlog.read_text(errors="replace")[-3000:])


@pytest.mark.parametrize("where", MCP_REMOTE_PLACES)
def test_mcp_remote_bridges_a_brain_url_with_sign_in_and_refresh(
    node: str, store: RunningStore, tmp_path: Path, where: str
) -> None:
    bob = store.add_user("bob")
    fact = "Bob waters the fern on the balcony every Sunday"
    environment = {**private_home(tmp_path), "MCP_REMOTE_CONFIG_DIR": str(tmp_path / "mcp-auth")}
    pages: list[str] = []
    authorizations: list[str] = []

    def bob_signs_in(authorization_url: str) -> None:
        authorizations.append(authorization_url)
        pages.append(sign_in_in_chromium(authorization_url, bob.token))

    with served(where, tmp_path, store) as (base, connector):
        url = base + "/mcp/brains/default"
        parameters = StdioServerParameters(
            command=node, args=[str(MCP_REMOTE), url, str(free_port()), "--host", "127.0.0.1", "--allow-http",
                                "--transport", "http-only"],
            env=environment, cwd=str(PACKAGES),
        )

        async def session(errlog: Path, sign_in: bool) -> dict[str, Any]:
            signer = None
            if sign_in:
                signer = asyncio.create_task(asyncio.to_thread(lambda: bob_signs_in(_authorization_url(errlog))))
            with errlog.open("w") as stderr:
                async with Client(stdio_client(parameters, errlog=stderr), mode="legacy") as client:
                    tools = {tool.name for tool in (await client.list_tools()).tools}
                    saved = await client.call_tool("brain_memorize", {"content": fact, "origin": "user"})
                    found = await client.call_tool("brain_recall", {"query": "when is the fern watered"})
                    pinned = await client.read_resource("brain://pinned")
                    prompt = await client.get_prompt("session_start", {"task": "balcony plants"})
                    status = await client.call_tool("brain_status", {})
            if signer is not None:
                await signer
            return {"tools": tools, "saved": saved, "found": found, "pinned": pinned, "prompt": prompt, "status": status}

        first = asyncio.run(session(tmp_path / "mcp-remote-1.log", sign_in=True))
        assert first["tools"] == TOOLS - {"brain_use"}  # the brain's URL: bound to it
        assert not first["saved"].is_error and first["saved"].structured_content["synced"] is True
        memory_id = first["saved"].structured_content["stored"]["id"]
        assert [hit["id"] for hit in first["found"].structured_content["results"]][:1] == [memory_id]
        assert first["pinned"].contents[0].mime_type == "application/json"
        assert fact in first["prompt"].messages[0].content.text
        assert first["status"].structured_content["active_brain"]["name"] == "default"
        assert len(pages) == 1 and '<strong class="brain">default</strong> (only this brain)' in pages[0]
        # The issuer's endpoint (under the path, if any), for the brain's URL as the resource.
        assert authorizations[0].startswith(base + "/authorize?") and flat_query(authorizations[0])["resource"] == url

        # mcp-remote keeps its tokens in its config directory; spoil the access token: the next run
        # gets a 401 and refreshes with the refresh token, without asking the person again.
        (tokens_file,) = (tmp_path / "mcp-auth").rglob("*_tokens.json")
        tokens = json.loads(tokens_file.read_text())
        spoiled = {**tokens, "access_token": "bca1_spoiled"}
        tokens_file.write_text(json.dumps(spoiled))
        second_log = tmp_path / "mcp-remote-2.log"
        second = asyncio.run(session(second_log, sign_in=False))
        assert AUTHORIZE_LINE not in second_log.read_text(errors="replace")
        # The same fact again: the connector sees the exact duplicate and points at the first save.
        assert second["saved"].structured_content["written"] is False
        assert second["saved"].structured_content["stored"]["id"] == memory_id
        assert second["status"].structured_content["memory_count"] == 1
        renewed = json.loads(tokens_file.read_text())
        assert renewed["access_token"] not in (tokens["access_token"], "bca1_spoiled")
        assert renewed["refresh_token"] != tokens["refresh_token"]
        assert bob.token not in connector.log()
