"""A read-only sign-in never causes a write (issue #35, item 5): real store, a real connector
process, the official MCP client SDK.

A duplicate reaches the store straight from another device; a `brain.read`-only sign-in's
recalls pull it (and so do a viewer's, through the same connector), and the review queue's
check of pulled memories (connector/mcp/pullreview.py) would queue the pair with a push:
nothing is pushed, the store keeps the device's version. The pair waits: the next call of a
sign-in that may write queues it (pushed under that sign-in)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from connector.engine.tending.review import review_document
from tests.connector.conftest import RunningStore, brains_of, direct_memorize, download_brain
from tests.connector.test_e2e_sharing import share
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured

pytestmark = pytest.mark.timeout(300)

FACT = "The spare house key is under the blue flowerpot by the back door."
# Long enough for a check started by a pull to have pushed its pair (it does within a second or
# two here, as the writer's part below shows).
QUIET_S = 8.0


def test_a_read_only_sign_in_leaves_pulled_pairs_for_a_writer(store: RunningStore, tmp_path: Path) -> None:
    user, viewer = store.add_user("alice"), store.add_user("vic")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    share(store, brain_id, viewer, "viewer")
    original = direct_memorize(store.url, user.token, brain_id, FACT)
    direct_memorize(store.url, user.token, brain_id, "Our dentist is Dr. Okafor on Elm Street.")
    env = {"CONNECTOR_RECALL_MODE": "hybrid", "CONNECTOR_REPULL_TTL_MS": "1"}

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, {"brain.read"})) as reader, \
                mcp_session(base + "/mcp", mint(base, viewer, {"brain.read", "brain.write"})) as looker:
            structured(await looker.call_tool("brain_use", {"brain": brain_id}))
            # The reader and the viewer use the brain with meaning matching (the model is warm) ...
            for session in (reader, looker):
                found = structured(await session.call_tool("brain_recall", {"query": "where is the house key"}))
                assert found["results"][0]["id"] == original
            # ... then another device writes the same fact again, straight to the store.
            copy = direct_memorize(store.url, user.token, brain_id, FACT)
            _, device_version = download_brain(store.url, user.token, brain_id)
            deadline = time.monotonic() + QUIET_S
            pulled = {"reader": False, "viewer": False}
            while time.monotonic() < deadline:
                for name, session in (("reader", reader), ("viewer", looker)):
                    hits = structured(await session.call_tool("brain_recall", {"query": "spare house key flowerpot"}))
                    pulled[name] = pulled[name] or copy in {hit["id"] for hit in hits["results"]}
                await asyncio.sleep(0.5)
            assert pulled == {"reader": True, "viewer": True}, pulled
            brain, checksum = download_brain(store.url, user.token, brain_id)
            assert checksum == device_version, "a read-only sign-in or a viewer pushed a new brain version"
            assert review_document(brain)["pairs"] == []

            # A sign-in that may write: its next call queues the pair the reader's pull found.
            async with mcp_session(base + "/mcp", mint(base, user, {"brain.read", "brain.write"})) as writer:
                deadline = time.monotonic() + 120
                while True:
                    structured(await writer.call_tool("brain_status", {}))
                    brain, checksum = download_brain(store.url, user.token, brain_id)
                    if review_document(brain)["pairs"]:
                        break
                    assert time.monotonic() < deadline, "the pair found on the reader's pull never reached the queue"
                    await asyncio.sleep(0.5)
            [pair] = review_document(brain)["pairs"]
            assert (pair["new"], pair["old"], pair["relation"], pair["via"]) == (copy, original, "duplicate", "pull")

    with connector(tmp_path / "c", store, env=env) as server:
        asyncio.run(scenario(server.base_url))
