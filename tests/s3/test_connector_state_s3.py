"""The connector's work-copy state and shared limits on S3 (SeaweedFS), with no shared directory (issue 27).

Real processes: connectors with ``CONNECTOR_STATE_URL`` on a SeaweedFS bucket and each
its own private state directory. A held write of a connector killed with SIGKILL is
pushed exactly once by another; sign-in attempts from one address across three
connectors get one process's budget; the held-write leases hold across processes on S3
(a holder elsewhere is taken over only when its lease expired); the shared token
buckets grant one budget to several processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.docstore import open_document_store
from connector.workcopy.journal import HeldWriteJournal
from tests.connector.conftest import brains_of, download_brain, memory_ids, start_store
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured
from tests.connector.test_shared_state_dir import holding
from tests.s3.servers import CREDENTIALS, S3Service
from tests.support.signin import wrong_web_sign_ins
from tests.store.unit.test_limits_stored import granted_by_processes

pytestmark = pytest.mark.timeout(300)

ALL = {"brain.read", "brain.write"}
HELD = "The staging database moved to the Frankfurt region in March"
PREFIX = "connector"
SIGNIN_ATTEMPTS_PER_MIN = 10  # the connector's default: one process's budget per address and minute


def _state_env(weed: S3Service, bucket: str) -> dict[str, str]:
    return {**CREDENTIALS, "CONNECTOR_STATE_URL": f"s3://{bucket}/{PREFIX}", "CONNECTOR_S3_ENDPOINT_URL": weed.endpoint,
            "CONNECTOR_S3_REGION": "us-east-1"}


def _s3_state(weed: S3Service, bucket: str) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        return open_document_store(f"s3://{bucket}/{PREFIX}", s3_endpoint_url=weed.endpoint, s3_region="us-east-1")


def test_a_held_write_of_a_killed_connector_is_pushed_once_by_another(tmp_path: Path, weed: S3Service) -> None:
    bucket = weed.new_bucket()
    running, store_manager = start_store(tmp_path)
    user = running.add_user("held")
    brain_id = brains_of(running.url, user.token)[0]["id"]
    env = {**_state_env(weed, bucket), "CONNECTOR_REPULL_TTL_MS": "200"}

    async def held_write(base: str) -> str:
        async with mcp_session(base + "/mcp", mint(base, user, ALL)) as client:
            assert structured(await client.call_tool("brain_memorize", {"content": "Saved while the store was up"}))["synced"]
            store_manager.__exit__(None, None, None)  # type: ignore[attr-defined]
            await asyncio.sleep(0.3)  # past the freshness interval: the connector has to ask the store
            held = await client.call_tool("brain_memorize", {"content": HELD})
            body = structured(held)
            text = held.content[0].text
            assert body["synced"] is False and "pushed automatically" in text and "NOT saved" not in text, text
            return str(body["stored"]["id"])

    try:
        with connector(tmp_path / "survivor", running, env=env) as survivor:
            with connector(tmp_path / "doomed", running, env=env) as doomed:
                held_id = asyncio.run(held_write(doomed.base_url))
                # Acknowledged only once stored: the sealed document is in the bucket now.
                held_keys = [key for key in weed.keys(bucket, f"{PREFIX}/held/") if key.endswith(".held")]
                assert len(held_keys) == 1
                sealed = weed.client().get_object(Bucket=bucket, Key=held_keys[0])["Body"].read()
                assert HELD.encode() not in sealed and user.token.encode() not in sealed
                doomed.kill(signal.SIGKILL)
            assert not (tmp_path / "survivor" / "connector-state" / "held").exists()  # nothing on a shared disk
            running, store_manager = start_store(tmp_path, data=running.data, port=running.port)
            deadline = time.monotonic() + 60
            while held_id not in memory_ids(download_brain(running.url, user.token, brain_id)[0]):
                assert time.monotonic() < deadline, "no connector pushed the held write"
                time.sleep(0.3)
            time.sleep(6)  # more than a maintenance pass (5 s): a second push would show now
            brain, _ = download_brain(running.url, user.token, brain_id)
            memories = brain.read_json("index.json")["memories"]
            assert sum(1 for entry in memories.values() if entry["title"].startswith("The staging database")) == 1
            assert weed.keys(bucket, f"{PREFIX}/held/") == []  # the document and its lease are gone
            assert "held writes recovered from the journal" in survivor.log()
    finally:
        store_manager.__exit__(None, None, None)  # type: ignore[attr-defined]


def test_sign_in_attempts_from_one_address_are_limited_across_three_connectors(tmp_path: Path, weed: S3Service) -> None:
    bucket = weed.new_bucket()
    running, store_manager = start_store(tmp_path)
    address = f"203.0.113.{secrets.randbelow(200) + 20}"
    attempts = SIGNIN_ATTEMPTS_PER_MIN * 3
    try:
        with contextlib.ExitStack() as stack:
            replicas = [stack.enter_context(connector(tmp_path / f"c{index}", running, env=_state_env(weed, bucket)))
                        for index in range(3)]
            started = time.monotonic()  # round robin over the connectors, no stickiness
            checked, limited = wrong_web_sign_ins([replica.base_url for replica in replicas], address, attempts)
            refilled = int((time.monotonic() - started) * SIGNIN_ATTEMPTS_PER_MIN / 60) + 1
    finally:
        store_manager.__exit__(None, None, None)  # type: ignore[attr-defined]
    # One process's budget (plus what refilled meanwhile), not one per connector.
    assert SIGNIN_ATTEMPTS_PER_MIN <= checked <= SIGNIN_ATTEMPTS_PER_MIN + refilled, (checked, limited)
    assert checked + limited == attempts
    assert weed.keys(bucket, f"{PREFIX}/limits/signin-attempts/")  # counted in the bucket


_HOLDER = textwrap.dedent(
    """
    import os, sys, time
    from datetime import UTC, datetime
    from common.docstore import open_document_store
    from connector.engine.writes.ops import connector_memorize
    from connector.workcopy import leases
    from connector.workcopy.journal import HeldWriteJournal
    from connector.workcopy.model import Account, PendingWrite

    url, endpoint, where, lease_s = sys.argv[1:5]
    if where == "elsewhere":  # as a replica on another host: its death is known only from its lease
        leases._host_id = lambda: "another-host"
    journal = HeldWriteJournal(open_document_store(url, s3_endpoint_url=endpoint, s3_region="us-east-1"),
                               bytes(range(32)), lease_s=float(lease_s))
    pending = [PendingWrite(connector_memorize("Held by a replica that dies"), datetime.now(UTC), "memorize")]
    journal.record("f" * 32, Account("static:u1", "token-1"), "brain-1", "default", None, pending)
    print("holding", flush=True)
    time.sleep(120)
    """
)


def _holder(weed: S3Service, bucket: str, where: str, lease_s: float) -> Any:
    """Another process holding one journal document ("f" * 32) on S3 until it is killed."""
    return holding(_HOLDER, f"s3://{bucket}/{PREFIX}", weed.endpoint, where, str(lease_s), env=CREDENTIALS)


@pytest.mark.parametrize("where", ["this-host", "elsewhere"])
def test_a_journal_document_is_held_by_one_process_and_taken_over_when_it_dies(weed: S3Service, where: str) -> None:
    bucket = weed.new_bucket()
    lease_s = 8.0
    spawned = time.monotonic()  # the lease is written after this: it expires after spawned + lease_s
    with _holder(weed, bucket, where, lease_s) as holder:
        written = time.monotonic()  # and before this: it expires by written + lease_s
        other = HeldWriteJournal(_s3_state(weed, bucket), bytes(range(32)), lease_s=lease_s)
        assert other.load() == []  # the holder is alive: its writes are not replayed twice
        holder.kill()
        holder.wait(timeout=30)
        early = time.monotonic() < written + lease_s - 1.0
        taken = other.load()
        if where == "elsewhere":  # a holder on another host: only once its lease has expired
            assert taken == [] or not early
            deadline = time.monotonic() + 30
            while not taken:
                assert time.monotonic() < deadline, "the expired lease was never taken over"
                time.sleep(0.3)
                taken = other.load()
            assert time.monotonic() - spawned >= lease_s
        assert [entry.name for entry in taken] == ["f" * 32] and taken[0].pending[0].label == "memorize"
        assert other.load() == []  # taken once
        assert HeldWriteJournal(_s3_state(weed, bucket), bytes(range(32)), lease_s=lease_s).load() == []  # by one
        other.remove("f" * 32)
    assert weed.keys(bucket, f"{PREFIX}/held/") == []


def test_token_buckets_on_s3_grant_one_budget_to_several_processes(weed: S3Service) -> None:
    location = f"s3://{weed.new_bucket()}/{PREFIX}"
    # 45 attempts from three processes racing on one S3 document: one budget of 20.
    assert 20 <= granted_by_processes(location, weed.endpoint, 20, 15) <= 21


MCP_RATE = 12  # /mcp requests per address and minute, for the test


def test_mcp_requests_from_one_address_get_about_one_budget_across_three_connectors(tmp_path: Path,
                                                                                    weed: S3Service) -> None:
    """Decided at each connector at once, counted across them every second: one budget, late by one interval."""
    bucket = weed.new_bucket()
    running, store_manager = start_store(tmp_path)
    address = f"203.0.113.{secrets.randbelow(200) + 20}"
    env = {**_state_env(weed, bucket), "CONNECTOR_MCP_RATE_PER_MIN": str(MCP_RATE)}
    statuses: list[int] = []
    try:
        with contextlib.ExitStack() as stack:
            replicas = [stack.enter_context(connector(tmp_path / f"c{index}", running, env=env)) for index in range(3)]
            for round_ in range(3):  # each round: a burst at every replica, then more than a sync interval
                for attempt in range(MCP_RATE):
                    base = replicas[attempt % 3].base_url
                    answer = httpx.post(base + "/mcp", json={}, timeout=30, headers={"X-Forwarded-For": address})
                    statuses.append(answer.status_code)
                if round_ < 2:  # nothing follows the last round
                    time.sleep(2.5)
    finally:
        store_manager.__exit__(None, None, None)  # type: ignore[attr-defined]
    passed = [status for status in statuses if status != 429]
    assert set(passed) <= {401}, statuses  # past the limit: asked for a token
    # One budget of 12, plus what the other replicas let through in the one interval before they
    # learned it was spent (4 each here) and a few refilled: not one budget per connector (all 36).
    assert MCP_RATE <= len(passed) <= MCP_RATE + 2 * (MCP_RATE // 3) + 3, statuses
    assert statuses[-MCP_RATE:].count(429) >= MCP_RATE - 3, statuses  # the last round: spent, but what refilled


def test_registrations_from_one_address_get_about_one_budget_across_three_connectors(tmp_path: Path,
                                                                                    weed: S3Service) -> None:
    """The OAuth routes' per-address limits (here /register, 10 a minute) are shared like /mcp's."""
    from connector.oauth.routes import RATE_LIMITS

    budget = RATE_LIMITS["register"]
    bucket = weed.new_bucket()
    running, store_manager = start_store(tmp_path)
    address = f"198.51.100.{secrets.randbelow(200) + 20}"
    statuses: list[int] = []
    try:
        with contextlib.ExitStack() as stack:
            replicas = [stack.enter_context(connector(tmp_path / f"c{index}", running, env=_state_env(weed, bucket)))
                        for index in range(3)]
            for round_ in range(3):  # each round: a burst at every replica, then more than a sync interval
                for attempt in range(budget):
                    answer = httpx.post(replicas[attempt % 3].base_url + "/register", timeout=30,
                                        headers={"X-Forwarded-For": address},
                                        json={"client_name": "flood", "redirect_uris": ["http://127.0.0.1:9/cb"],
                                              "token_endpoint_auth_method": "none"})
                    statuses.append(answer.status_code)
                if round_ < 2:  # nothing follows the last round
                    time.sleep(2.5)
    finally:
        store_manager.__exit__(None, None, None)  # type: ignore[attr-defined]
    registered = [status for status in statuses if status != 429]
    assert set(registered) <= {200, 201}, statuses
    # One budget, plus what the other replicas let through before the next sync: not 3 budgets (all 30).
    assert budget <= len(registered) <= budget + 2 * (budget // 3) + 3, statuses
