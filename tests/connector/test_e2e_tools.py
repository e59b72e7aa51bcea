"""End to end: a real connector process and a real store process, driven by the official MCP
client SDK (signed in with the connector's OAuth flow, or with tokens sealed by the same key)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client

from connector.engine.format.archive import load_directory
from connector.engine.recall.exact import recall
from connector.oauth.tokens import AccessClaims, AccessTokenCodec
from tests.connector.conftest import (
    RunningStore,
    StoreUser,
    auth,
    brains_of,
    download_brain,
    memory_ids,
    shared_store,
    upload_brain,
)
from tests.connector.oauth import live
from tests.support.fixtures import project_parity_dir
from tests.support.processes import ServerProcess, console_script, free_port, run_server

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(300)

STATE_KEY = bytes(range(32))
ALL_TOOLS = {
    "brain_recall",
    "brain_status",
    "brain_read",
    "brain_use",
    "brain_memorize",
    "brain_pin",
    "brain_unpin",
    "brain_forget",
    "brain_verify",
    "search",
    "fetch",
    "brain_reflect",
    "brain_extract",
    "brain_mental_model",
}
FIXTURE = project_parity_dir() / "brains" / "brain-1-06"


@contextmanager
def connector(
    tmp_path: Path, store: RunningStore, *, port: int | None = None, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """`brain-connector serve` (static provider) on a free loopback port."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    full_env = {
        "CONNECTOR_STORE_URL": store.url,
        "CONNECTOR_IDP": "static",
        "CONNECTOR_STATE_DIR": str(tmp_path / "connector-state"),
        "CONNECTOR_STATE_KEY": STATE_KEY.hex(),
        "CONNECTOR_PORT": str(port),
        "CONNECTOR_HOST": "127.0.0.1",
        "CONNECTOR_REPULL_TTL_MS": "500",
        **(env or {}),
    }
    with run_server(
        [console_script("brain-connector"), "serve"],
        port=port,
        env=full_env,
        log_path=tmp_path / f"connector-{port}.log",
        health_path="/health/live",
    ) as server:
        yield server


def module_connector(module_store: RunningStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One connector with the settings above on the module's shared store, for tests that each sign in
    their own users and change nothing connector-wide (no restart, no setting of their own):
    ``served = pytest.fixture(module_connector, scope="module", name="served")``."""
    with connector(tmp_path_factory.mktemp("connector"), module_store) as server:
        yield server


# The tests below that take ``served`` share one: each signs in its own user and changes nothing connector-wide.
served = pytest.fixture(module_connector, scope="module", name="served")


def mint(base: str, user: StoreUser, scopes: set[str], *, audience: str | None = None, ttl: int = 3600) -> str:
    """An access token sealed with the connector's key, as its /token endpoint would issue."""
    claims = AccessClaims(
        sub=f"static:{user.id}",
        scope=frozenset(scopes),
        aud=audience or base + "/mcp",
        exp=int(time.time()) + ttl,
        client_id="test-client",
        client_name="pytest-e2e",
        idp="static",
        store_credential=user.token,
    )
    return AccessTokenCodec(STATE_KEY).issue(claims)


@asynccontextmanager
async def mcp_session(url: str, token: str, mode: str = "auto", *, sent: list[str] | None = None) -> Any:
    """An MCP client session with a bearer token (``sent``: gets the path of every HTTP request it sends)."""

    async def note(request: httpx2.Request) -> None:
        if sent is not None:
            sent.append(request.url.path)

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60),
                                  event_hooks={"request": [note]}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
            yield client


def signed_in_provider(mcp_url: str, store_token: str) -> OAuthClientProvider:
    """The SDK's OAuth client, with a headless 'browser' that signs in with the store token."""
    return live.signed_in_provider(mcp_url, store_token, live.MemoryStorage(), client_name="Tools E2E client")


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    # The text rendering is present beside the structured content.
    assert result.content and result.content[0].type == "text" and result.content[0].text
    return result.structured_content


def index_entry(store: RunningStore, user: StoreUser, brain_id: str, memory_id: str) -> dict[str, Any] | None:
    brain, _ = download_brain(store.url, user.token, brain_id)
    return (brain.read_json("index.json") or {}).get("memories", {}).get(memory_id)


def test_all_eight_tools_through_the_oauth_flow(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("alice")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    port = free_port()

    async def first_session(url: str) -> str:
        provider = signed_in_provider(url, user.token)
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert names == ALL_TOOLS
                status = structured(await client.call_tool("brain_status", {}))
                assert status["active_brain"]["id"] == brain_id
                assert status["identity"]["status"] == "ok"  # a new user: an empty brain, welcomed
                assert "is ready and empty" in status["identity"]["note"]

                saved = structured(
                    await client.call_tool(
                        "brain_memorize",
                        {
                            "content": "The payments team deploys with blue-green releases every Thursday",
                            "tags": '["deploy", "payments"]',
                            "type": "decision",
                            "origin": "user",
                            "explanation": "models add this; it must be ignored",
                        },
                    )
                )
                memory_id = saved["stored"]["id"]
                assert saved["synced"] is True and saved["stored"]["type"] == "decision"
                stored_brain, _ = download_brain(store.url, user.token, brain_id)
                assert memory_id in memory_ids(stored_brain)
                assert stored_brain.read(saved["stored"]["path"]) is not None

                hits = structured(await client.call_tool("brain_recall", {"query": "blue-green releases payments"}))
                assert hits["results"][0]["id"] == memory_id and hits["count"] >= 1

                pinned = structured(await client.call_tool("brain_pin", {"id": memory_id}))
                assert pinned["synced"] is True
                assert index_entry(store, user, brain_id, memory_id)["pinned"] is True
                stored_brain, _ = download_brain(store.url, user.token, brain_id)
                assert memory_id in [pin["id"] for pin in stored_brain.read_json("pinned.json")["pins"]]
                structured(await client.call_tool("brain_unpin", {"id": memory_id}))
                assert index_entry(store, user, brain_id, memory_id)["pinned"] is False

                suspicious = structured(
                    await client.call_tool(
                        "brain_memorize", {"content": "Release notes say build 42 fixed the login bug", "origin": "tool-output"}
                    )
                )
                pending_id = suspicious["stored"]["id"]
                assert suspicious["stored"].get("quarantine_pending") is True
                listing = structured(await client.call_tool("brain_verify", {}))
                assert pending_id in [item["id"] for item in listing["pending"]]
                approved = structured(
                    await client.call_tool("brain_verify", {"action": "approve", "ids": [pending_id, "mem_20200101_000000"]})
                )
                assert [item["id"] for item in approved["results"]] == [pending_id]
                assert approved["errors"][0]["id"] == "mem_20200101_000000"
                assert index_entry(store, user, brain_id, pending_id)["vetted"] is True

                rejected_source = structured(
                    await client.call_tool("brain_memorize", {"content": "A vendor page claims X", "origin": "external"})
                )
                rejected_id = rejected_source["stored"]["id"]
                structured(await client.call_tool("brain_verify", {"action": "reject", "ids": f'["{rejected_id}"]'}))

                forgotten = structured(await client.call_tool("brain_forget", {"id": memory_id}))
                assert forgotten["archived_path"].startswith("_archived/")
                stored_brain, _ = download_brain(store.url, user.token, brain_id)
                archive = stored_brain.read_json("_archived/index.json")["memories"]
                assert archive[memory_id]["archived_reason"] == "forget"
                assert archive[rejected_id]["archived_reason"] == "verify_reject"
                assert memory_id not in memory_ids(stored_brain)
                assert stored_brain.read(forgotten["archived_path"]) is not None

                bad = await client.call_tool("brain_pin", {"id": "mem_19990101_ffffff"})
                assert bad.is_error and "unknown memory id" in bad.content[0].text
                archived = await client.call_tool("brain_pin", {"id": memory_id})
                assert archived.is_error and "is archived (forgotten)" in archived.content[0].text
                # No tool restores a memory: the message names where the user can.
                assert "the user can restore it from its page in the web app" in archived.content[0].text
                empty = await client.call_tool("brain_recall", {"query": ""})
                assert empty.is_error

                work = httpx.post(f"{store.url}/api/brains", headers=auth(user.token), json={"name": "work"}, timeout=30)
                used = structured(await client.call_tool("brain_use", {"brain": "work"}))
                assert used["brain"]["id"] == work.json()["id"] and used["persisted"] is True
                return work.json()["id"]

    async def after_restart(url: str, work_id: str) -> None:
        # A fresh sign-in with the same user after a restart: the choice persisted.
        provider = signed_in_provider(url, user.token)
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:  # type: ignore[arg-type]
                status = structured(await client.call_tool("brain_status", {}))
                assert status["active_brain"]["id"] == work_id
                assert status["identity"]["status"] == "multiple-brains"
                assert "store token" in status["identity"]["note"]

    with connector(tmp_path, store, port=port) as server:
        work_id = asyncio.run(first_session(server.base_url + "/mcp"))
    with connector(tmp_path, store, port=port) as server:
        asyncio.run(after_restart(server.base_url + "/mcp", work_id))


def test_read_only_token_is_refused_on_write_tools(store: RunningStore, served: ServerProcess) -> None:
    user = store.add_user("reader")
    brain_id = upload_brain(store.url, user.token, load_directory(FIXTURE))

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read"})) as client:
            assert structured(await client.call_tool("brain_recall", {"query": "testing"}))["count"] >= 0
            structured(await client.call_tool("brain_status", {}))
            structured(await client.call_tool("brain_verify", {"action": "list"}))
            for name, arguments in [
                ("brain_memorize", {"content": "should not be saved"}),
                ("brain_pin", {"id": "mem_20250101_aaaaaa"}),
                ("brain_unpin", {"id": "mem_20250101_aaaaaa"}),
                ("brain_forget", {"id": "mem_20250101_aaaaaa"}),
                ("brain_use", {"brain": "default"}),
                ("brain_verify", {"action": "approve", "ids": ["mem_20250101_aaaaaa"]}),
            ]:
                result = await client.call_tool(name, arguments)
                assert result.is_error, name
                assert "brain.write" in result.content[0].text

    _, before = download_brain(store.url, user.token, brain_id)
    asyncio.run(scenario(served.base_url))
    _, after = download_brain(store.url, user.token, brain_id)
    assert before == after


def test_forgetting_a_protected_memory_asks_for_the_users_confirmation(store: RunningStore, served: ServerProcess) -> None:
    """The refusal read "forget it with force to archive it anyway", which reads as the next step to take,
    where the tool's description asks for the user's confirmation first."""
    user = store.add_user("protected")
    brain_id = upload_brain(store.url, user.token, load_directory(FIXTURE))
    _, before = download_brain(store.url, user.token, brain_id)

    async def scenario(base: str) -> str:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            refused = await client.call_tool("brain_forget", {"id": "mem_20250923_92e36d"})  # salience 0.92
            assert refused.is_error
            return refused.content[0].text

    message = asyncio.run(scenario(served.base_url))
    assert "is protected; nothing was changed" in message
    assert "only once the user confirms" in message and "anyway" not in message
    assert download_brain(store.url, user.token, brain_id)[1] == before


def test_ids_on_a_new_users_empty_brain_are_unknown_ids(store: RunningStore, served: ServerProcess) -> None:
    """A new account's brain holds nothing yet (no index.json): pin, unpin, forget and verify of any
    id answered "brain not initialized (no index.json)", as if the brain were broken."""
    user = store.add_user("newcomer")

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            for name in ("brain_pin", "brain_unpin", "brain_forget"):
                refused = await client.call_tool(name, {"id": "mem_20250101_aaaaaa"})
                assert refused.is_error and refused.content[0].text == "unknown memory id mem_20250101_aaaaaa", name
            verified = await client.call_tool("brain_verify", {"action": "approve", "ids": ["mem_20250101_aaaaaa"]})
            assert verified.is_error and verified.content[0].text == (
                "Nothing was approved, nothing was changed (unknown memory id: mem_20250101_aaaaaa). brain_verify "
                "with action list shows the memories pending verification.")

    asyncio.run(scenario(served.base_url))


def test_verify_of_only_ids_it_cannot_act_on_is_an_error_that_changes_nothing(
        store: RunningStore, served: ServerProcess) -> None:
    """brain_verify approve/reject whose ids are all unknown (or not pending) answered an ordinary
    result, which a model may take for done, while the CLI's verify exits 1: an error naming them."""
    user = store.add_user("verifier")
    brain_id = brains_of(store.url, user.token)[0]["id"]

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            plain = structured(await client.call_tool("brain_memorize", {"content": "The office opens at eight."}))
            pending = structured(await client.call_tool("brain_memorize", {
                "content": "A vendor page claims the API is free", "origin": "external"}))["stored"]
            assert pending["quarantine_pending"] is True
            _, before = download_brain(store.url, user.token, brain_id)
            for action, verb in (("approve", "approved"), ("reject", "rejected")):
                refused = await client.call_tool("brain_verify", {
                    "action": action, "ids": ["mem_20200101_000000", plain["stored"]["id"], "mem_20200101_000001"]})
                assert refused.is_error and refused.content[0].text == (
                    f"Nothing was {verb}, nothing was changed (unknown memory id: mem_20200101_000000, "
                    f"mem_20200101_000001; not pending verification: {plain['stored']['id']}). brain_verify with "
                    "action list shows the memories pending verification.")
            _, after = download_brain(store.url, user.token, brain_id)
            assert after == before
            assert [item["id"] for item in structured(await client.call_tool("brain_verify", {}))["pending"]] == [
                pending["id"]]
            # One id it can act on: done, and the others listed as errors beside it.
            mixed = structured(await client.call_tool("brain_verify", {
                "action": "approve", "ids": [pending["id"], "mem_20200101_000000"]}))
            assert [item["id"] for item in mixed["results"]] == [pending["id"]]
            assert mixed["errors"] == [{"id": "mem_20200101_000000", "error": "unknown memory id"}]

    asyncio.run(scenario(served.base_url))


@pytest.mark.parametrize("sent, kept", [
    # "議事録、レビュー" (a Japanese keyboard's comma) was one tag; "部署，支付" (a Chinese one's) too.
    ("議事録、レビュー，部署, 支付", ["議事録", "レビュー", "部署", "支付"]),
    # Python's quotes are not JSON (models write lists so): split at the comma, they were saved as
    # the tags "['deploy'" and "'payments']".
    ("['deploy', 'payments']", ["deploy", "payments"]),
])
def test_tags_sent_as_one_string_are_its_items(store: RunningStore, served: ServerProcess, sent: str,
                                               kept: list[str]) -> None:
    user = store.add_user("string-tags")
    brain_id = brains_of(store.url, user.token)[0]["id"]

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            saved = structured(await client.call_tool("brain_memorize", {
                "content": "四半期レビューの議事録：売上は前年比１２０％。", "tags": sent}))
            entry = index_entry(store, user, brain_id, saved["stored"]["id"])
            assert entry is not None and entry["tags"] == kept

    asyncio.run(scenario(served.base_url))


def test_recall_refuses_a_date_it_cannot_read_naming_the_argument(store: RunningStore, served: ServerProcess) -> None:
    """as_of / as_known_of that are no ISO 8601 date: the refusal said only "not an ISO 8601 instant:
    'last tuesday'" (which of the two?), and a brain with no memories yet answered as if it were fine."""
    user = store.add_user("dates")

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            empty = await client.call_tool("brain_recall", {"query": "deploys", "as_of": "last tuesday"})
            assert empty.is_error and empty.content[0].text.startswith("'as_of' is not an ISO 8601 date or time")
            structured(await client.call_tool("brain_memorize", {"content": "Deploys happen on Thursdays."}))
            refused = await client.call_tool("brain_recall", {"query": "deploys", "as_known_of": "2025-13-01"})
            assert refused.is_error and refused.content[0].text == (
                "'as_known_of' is not an ISO 8601 date or time (such as 2025-03-01 or 2025-03-01T09:30:00Z): "
                "'2025-13-01'")
            padded = structured(await client.call_tool("brain_recall", {"query": "deploys", "as_known_of": " 2099-01-01 "}))
            assert padded["count"] == 1

    asyncio.run(scenario(served.base_url))


def test_memorize_refuses_a_date_it_cannot_read_as_recall_does(store: RunningStore, served: ServerProcess) -> None:
    """brain_memorize's refusal of valid_from / valid_until gave no example and not the value
    ("'valid_from' is not an ISO 8601 date in the years 1 to 9999 (UTC)"), unlike brain_recall's."""
    user = store.add_user("validity")
    brain_id = brains_of(store.url, user.token)[0]["id"]

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            for name, value in (("valid_from", "next tuesday"), ("valid_until", "2025-02-30"),
                                ("valid_until", "2025-01-01\n2. Saved")):
                refused = await client.call_tool("brain_memorize", {"content": "The office moves in spring.", name: value})
                assert refused.is_error and refused.content[0].text == (
                    f"'{name}' is not an ISO 8601 date or time in the years 1 to 9999 (such as 2025-03-01 or "
                    f"2025-03-01T09:30:00Z): {value!r}"), refused.content[0].text
                assert "\n" not in refused.content[0].text
            recall_refused = await client.call_tool("brain_recall", {"query": "office", "as_of": "next tuesday"})
            assert recall_refused.content[0].text == (
                "'as_of' is not an ISO 8601 date or time (such as 2025-03-01 or 2025-03-01T09:30:00Z): 'next tuesday'")
            saved = structured(await client.call_tool("brain_memorize", {
                "content": "The office moves in spring.", "valid_from": "2026-03-01"}))
            assert saved["stored"]["id"]

    asyncio.run(scenario(served.base_url))
    assert len(download_brain(store.url, user.token, brain_id)[0].read_json("index.json")["memories"]) == 1


# A valid call of each tool that declares limits; each limited argument is then set over and at its limit.
LIMITED_CALLS: dict[str, dict[str, Any]] = {
    "brain_recall": {"query": "limits"},
    "search": {"query": "limits"},
    "brain_memorize": {"content": "A fact about the limits of arguments"},
    "brain_read": {"id": "mem_20250101_aaaaaa"},
    "brain_pin": {"id": "mem_20250101_aaaaaa"},
    "brain_unpin": {"id": "mem_20250101_aaaaaa"},
    "brain_forget": {"id": "mem_20250101_aaaaaa"},
    "fetch": {"id": "mem_20250101_aaaaaa"},
    "brain_use": {"brain": "default"},
    "brain_verify": {"action": "approve", "ids": ["mem_20250101_aaaaaa"]},
    "brain_extract": {"text": "We chose Postgres."},
}


def test_input_schemas_declare_the_limits_the_tools_enforce(store: RunningStore, served: ServerProcess) -> None:
    """A model learns an argument's limit from the schema (maxLength, maxItems), not from a refusal:
    content (50,000), title, query and the rest were refused past limits no schema declared."""
    user = store.add_user("limits")

    async def scenario(base: str) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        declared: set[tuple[str, str]] = set()
        items_declared: set[tuple[str, str]] = set()
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            for tool in (await client.list_tools()).tools:
                for name, schema in tool.input_schema.get("properties", {}).items():
                    item_limit = schema.get("items", {}).get("maxLength")
                    if item_limit is not None:
                        # A list's items are held to their declared length too, the limit named.
                        items_declared.add((tool.name, name))
                        refused = await client.call_tool(tool.name, {**LIMITED_CALLS[tool.name], name: ["a" * (item_limit + 1)]})
                        message = refused.content[0].text
                        assert refused.is_error and str(item_limit) in message, (tool.name, name, message)
                    limit = schema.get("maxLength", schema.get("maxItems"))
                    if limit is None:
                        continue
                    declared.add((tool.name, name))
                    over, at = (("a" * (limit + 1), "a" * limit) if "maxLength" in schema
                                else ([f"t{n}" for n in range(limit + 1)], [f"t{n}" for n in range(limit)]))
                    refused = await client.call_tool(tool.name, {**LIMITED_CALLS[tool.name], name: over})
                    message = refused.content[0].text
                    assert refused.is_error and (str(limit) in message or f"{limit:,}" in message), (tool.name, name)
                    taken = await client.call_tool(tool.name, {**LIMITED_CALLS[tool.name], name: at})
                    assert "too long" not in taken.content[0].text and "too many" not in taken.content[0].text
        return declared, items_declared

    declared, items_declared = asyncio.run(scenario(served.base_url))
    assert {("brain_memorize", "tags"), ("brain_memorize", "supersedes"), ("brain_verify", "ids")} <= items_declared
    assert {("brain_memorize", "content"), ("brain_memorize", "title"), ("brain_memorize", "tags"),
            ("brain_memorize", "project"), ("brain_memorize", "supersedes"), ("brain_recall", "query"),
            ("brain_recall", "as_of"), ("search", "query"), ("brain_read", "id"), ("fetch", "id"),
            ("brain_use", "brain"), ("brain_verify", "ids")} <= declared


def test_recall_through_mcp_equals_the_engine(store: RunningStore, served: ServerProcess) -> None:
    user = store.add_user("parity")
    brain_id = upload_brain(store.url, user.token, load_directory(FIXTURE))
    stored, _ = download_brain(store.url, user.token, brain_id)
    queries = [("database migration", 10, None), ("performance latency cache", 5, None), ("testing", 25, "api")]

    async def scenario(base: str) -> None:
        token = mint(base, user, {"brain.read", "brain.write"})
        for mode in ("legacy", "auto"):
            async with mcp_session(base + "/mcp", token, mode) as client:
                for query, limit, project in queries:
                    # Exact mode (named: hybrid is the default) is the engine's `brain recall` exactly.
                    arguments: dict[str, Any] = {"query": query, "limit": limit, "mode": "exact"}
                    if project:
                        arguments["project"] = project
                    # The connector's clock lies between these two instants; a 3-decimal value may tick over
                    # between them, so the answer must equal the engine's at one of them.
                    before = datetime.now(UTC)
                    result = structured(await client.call_tool("brain_recall", arguments))
                    after = datetime.now(UTC)
                    candidates = [
                        json.loads(json.dumps(recall(stored, query, top=limit, project=project, now=moment)))
                        for moment in (before, after)
                    ]
                    # Scores and order are the engine's exactly; content rides beside them.
                    contents = [
                        {key: hit.pop(key) for key in ("content", "content_truncated", "content_length") if key in hit}
                        for hit in result["results"]
                    ]
                    assert result["results"] in candidates
                    assert result["count"] == len(candidates[0])
                    assert all("content" in content for content in contents)

    asyncio.run(scenario(served.base_url))


def test_http_surface_auth_and_protocol_versions(store: RunningStore, served: ServerProcess) -> None:
    user = store.add_user("surface")

    async def protocol_checks(base: str) -> None:
        token = mint(base, user, {"brain.read", "brain.write"})
        async with mcp_session(base + "/mcp", token, "legacy") as client:
            assert client.session.protocol_version == "2025-11-25"
        async with mcp_session(base + "/mcp", token, "auto") as client:
            assert client.session.protocol_version == "2026-07-28"
            tools = (await client.list_tools()).tools
            for tool in tools:
                assert tool.output_schema and tool.annotations and tool.annotations.open_world_hint is False

    base = served.base_url
    expected = (f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource", '
                'scope="brain.read brain.write"')
    # Without credentials every method gets the challenge (mcp-remote probes with GET), with the
    # scopes to ask for and no error code (RFC 6750 section 3.1).
    for method in ("GET", "DELETE", "POST"):
        probe = httpx.request(method, base + "/mcp", timeout=30)
        assert probe.status_code == 401 and probe.headers["www-authenticate"] == expected, method
    signed = {"Authorization": f"Bearer {mint(base, user, {'brain.read'})}"}
    for method in ("GET", "DELETE"):
        response = httpx.request(method, base + "/mcp", headers=signed, timeout=30)
        assert response.status_code == 405 and response.headers["allow"] == "POST"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    missing = httpx.post(base + "/mcp", json=body, headers=headers, timeout=30)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == expected
    for bad in (
        mint(base, user, {"brain.read"}, audience="http://elsewhere.example/mcp"),
        mint(base, user, {"brain.read"}, audience=base + "/mcp/brains/default"),
        mint(base, user, {"brain.read"}, ttl=-10),
        "bca1_forged",
    ):
        refused = httpx.post(base + "/mcp", json=body, headers={**headers, "Authorization": f"Bearer {bad}"}, timeout=30)
        assert refused.status_code == 401, refused.text
        assert refused.headers["www-authenticate"] == expected + ', error="invalid_token"'
    ok = httpx.post(
        base + "/mcp",
        json=body,
        headers={**headers, "Authorization": f"Bearer {mint(base, user, {'brain.read'})}"},
        timeout=30,
    )
    assert ok.status_code == 200 and ok.headers["x-content-type-options"] == "nosniff"
    # An older protocol version the SDK still negotiates.
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}},
    }
    older = httpx.post(
        base + "/mcp",
        json=init,
        headers={"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {mint(base, user, {'brain.read'})}"},
        timeout=30,
    )
    assert older.status_code == 200 and older.json()["result"]["protocolVersion"] == "2025-03-26"
    assert "brain_recall" in older.json()["result"]["instructions"]
    for path in ("/health", "/health/live", "/health/ready"):
        assert httpx.get(base + path, timeout=30).status_code == 200
    asyncio.run(protocol_checks(base))
    log = served.log()
    assert user.token not in log


def test_tools_allowlist(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("limited")

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {"brain_recall", "brain_status"}
            refused = await client.call_tool("brain_memorize", {"content": "x"})
            assert refused.is_error and "Unknown tool" in refused.content[0].text

    with connector(tmp_path, store, env={"CONNECTOR_TOOLS": "brain_recall,brain_status"}) as server:
        asyncio.run(scenario(server.base_url))


def test_serve_refuses_to_start_without_an_identity_provider(tmp_path: Path) -> None:
    def serve(env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([console_script("brain-connector"), "serve", *options], env=env,
                              capture_output=True, text=True, timeout=60)

    env = {"PATH": "/usr/bin:/bin", "CONNECTOR_STORE_URL": "http://127.0.0.1:9", "HOME": str(tmp_path)}
    done = serve(env, "--port", str(free_port()))
    assert done.returncode != 0 and "identity provider" in done.stderr
    no_store = serve({"PATH": "/usr/bin:/bin", "CONNECTOR_IDP": "static", "HOME": str(tmp_path)})
    assert no_store.returncode != 0 and "CONNECTOR_STORE_URL" in no_store.stderr
    proxy = serve({**env, "CONNECTOR_IDP": "static", "CONNECTOR_TRUST_PROXY": "true"})
    assert proxy.returncode != 0 and "CONNECTOR_TRUST_PROXY" in proxy.stderr


def test_dev_mode_starts_and_says_so(store: RunningStore, tmp_path: Path) -> None:
    port = free_port()
    with run_server(
        [console_script("brain-connector"), "serve", "--dev", "--port", str(port)],
        port=port,
        env={"CONNECTOR_STORE_URL": store.url, "CONNECTOR_IDP": ""},
        log_path=tmp_path / "dev.log",
        health_path="/health/live",
    ) as server:
        assert "DEVELOPMENT MODE" in server.log()
        assert f"http://127.0.0.1:{port}/mcp" in server.log()


def test_assistants_saving_the_same_fact_at_once_write_it_once(store: RunningStore, served: ServerProcess) -> None:
    """Claude and ChatGPT (two sessions) saving one fact at the same moment: each checked the brain before
    the other's write, so both answered "Remembered" and the brain held the fact twice."""
    user = store.add_user("twice")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    fact = {"content": "The user prefers dark mode in every editor.", "origin": "user"}

    async def scenario(base: str) -> list[dict[str, Any]]:
        token = mint(base, user, {"brain.read", "brain.write"})
        async with mcp_session(base + "/mcp", token) as first, mcp_session(base + "/mcp", token) as second:
            answers = await asyncio.gather(*(client.call_tool("brain_memorize", fact)
                                             for client in (first, second, first, second)))
        return [structured(answer) for answer in answers]

    answers = asyncio.run(scenario(served.base_url))
    assert len({answer["stored"]["id"] for answer in answers}) == 1
    assert [answer.get("written", True) for answer in answers].count(True) == 1
    stored, _ = download_brain(store.url, user.token, brain_id)
    assert memory_ids(stored) == {answers[0]["stored"]["id"]}


def test_two_connector_processes_writing_at_once_lose_nothing(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("twin")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    per_writer = 50

    async def writer(base: str, label: str) -> list[str]:
        ids = []
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as client:
            for number in range(per_writer):
                result = structured(
                    await client.call_tool("brain_memorize", {"content": f"Writer {label} fact {number} about {label}{number}"})
                )
                ids.append(result["stored"]["id"])
        return ids

    async def scenario(first: str, second: str) -> list[str]:
        batches = await asyncio.gather(writer(first, "a"), writer(second, "b"))
        return [memory_id for batch in batches for memory_id in batch]

    with connector(tmp_path / "one", store) as one, connector(tmp_path / "two", store) as two:
        acknowledged = asyncio.run(scenario(one.base_url, two.base_url))
        # Held writes (if a push kept losing) are retried in the background; wait for them, bounded.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stored, _ = download_brain(store.url, user.token, brain_id)
            if set(acknowledged) <= memory_ids(stored):
                break
            time.sleep(0.5)
    assert len(set(acknowledged)) == 2 * per_writer
    stored, _ = download_brain(store.url, user.token, brain_id)
    assert set(acknowledged) <= memory_ids(stored)
    assert stored.read_json("index.json")["memory_count"] == 2 * per_writer
