"""Agent keys as Bearer tokens at the connector's MCP URLs (issue #36, item 3): real store and
connector processes, keys made and revoked with `brain-store key`, the official MCP client SDK.

A write key writes to its brain (and only there), a read key reads and every write is refused
with nothing changed, another brain's URL is a 404, a revoked key is out on its very next call,
and the script and curl call of docs/connecting.md work as printed."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.connector.conftest import RunningStore, auth, brains_of, direct_memorize, download_brain, memory_ids, shared_store
from tests.connector.test_e2e_sharing import share, store_cli, text
from tests.connector.test_e2e_tools import mcp_session, module_connector, structured
from tests.support.processes import REPO_ROOT, ServerProcess, console_script

# Every test here makes its own users and looks only at their brains: one store for the module,
store = pytest.fixture(shared_store, name="store")
# and one connector: none of them restarts it or changes its settings.
served = pytest.fixture(module_connector, scope="module", name="served")

pytestmark = pytest.mark.timeout(300)

DOC = REPO_ROOT / "docs" / "connecting.md"


def _doc_block(language: str) -> str:
    """The code block of ``language`` in the "Scripts: agent keys" section of docs/connecting.md."""
    section = DOC.read_text().split("## Scripts: agent keys", 1)[1].split("\n## ", 1)[0]
    match = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert match, f"no {language} block in the section"
    return match.group(1)


def test_keys_reach_exactly_their_brains_with_exactly_their_scope_and_revocation_is_at_once(
        store: RunningStore, served: ServerProcess) -> None:
    alice = store.add_user("alice")
    default_id = brains_of(store.url, alice.token)[0]["id"]
    private = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "private"}, timeout=30).json()
    direct_memorize(store.url, alice.token, default_id, "The staging database is refreshed every night")
    write_key = store_cli(store, "key", "create", "--user", alice.name, "--brain", default_id, "--scope", "write",
                          "--label", "nightly")
    read_key = store_cli(store, "key", "create", "--user", alice.name, "--brain", default_id, "--scope", "read")

    async def with_write_key(base: str) -> None:
        async with mcp_session(base + "/mcp", write_key) as client:
            status = structured(await client.call_tool("brain_status", {}))
            assert [brain["id"] for brain in status["brains"]] == [default_id]  # not the private brain
            saved = structured(await client.call_tool("brain_memorize", {"content": "Nightly build 411 passed"}))
            memory_id = saved["stored"]["id"]
        stored, _ = download_brain(store.url, alice.token, default_id)
        assert memory_id in memory_ids(stored)
        path = (stored.read_json("index.json") or {})["memories"][memory_id]["path"]
        assert f"agent key {write_key[:12]} (nightly)" in stored.read(path).decode()
        # The brain's URL by name works; another brain of the same user is not there for the key.
        async with mcp_session(base + "/mcp/brains/default", write_key) as client:
            hits = structured(await client.call_tool("brain_recall", {"query": "nightly build"}))
            assert memory_id in [hit["id"] for hit in hits["results"]]
        for name in ("private", private["id"]):
            refused = httpx.post(f"{base}/mcp/brains/{name}", headers={"Authorization": f"Bearer {write_key}"},
                                 json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
            assert refused.status_code == 404, refused.text

    async def with_read_key(base: str) -> None:
        _, before = download_brain(store.url, alice.token, default_id)
        async with mcp_session(base + "/mcp", read_key) as client:
            hits = structured(await client.call_tool("brain_recall", {"query": "staging database"}))
            assert hits["count"] >= 1
            refused = await client.call_tool("brain_memorize", {"content": "A read key tries to write"})
            assert refused.is_error and "brain.write" in text(refused)
            pinned = await client.call_tool("brain_pin", {"id": hits["results"][0]["id"]})
            assert pinned.is_error
        _, after = download_brain(store.url, alice.token, default_id)
        assert after == before

    async def revoked_at_once(base: str) -> None:
        async with mcp_session(base + "/mcp", write_key) as client:
            structured(await client.call_tool("brain_status", {}))
            store_cli(store, "key", "revoke", write_key[:12])
            with pytest.raises(Exception):
                await client.call_tool("brain_memorize", {"content": "Written after the revocation"})
        answer = httpx.post(f"{base}/mcp", headers={"Authorization": f"Bearer {write_key}"},
                            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
        assert answer.status_code == 401 and 'error="invalid_token"' in answer.headers["www-authenticate"]
        stored, _ = download_brain(store.url, alice.token, default_id)
        assert not any("after the revocation" in (stored.read(entry["path"]) or b"").decode()
                       for entry in (stored.read_json("index.json") or {})["memories"].values())

    asyncio.run(with_write_key(served.base_url))
    asyncio.run(with_read_key(served.base_url))
    asyncio.run(revoked_at_once(served.base_url))
    # The key's upload is in the brain's audit log, by its prefix.
    audit = subprocess.run([console_script("brain-store"), "audit", default_id, "--data", str(store.data)],
                           capture_output=True, text=True, timeout=60, check=True)
    assert write_key[:12] in audit.stdout

def test_the_script_and_curl_call_of_the_docs_work_with_a_key(store: RunningStore, served: ServerProcess, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    default_id = brains_of(store.url, alice.token)[0]["id"]
    key = store_cli(store, "key", "create", "--user", alice.name, "--brain", default_id, "--scope", "write")
    script = tmp_path / "nightly.py"
    script.write_text(_doc_block("python"))
    env = {**os.environ, "BRAIN_KEY": key, "BRAIN_MCP_URL": served.base_url + "/mcp"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Saved" in done.stdout or "saved" in done.stdout, done.stdout
    curl = _doc_block("sh").replace("\\\n", " ")
    called = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, env=env, timeout=120)
    assert called.returncode == 0, called.stderr
    body = called.stdout
    if body.lstrip().startswith("event:") or "data:" in body:
        body = next(line[5:] for line in body.splitlines() if line.startswith("data:"))
    answer = json.loads(body)
    assert "Nightly build 412 passed" in json.dumps(answer["result"])


def test_a_key_for_a_brain_shared_with_its_user_writes_there_at_mcp(store: RunningStore, served: ServerProcess) -> None:
    """Bob is an editor of Alice's `team` and makes a write key for it. At `/mcp` the key's one
    brain is in use (a key reaches only its brains and cannot create one); a key with two such
    brains is told to choose one, and nothing is created at the store."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    teams = [httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": name}, timeout=30).json()["id"]
             for name in ("team", "ops")]
    for brain_id in teams:
        share(store, brain_id, bob, "editor")
    one = store_cli(store, "key", "create", "--user", bob.name, "--brain", teams[0], "--scope", "write").strip().splitlines()[-1]
    two = store_cli(store, "key", "create", "--user", bob.name, "--brain", teams[0], "--brain", teams[1],
                    "--scope", "write").strip().splitlines()[-1]
    bob_brains = {brain["id"] for brain in brains_of(store.url, bob.token)}

    async def write_with(key: str, content: str) -> tuple[bool, str, dict | None]:
        async with mcp_session(served.base_url + "/mcp", key) as client:
            result = await client.call_tool("brain_memorize", {"content": content})
            return result.is_error, text(result), None if result.is_error else structured(result)

    refused, said, saved = asyncio.run(write_with(one, "The nightly job rotates the logs at 02:00."))
    assert not refused, said
    assert saved is not None and saved["stored"]["id"] in memory_ids(download_brain(store.url, alice.token, teams[0])[0])
    refused, said, _ = asyncio.run(write_with(two, "The weekly job prunes old snapshots."))
    assert refused and "an agent key cannot create a brain" in said and "brain_use" in said, said
    assert teams[0] in said and teams[1] in said
    assert {brain["id"] for brain in brains_of(store.url, bob.token)} == bob_brains  # no brain made for Bob
