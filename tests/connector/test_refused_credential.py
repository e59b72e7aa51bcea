"""The working copies tell the OAuth side when the store refuses a store token (401).

A real store process; the manager's hook records what it is told. A store token
the store refuses is reported once per refusal with the caller's subject,
credential and sign-in, so those sign-ins can end; an organisation sign-in's 401
(its ID token expired) is not reported, and held writes refused with a store
token are still dropped and told, as before.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from connector.engine.writes.ops import connector_memorize
from connector.workcopy.core import SIGN_IN_AGAIN, BrainUnavailable, ManagerTuning
from connector.workcopy.manager import WorkingCopyManager
from tests.connector.conftest import RunningStore, shared_store
from tests.connector.test_workcopy import FlakyUploads, account_for

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(120)


def test_a_refused_store_token_is_reported_and_an_oidc_refusal_is_not(store: RunningStore) -> None:
    alice, bob = store.add_user("alice"), store.add_user("bob")

    async def scenario() -> None:
        told: list[tuple[str, str, str]] = []
        manager = WorkingCopyManager(FlakyUploads(store.url), tuning=ManagerTuning(repull_ttl_s=0.01, brains_ttl_s=0.01))
        manager.on_credential_refused = lambda *args: told.append(args)
        alice_app = replace(account_for(alice), session="family-1")
        await manager.snapshot(alice_app)
        await manager.snapshot(account_for(bob))
        assert told == []
        store.rotate(alice)
        await asyncio.sleep(0.02)
        with pytest.raises(BrainUnavailable, match=SIGN_IN_AGAIN):
            await manager.snapshot(alice_app)
        assert told == [(alice_app.subject, alice.token, "family-1")]
        # The same dead credential as an organisation sign-in: an expired ID token, not reported.
        with pytest.raises(BrainUnavailable):
            await manager.snapshot(replace(alice_app, kind="oidc", subject="oidc:issuer|alice"))
        assert len(told) == 1
        await manager.snapshot(account_for(bob))  # others are untouched
        assert len(told) == 1
        await manager.close()

    asyncio.run(scenario())


def test_a_held_write_refused_for_a_rotated_token_is_dropped_told_and_reported(store: RunningStore) -> None:
    carol = store.add_user("carol")

    async def scenario() -> None:
        told: list[tuple[str, str, str]] = []
        client = FlakyUploads(store.url)
        manager = WorkingCopyManager(client, tuning=ManagerTuning(repull_ttl_s=120.0, held_retry_s=0.01))
        manager.on_credential_refused = lambda *args: told.append(args)
        account = replace(account_for(carol), session="family-2")
        await manager.snapshot(account)
        client.failing = True
        held = await manager.write(account, connector_memorize("Held while the store is away"), "memorize")
        assert not held.synced
        store.rotate(carol)
        client.failing = False
        await asyncio.sleep(0.05)
        await manager.maintain()  # the retry is refused (401): dropped for good, and reported
        assert told == [(account.subject, carol.token, "family-2")]
        notices = manager.take_notices(account.subject)
        assert len(notices) == 1 and "could not be saved and were dropped" in notices[0]
        await manager.close()

    asyncio.run(scenario())
