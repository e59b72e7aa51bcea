"""Working copies against a real store process: pulls, freshness, conflicts, held writes."""

from __future__ import annotations

import asyncio
import io
import socket
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from connector.engine.format.brain import Brain
from connector.engine.recall.exact import recall
from connector.engine.recall.indexcache import index_for
from connector.engine.writes.ops import Forget, Pin, connector_memorize
from connector.mcp.tools import BrainTools, Caller
from connector.workcopy.accounts import AccessLost
from connector.workcopy.core import BrainUnavailable, ManagerTuning
from connector.workcopy.manager import WorkingCopyManager
from connector.workcopy.model import Account
from connector.workcopy.store_client import StoreClient, StoreUnreachable
from connector.workcopy import sync as sync_module
from connector.workcopy.sync import brain_bytes
from tests.connector.conftest import (
    RunningStore,
    StoreUser,
    auth,
    brains_of,
    direct_memorize,
    download_brain,
    memory_ids,
    shared_store,
    start_store,
    upload_brain,
    upload_raw,
)
from tests.support.fixtures import project_parity_dir
from tests.support.store_cli import brain_store

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

ALL = frozenset({"brain.read", "brain.write"})


def account_for(user: Any) -> Account:
    return Account(subject=f"static:{user.id}", credential=user.token, kind="static", client_name="pytest")


def users_with_a_fact(store: RunningStore, prefix: str, count: int) -> list[StoreUser]:
    """``count`` new users (``prefix0``, ``prefix1``, ...), each with one memory in their brain."""
    users = [store.add_user(f"{prefix}{number}") for number in range(count)]
    for user in users:
        direct_memorize(store.url, user.token, brains_of(store.url, user.token)[0]["id"], f"A fact of {user.name}")
    return users


def manager_for(store: RunningStore, **tuning: Any) -> WorkingCopyManager:
    settings = {"repull_ttl_s": 120.0, "retry_base_s": 0.01, "retry_cap_s": 0.05, "held_retry_s": 0.05, **tuning}
    return WorkingCopyManager(StoreClient(store.url, timeout_s=10), tuning=ManagerTuning(**settings))


class FlakyUploads(StoreClient):
    """The real store, except that uploads fail while ``failing`` is set (a network cut on push)."""

    failing = False

    async def upload(self, *args: Any, **kwargs: Any) -> Any:
        if self.failing:
            raise StoreUnreachable("the store could not be reached (simulated)")
        return await super().upload(*args, **kwargs)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_pull_and_not_modified(store: RunningStore) -> None:
    user = store.add_user("alice")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    direct_id = direct_memorize(store.url, user.token, brain_id, "The staging database is rebuilt every night")

    async def scenario() -> None:
        client = StoreClient(store.url)
        first = await client.download(user.token, brain_id)
        assert first.data is not None and first.checksum
        again = await client.download(user.token, brain_id, first.checksum)
        assert again.not_modified and again.checksum == first.checksum

        manager = manager_for(store, repull_ttl_s=0.05)
        account = account_for(user)
        snap = await manager.snapshot(account)
        assert snap.brain_id == brain_id and direct_id in memory_ids(snap.brain)
        assert snap.key == first.checksum  # the recall index is keyed by the archive checksum
        await asyncio.sleep(0.1)
        later = await manager.snapshot(account)
        # The TTL passed, the conditional pull answered 304: the very same parsed brain is kept.
        assert later.brain is snap.brain
        await client.aclose()
        await manager.close()

    run(scenario())


def test_freshness_after_ttl_shows_a_direct_push(store: RunningStore) -> None:
    user = store.add_user("bob")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, brain_id, "Lunch is at noon on Fridays")

    clock = [1000.0]

    async def scenario() -> None:
        # A controlled monotonic clock: the test decides when the TTL has passed, not the machine's load.
        manager = WorkingCopyManager(
            StoreClient(store.url), tuning=ManagerTuning(repull_ttl_s=120.0), monotonic=lambda: clock[0]
        )
        tools = BrainTools(manager)
        caller = Caller(account_for(user), ALL)
        found = await tools.call("brain_recall", {"query": "kubernetes cluster upgrade"}, caller)
        assert found.structured_content["count"] == 0
        new_id = direct_memorize(store.url, user.token, brain_id, "The kubernetes cluster upgrade is planned for March")
        clock[0] += 119.0
        within_ttl = await tools.call("brain_recall", {"query": "kubernetes cluster upgrade"}, caller)
        assert within_ttl.structured_content["count"] == 0
        clock[0] += 2.0
        after_ttl = await tools.call("brain_recall", {"query": "kubernetes cluster upgrade"}, caller)
        assert after_ttl.structured_content["results"][0]["id"] == new_id
        await manager.close()

    run(scenario())


def test_dirty_copy_is_never_overwritten_by_a_pull(store: RunningStore) -> None:
    user = store.add_user("carol")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, brain_id, "First fact from the laptop")

    async def scenario() -> None:
        client = FlakyUploads(store.url)
        manager = WorkingCopyManager(
            client, tuning=ManagerTuning(repull_ttl_s=0.01, held_retry_s=60.0, retry_base_s=0.01)
        )
        account = account_for(user)
        await manager.snapshot(account)
        client.failing = True
        outcome = await manager.write(account, connector_memorize("Held fact written while the push fails"), "memorize")
        held_id = outcome.result["stored"][0]["id"]
        assert not outcome.synced and outcome.pending_writes == 1 and outcome.held_reason
        # Another device pushes meanwhile; the TTL passes; the copy must keep the held write.
        other_id = direct_memorize(store.url, user.token, brain_id, "Second fact from the desktop")
        await asyncio.sleep(0.05)
        snap = await manager.snapshot(account)
        assert held_id in memory_ids(snap.brain)
        assert snap.pending_writes == 1
        # The store comes back: the held write is pushed on top of the other device's change.
        client.failing = False
        assert await manager.flush() == 0
        stored, _ = download_brain(store.url, user.token, brain_id)
        assert {held_id, other_id} <= memory_ids(stored)
        await manager.close()

    run(scenario())


def test_conflicting_writers_lose_nothing_and_keep_ids(store: RunningStore) -> None:
    user = store.add_user("dave")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    per_writer = 15

    async def connector_writer(label: str) -> list[str]:
        manager = manager_for(store, retry_cap_s=0.3, held_retry_s=0.05)
        account = account_for(user)
        ids = []
        for number in range(per_writer):
            outcome = await manager.write(
                account, connector_memorize(f"Fact {number} written by connector {label} about topic {label}{number}"), "m"
            )
            # Acknowledged: either synced now or held and retried (never lost).
            ids.append(outcome.result["stored"][0]["id"])
        for _ in range(50):
            if await manager.flush() == 0:
                break
            await asyncio.sleep(0.05)
        assert await manager.flush() == 0
        await manager.close()
        return ids

    async def direct_writer() -> list[str]:
        ids = []
        for number in range(5):
            ids.append(
                await asyncio.to_thread(direct_memorize, store.url, user.token, brain_id, f"Device fact number {number}")
            )
        return ids

    async def scenario() -> list[list[str]]:
        return await asyncio.gather(connector_writer("a"), connector_writer("b"), direct_writer())

    results = run(scenario())
    acknowledged = [memory_id for batch in results for memory_id in batch]
    assert len(set(acknowledged)) == 2 * per_writer + 5
    stored, _ = download_brain(store.url, user.token, brain_id)
    assert set(acknowledged) <= memory_ids(stored)
    index = stored.read_json("index.json")
    assert index["memory_count"] == len(acknowledged)


def test_replayed_memorize_keeps_its_id(store: RunningStore) -> None:
    user = store.add_user("erin")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, brain_id, "Base fact")

    async def scenario() -> None:
        manager = manager_for(store)
        account = account_for(user)
        await manager.snapshot(account)
        # Another device pushes after our pull: our push gets 412 and is replayed.
        other = await asyncio.to_thread(direct_memorize, store.url, user.token, brain_id, "Concurrent fact")
        outcome = await manager.write(account, connector_memorize("Our fact that must keep its id"), "memorize")
        ours = outcome.result["stored"][0]["id"]
        assert outcome.synced
        stored, _ = download_brain(store.url, user.token, brain_id)
        assert {ours, other} <= memory_ids(stored)
        entry = stored.read_json("index.json")["memories"][ours]
        assert entry["title"] == "Our fact that must keep its id"
        await manager.close()

    run(scenario())


def test_held_writes_when_the_store_is_down_are_pushed_later(tmp_path: Path) -> None:
    first, closer = start_store(tmp_path)
    user = first.add_user("frank")
    brain_id = brains_of(first.url, user.token)[0]["id"]
    direct_memorize(first.url, user.token, brain_id, "Before the outage")

    async def write_while_down() -> tuple[WorkingCopyManager, BrainTools, str]:
        manager = manager_for(first, held_retry_s=0.05)
        tools = BrainTools(manager)
        caller = Caller(account_for(user), ALL)
        await tools.call("brain_status", {}, caller)
        closer.__exit__(None, None, None)  # type: ignore[attr-defined]
        result = await tools.call("brain_memorize", {"content": "Written during the outage"}, caller)
        assert not result.is_error
        assert result.structured_content["synced"] is False
        assert "held" in result.content[0].text and "not yet synced" in result.content[0].text
        # A purge pass must not drop it.
        manager.tuning.idle_purge_s = 0
        await manager.maintain()
        assert any(copy.dirty for copy in manager.copies.values())
        return manager, tools, result.structured_content["stored"]["id"]

    async def scenario() -> None:
        manager, tools, held_id = await write_while_down()
        second, closer2 = start_store(tmp_path, data=first.data, port=first.port)
        try:
            await asyncio.sleep(0.1)
            await manager.maintain()
            assert not any(copy.dirty for copy in manager.copies.values())
            stored, _ = download_brain(second.url, user.token, brain_id)
            assert held_id in memory_ids(stored)
            await manager.close()
        finally:
            closer2.__exit__(None, None, None)  # type: ignore[attr-defined]

    run(scenario())


def test_first_write_of_an_account_without_a_brain_creates_one(store: RunningStore) -> None:
    user = store.add_user("gina")
    for record in brains_of(store.url, user.token):
        assert httpx.delete(f"{store.url}/api/brains/{record['id']}", headers=auth(user.token), timeout=30).status_code in (200, 204)

    async def scenario() -> None:
        manager = manager_for(store)
        tools = BrainTools(manager)
        caller = Caller(account_for(user), ALL)
        status = await tools.call("brain_status", {}, caller)
        assert status.structured_content["identity"]["status"] == "no-cloud-brain"
        assert "store token" in status.structured_content["identity"]["note"]
        empty = await tools.call("brain_recall", {"query": "anything"}, caller)
        assert "no brain" in empty.structured_content["note"]
        saved = await tools.call("brain_memorize", {"content": "My first memory ever"}, caller)
        assert saved.structured_content["synced"] is True
        records = brains_of(store.url, user.token)
        assert len(records) == 1 and records[0]["checksum"]
        stored, _ = download_brain(store.url, user.token, records[0]["id"])
        assert saved.structured_content["stored"]["id"] in memory_ids(stored)
        status = await tools.call("brain_status", {}, caller)
        assert status.structured_content["identity"]["status"] == "ok"
        assert status.structured_content["memory_count"] == 1
        await manager.close()

    run(scenario())


class _CountingUploads(StoreClient):
    """A store client counting its uploads."""

    uploads = 0

    async def upload(self, *args: Any, **kwargs: Any) -> Any:
        self.uploads += 1
        return await super().upload(*args, **kwargs)


class _NoChange:
    """A write that changes nothing."""

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        return {"id": "none"}


def test_nothing_is_pushed_when_packing_is_unchanged(store: RunningStore) -> None:
    user = store.add_user("hana")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, brain_id, "A fact")

    async def scenario() -> None:
        client = _CountingUploads(store.url)
        manager = WorkingCopyManager(client, tuning=ManagerTuning())
        account = account_for(user)
        snap = await manager.snapshot(account)
        # The store's archive was packed by our engine, so an unchanged brain packs to the same bytes.
        assert snap.brain is not None
        outcome = await manager.write(account, _NoChange(), "noop")
        assert outcome.synced and client.uploads == 0
        await manager.close()

    run(scenario())


def test_a_push_hashes_only_a_pack_that_may_be_its_base(store: RunningStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pack whose length or last bytes differ from the store's archive under the copy is
    pushed without hashing it first (the store's answer gives its checksum); one that may be
    that archive is hashed, and not pushed when it is."""
    user = store.add_user("hashless")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, brain_id, "A fact the store holds")
    hashed: list[int] = []
    checksum = sync_module._checksum
    monkeypatch.setattr(sync_module, "_checksum", lambda data: hashed.append(len(data)) or checksum(data))

    async def scenario() -> None:
        client = _CountingUploads(store.url)
        manager = WorkingCopyManager(client, tuning=ManagerTuning())
        account = account_for(user)
        await manager.snapshot(account)
        hashed.clear()
        written = await manager.write(account, connector_memorize("A second fact, written here"), "memorize")
        assert written.synced and client.uploads == 1
        assert hashed == []  # neither before the push nor after it
        stored, stored_checksum = download_brain(store.url, user.token, brain_id)
        assert written.key == stored_checksum
        assert written.result["stored"][0]["id"] in memory_ids(stored)
        # After its own push the copy knows the end of the store's archive: an unchanged pack is
        # hashed (it may be that archive), found equal, and not sent.
        unchanged = await manager.write(account, _NoChange(), "noop")
        assert unchanged.synced and client.uploads == 1 and len(hashed) == 1
        await manager.close()

    run(scenario())


def test_brain_choice_multiple_brains_and_fallback(store: RunningStore) -> None:
    user = store.add_user("ivan")
    default_id = brains_of(store.url, user.token)[0]["id"]
    work = httpx.post(f"{store.url}/api/brains", headers=auth(user.token), json={"name": "work"}, timeout=30).json()
    direct_memorize(store.url, user.token, default_id, "Personal fact about gardening")
    direct_memorize(store.url, user.token, work["id"], "Work fact about the billing service")

    async def scenario() -> None:
        manager = manager_for(store, brains_ttl_s=0)
        tools = BrainTools(manager)
        caller = Caller(account_for(user), ALL)
        status = await tools.call("brain_status", {}, caller)
        assert status.structured_content["active_brain"]["id"] == default_id  # the oldest
        assert status.structured_content["identity"]["status"] == "multiple-brains"
        assert "brain_use" in status.structured_content["identity"]["note"]
        assert "default" in status.structured_content["identity"]["note"]
        wrong = await tools.call("brain_use", {"brain": "holiday"}, caller)
        assert wrong.is_error and "work" in wrong.content[0].text and "default" in wrong.content[0].text
        used = await tools.call("brain_use", {"brain": "WORK"}, caller)
        assert not used.is_error and used.structured_content["brain"]["id"] == work["id"]
        hits = await tools.call("brain_recall", {"query": "billing service"}, caller)
        assert hits.structured_content["count"] == 1
        assert await manager.choices.get_chosen_brain(caller.account.subject) == work["id"]
        # The chosen brain is deleted elsewhere: fall back to the oldest.
        httpx.delete(f"{store.url}/api/brains/{work['id']}", headers=auth(user.token), timeout=30)
        status = await tools.call("brain_status", {}, caller)
        assert status.structured_content["active_brain"]["id"] == default_id
        await manager.close()

    run(scenario())


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in entries:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


# Archives a store may refuse at upload; the connector must not trust them on its own either.
REFUSED_BY_ENGINE = {
    "parent-path": lambda: _tar([_file("index.json", b"{}"), _file("../../escape.md", b"x")]),
    "absolute-path": lambda: _tar([_file("index.json", b"{}"), _file("/tmp/escape.md", b"x")]),
    "symlink": lambda: _tar([_file("index.json", b"{}"), _link("notes.md", "/etc/passwd")]),
    "hardlink": lambda: _tar([_file("index.json", b"{}"), _link("notes.md", "/etc/passwd", tarfile.LNKTYPE)]),
}


def _nested_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# Archives the store accepts (valid gzip tars) whose content is hostile to a reader.
HOSTILE_CONTENT = {
    "index-not-json": lambda: _tar([_file("index.json", b"\x00\xff not json")]),
    "index-is-a-list": lambda: _tar([_file("index.json", b"[1, 2, 3]")]),
    "index-deeply-nested": lambda: _tar([_file("index.json", _nested_json(200_000))]),
    "memory-path-escapes": lambda: _tar(
        [
            _file(
                "index.json",
                b'{"version": 2, "memory_count": 1, "memories": {"mem_20250101_aaaaaa": '
                b'{"title": "x", "path": "../../../../etc/passwd", "type": "learning", "salience": 0.1, '
                b'"strength": "NaN", "last_accessed": "never", "tags": {"a": 1}}}}',
            ),
        ]
    ),
    "sync-state-and-junk": lambda: _tar(
        [_file("index.json", b'{"version": 2, "memories": {}}'), _file(".sync/state.json", b"{}"), _file(".cloud/x", b"y")]
    ),
}


@pytest.mark.parametrize("kind", sorted(REFUSED_BY_ENGINE))
def test_unsafe_archive_entries_are_refused_by_the_connector(kind: str) -> None:
    from connector.engine.format.archive import ArchiveError, load_archive

    data = REFUSED_BY_ENGINE[kind]()
    if kind in ("symlink", "hardlink"):
        # Links are dropped, never followed: only the regular file survives.
        assert set(load_archive(data).files) == {"index.json"}
        return
    with pytest.raises(ArchiveError):
        load_archive(data)


@pytest.mark.parametrize("kind", sorted(HOSTILE_CONTENT))
def test_hostile_archives_do_not_harm_the_connector(store: RunningStore, kind: str) -> None:
    victim = store.add_user("victim")
    bystander = store.add_user("bystander")
    victim_brain = brains_of(store.url, victim.token)[0]["id"]
    bystander_brain = brains_of(store.url, bystander.token)[0]["id"]
    direct_memorize(store.url, bystander.token, bystander_brain, "Bystander fact about sailing")
    accepted = upload_raw(store.url, victim.token, victim_brain, HOSTILE_CONTENT[kind]())
    assert accepted.status_code == 200, accepted.text
    _, hostile_checksum = download_brain(store.url, victim.token, victim_brain) if kind != "index-deeply-nested" else (None, None)

    async def scenario() -> None:
        manager = manager_for(store)
        tools = BrainTools(manager)
        victim_caller = Caller(account_for(victim), ALL)
        for name, arguments in [
            ("brain_recall", {"query": "anything"}),
            ("brain_status", {}),
            ("brain_verify", {}),
            ("brain_forget", {"id": "mem_20250101_aaaaaa", "force": True}),
            ("brain_pin", {"id": "mem_20250101_aaaaaa"}),
            ("brain_memorize", {"content": "A new fact over a strange brain"}),
        ]:
            result = await tools.call(name, arguments, victim_caller)
            # Either a clean answer or a clear error result: never a crash or a protocol error.
            assert result.content and result.content[0].text
        # The connector keeps serving other users.
        fine = await tools.call("brain_recall", {"query": "sailing"}, Caller(account_for(bystander), ALL))
        assert fine.structured_content["count"] == 1
        await manager.close()

    run(scenario())
    assert not Path("/etc/passwd.md").exists()


def test_store_unreachable_from_the_start_is_a_clear_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        from tests.support.processes import free_port

        nowhere = f"http://127.0.0.1:{free_port()}"
        manager = WorkingCopyManager(StoreClient(nowhere, timeout_s=2))
        tools = BrainTools(manager)
        caller = Caller(Account("static:x", "bst_x"), ALL)
        result = await tools.call("brain_recall", {"query": "x"}, caller)
        assert result.is_error and "cannot be reached" in result.content[0].text
        # the reason in words: it read "the store could not be reached (ConnectError)"
        result = await tools.call("brain_use", {"brain": "work"}, caller)
        assert result.is_error and result.content[0].text == (
            f"The store could not complete this request (could not connect to the store at {nowhere}). "
            "Nothing was changed; try again.")
        result = await tools.call("brain_memorize", {"content": "x"}, caller)
        assert result.is_error and "nothing was saved" in result.content[0].text
        await manager.close()

    run(scenario())


def test_a_store_that_never_answers_is_said_in_words() -> None:
    """A store that takes the connection and says nothing: "did not answer within 1 s", not
    "did not answer in time (ReadTimeout)"."""
    async def scenario(silent: str) -> None:
        manager = WorkingCopyManager(StoreClient(silent, timeout_s=1))
        result = await BrainTools(manager).call("brain_use", {"brain": "work"}, Caller(Account("static:x", "bst_x"), ALL))
        assert result.is_error and result.content[0].text == (
            f"The store could not complete this request (the store at {silent} did not answer within 1 s). "
            "Nothing was changed; try again.")
        await manager.close()

    with socket.create_server(("127.0.0.1", 0), backlog=8) as listening:  # never accepts: the kernel queues
        run(scenario(f"http://127.0.0.1:{listening.getsockname()[1]}"))


def test_recall_tool_equals_engine_recall(store: RunningStore) -> None:
    from connector.engine.format.archive import load_directory

    user = store.add_user("judy")
    fixture = load_directory(project_parity_dir() / "brains" / "brain-1-06")
    brain_id = upload_brain(store.url, user.token, fixture)

    async def scenario() -> None:
        manager = manager_for(store)
        tools = BrainTools(manager, recall_mode="exact")  # compared with the exact engine
        caller = Caller(account_for(user), ALL)
        stored, _ = download_brain(store.url, user.token, brain_id)
        for query, limit in [("database migration", 10), ("performance latency", 5), ("testing", 25)]:
            before = datetime.now(UTC)
            result = await tools.call("brain_recall", {"query": query, "limit": limit}, caller)
            after = datetime.now(UTC)
            # Equal to the engine's answer at some instant of the call (a rounded value may tick over).
            candidates = [recall(stored, query, top=limit, now=moment) for moment in (before, after)]
            # Scores and order are the engine's; each hit also carries its content (budgeted).
            hits = [{key: value for key, value in hit.items() if not key.startswith("content")}
                    for hit in result.structured_content["results"]]
            assert hits in candidates
            assert all("content" in hit for hit in result.structured_content["results"])
        await manager.close()

    run(scenario())


def test_write_refusals_change_nothing(store: RunningStore) -> None:
    user = store.add_user("kim")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, brain_id, "A fact")
    _, before = download_brain(store.url, user.token, brain_id)

    async def scenario() -> None:
        manager = manager_for(store)
        account = account_for(user)
        with pytest.raises(Exception, match="unknown memory id"):
            await manager.write(account, Pin("mem_20200101_abcdef"), "pin")
        copy = next(iter(manager.copies.values()))
        assert not copy.dirty
        await manager.close()

    run(scenario())
    _, after = download_brain(store.url, user.token, brain_id)
    assert after == before


def test_unavailable_brain_message_is_user_safe() -> None:
    error = BrainUnavailable("The store cannot be reached right now. Try again shortly.")
    assert "bst_" not in str(error)


def test_idle_copies_are_purged_only_when_clean(store: RunningStore) -> None:
    user = store.add_user("lena")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    direct_memorize(store.url, user.token, brain_id, "A fact")

    async def scenario() -> None:
        client = FlakyUploads(store.url)
        manager = WorkingCopyManager(client, tuning=ManagerTuning(idle_purge_s=0.05, held_retry_s=0.01))
        account = account_for(user)
        await manager.snapshot(account)
        await asyncio.sleep(0.1)
        await manager.maintain()
        assert not manager.copies  # idle and clean: dropped
        client.failing = True
        outcome = await manager.write(account, connector_memorize("Held while idle"), "memorize")
        assert not outcome.synced
        await asyncio.sleep(0.1)
        await manager.maintain()  # the push fails again: the copy must stay
        assert len(manager.copies) == 1 and next(iter(manager.copies.values())).dirty
        client.failing = False
        await asyncio.sleep(0.1)
        await manager.maintain()  # pushed first, then purged
        assert not manager.copies
        stored, _ = download_brain(store.url, user.token, brain_id)
        assert outcome.result["stored"][0]["id"] in memory_ids(stored)
        # Purge at session end also pushes first.
        await manager.snapshot(account)
        client.failing = True
        held = await manager.write(account, connector_memorize("Held at session end"), "memorize")
        assert await manager.purge_user(account.subject) == 1  # kept: could not push
        client.failing = False
        assert await manager.purge_user(account.subject) == 0
        stored, _ = download_brain(store.url, user.token, brain_id)
        assert held.result["stored"][0]["id"] in memory_ids(stored)
        await manager.close()

    run(scenario())


def test_an_archive_inflating_beyond_the_copy_limit_is_refused(store: RunningStore) -> None:
    from connector.engine.format.archive import ArchiveLimits

    user = store.add_user("bomb")
    brain_id = brains_of(store.url, user.token)[0]["id"]
    bomb = _tar([_file("index.json", b'{"version": 2, "memories": {}}'), _file("zeros.md", bytes(8 * 1024 * 1024))])
    assert len(bomb) < 64 * 1024
    assert upload_raw(store.url, user.token, brain_id, bomb).status_code == 200

    async def scenario() -> None:
        limits = ArchiveLimits(max_inflated=1024 * 1024, max_entries=1000)
        manager = WorkingCopyManager(StoreClient(store.url), tuning=ManagerTuning(archive_limits=limits))
        tools = BrainTools(manager)
        result = await tools.call("brain_recall", {"query": "zeros"}, Caller(account_for(user), ALL))
        text = result.content[0].text
        assert result.is_error and "larger than this connector accepts" in text and "CONNECTOR_MAX_BRAIN_MB" in text
        small = WorkingCopyManager(StoreClient(store.url, max_archive_bytes=1024))
        result = await BrainTools(small).call("brain_status", {}, Caller(account_for(user), ALL))
        assert result.is_error and "larger than the connector accepts" in result.content[0].text
        await manager.close()
        await small.close()

    run(scenario())


def test_lru_cap_drops_clean_copies_only(store: RunningStore) -> None:
    users = users_with_a_fact(store, "lru", 4)

    async def scenario() -> None:
        client = FlakyUploads(store.url)
        manager = WorkingCopyManager(client, tuning=ManagerTuning(max_copies=2, held_retry_s=60.0))
        accounts = [account_for(user) for user in users]
        for account in accounts[:3]:
            await manager.snapshot(account)
        held_by = {key[0] for key in manager.copies}
        assert held_by == {accounts[1].subject, accounts[2].subject}  # the least recently used went first
        # A copy with a write the store has not accepted is never dropped, however old.
        client.failing = True
        outcome = await manager.write(accounts[1], connector_memorize("Held while the store is away"), "memorize")
        assert not outcome.synced
        for account in (accounts[0], accounts[2], accounts[3], accounts[0]):
            await manager.snapshot(account)
            assert accounts[1].subject in {key[0] for key in manager.copies}
            assert len(manager.copies) <= 2
        # Once pushed it is clean, and the next pass may drop it.
        client.failing = False
        manager.tuning.held_retry_s = 0.0
        for copy in manager.copies.values():
            copy.next_retry_at = 0.0
        await manager.maintain()
        assert not any(copy.dirty for copy in manager.copies.values())
        await manager.snapshot(accounts[3])
        assert {key[0] for key in manager.copies} == {accounts[0].subject, accounts[3].subject}
        stored, _ = download_brain(store.url, users[1].token, brains_of(store.url, users[1].token)[0]["id"])
        assert outcome.result["stored"][0]["id"] in memory_ids(stored)
        # A dropped copy is pulled again when its user comes back.
        again = await manager.snapshot(accounts[1])
        assert outcome.result["stored"][0]["id"] in memory_ids(again.brain)
        await manager.close()

    run(scenario())


def test_byte_budget_keeps_the_copy_in_use(store: RunningStore) -> None:
    users = users_with_a_fact(store, "bytes", 3)

    async def scenario() -> None:
        # One byte: every copy is over budget alone, so only the one just served stays.
        manager = WorkingCopyManager(StoreClient(store.url), tuning=ManagerTuning(max_copy_bytes=1))
        for user in users:
            snap = await manager.snapshot(account_for(user))
            assert snap.brain is not None and len(memory_ids(snap.brain)) == 1
            assert [key[0] for key in manager.copies] == [account_for(user).subject]
            assert next(iter(manager.copies.values())).size_bytes > 1
        await manager.close()

    run(scenario())


def test_a_copy_counts_the_bytes_each_write_changes(store: RunningStore) -> None:
    # A write counts the bytes of the files it changed, not every file again: the count must
    # stay what a full count of the brain says, through added, rewritten and archived files.
    user = store.add_user("counted")
    direct_memorize(store.url, user.token, brains_of(store.url, user.token)[0]["id"], "A fact to start with")

    async def scenario() -> None:
        manager = manager_for(store)
        account = account_for(user)
        outcome = await manager.write(account, connector_memorize("The standup moved to 10:00.", tags=["team"]), "memorize")
        first = outcome.result["stored"][0]["id"]
        await manager.write(account, connector_memorize("A longer fact " * 50, title="Long"), "memorize")
        await manager.write(account, Pin(first), "pin")
        await manager.write(account, Forget(first, force=True), "forget")
        (copy,) = manager.copies.values()
        assert copy.size_bytes == brain_bytes(copy.brain) > 0
        await manager.close()

    run(scenario())


def test_budget_is_applied_before_a_load_and_a_brain_is_never_held_twice(store: RunningStore) -> None:
    from connector.engine.format.archive import ArchiveLimits

    users = users_with_a_fact(store, "before", 2)
    limits = ArchiveLimits(max_inflated=64 * 1024)
    # Room for one load (three times the per-brain limit) and nothing more.
    tuning = ManagerTuning(archive_limits=limits, max_copy_bytes=3 * 64 * 1024 + 1, repull_ttl_s=0.0)
    manager = WorkingCopyManager(StoreClient(store.url), tuning=tuning)
    first, second = (account_for(user) for user in users)
    # At each unpacking: whose copies are held, and how many files the copy being loaded still holds.
    seen: list[tuple[set[str], int]] = []
    load = manager._load

    async def watching_load(copy: Any, data: bytes) -> Brain:
        seen.append(({key[0] for key in manager.copies}, len(copy.brain.files)))
        return await load(copy, data)

    manager._load = watching_load  # type: ignore[method-assign]

    async def scenario() -> None:
        await manager.snapshot(first)
        # The first user's clean copy is dropped before the second brain is unpacked, not after.
        await manager.snapshot(second)
        assert seen[-1] == ({second.subject}, 0)
        # A forced re-pull of a newer version: while it is unpacked the copy no longer holds the old one.
        direct_memorize(store.url, users[1].token, brains_of(store.url, users[1].token)[0]["id"], "A newer fact")
        copy = manager.copies[(second.subject, brains_of(store.url, users[1].token)[0]["id"])]
        assert len(copy.brain.files) > 0
        async with copy.lock:
            await manager._refresh(copy, force=True)
        assert seen[-1] == ({second.subject}, 0)
        assert len(memory_ids(copy.brain)) == 2
        await manager.close()

    run(scenario())


def test_a_held_write_the_journal_cannot_keep_is_said_to_be_not_saved(store: RunningStore, tmp_path: Path) -> None:
    from common.docstore import open_document_store
    from connector.workcopy.journal import HeldWriteJournal

    user = store.add_user("unjournaled")
    state = open_document_store(tmp_path / "state")
    (tmp_path / "state").mkdir(mode=0o700)  # the store makes its directory on its first write only
    (tmp_path / "state" / "held").write_text("a file where the journal's directory should be")

    async def scenario() -> None:
        client = FlakyUploads(store.url)
        journal = HeldWriteJournal(state, bytes(32))
        manager = WorkingCopyManager(client, tuning=ManagerTuning(held_retry_s=60.0), journal=journal)
        tools = BrainTools(manager)
        caller = Caller(account_for(user), ALL)
        client.failing = True
        result = await tools.call("brain_memorize", {"content": "Kept in memory only"}, caller)
        assert not result.is_error
        assert result.structured_content["durable"] is False
        assert "NOT saved" in result.content[0].text
        await manager.close(push_timeout_s=0.1)

    run(scenario())


def test_recall_indexes_have_room_for_every_copy_and_leave_with_them(store: RunningStore) -> None:
    # A fixed 64 indexes made the 65th signed-in user push one out on every recall: each
    # recall of 200 users rebuilt an index. Now there is room for one per copy held, and
    # an index is dropped with the last copy of its content (the copy caps bound both).
    assert manager_for(store, max_copies=300).index_cache.capacity == 300
    assert manager_for(store, max_copies=0).index_cache.capacity >= 1000  # no copy cap: no 64 either
    users = users_with_a_fact(store, "indexes", 3)

    async def scenario() -> None:
        manager = manager_for(store, max_copies=2)
        tools = BrainTools(manager)
        keys = []
        for user in users:
            result = await tools.call("brain_recall", {"query": "fact"}, Caller(account_for(user), ALL))
            assert not result.is_error and result.structured_content["count"] == 1
            keys.append((await manager.snapshot(account_for(user))).key)
        held = {copy.key for copy in manager.copies.values()}
        assert held == {keys[1], keys[2]}  # the first user's copy was dropped (max 2 copies) ...
        assert manager.index_cache.peek(keys[0]) is None  # ... and its index with it
        assert all(manager.index_cache.peek(key) is not None for key in keys[1:])
        # The first user comes back: the copy is pulled again and its index built again, off the loop.
        result = await tools.call("brain_recall", {"query": "fact"}, Caller(account_for(users[0]), ALL))
        assert result.structured_content["count"] == 1
        assert manager.index_cache.peek(keys[0]) is not None
        await manager.close()

    run(scenario())


def test_a_removed_members_copy_is_let_go_at_once(store: RunningStore) -> None:
    """The call that finds a shared brain gone (its owner removed the member) drops the member's
    copy of it and its recall index there and then, not at the idle purge 15 minutes later."""
    alice, bob = store.add_user("alice"), store.add_user("bob")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    direct_memorize(store.url, alice.token, team["id"], "The team's release train leaves on Wednesdays")
    brain_store("share", team["id"], "--with", bob.name, "--role", "viewer", data=store.data)

    async def scenario() -> None:
        manager = manager_for(store)  # the brain list kept 30 s, as in production
        account = account_for(bob)
        await manager.use_brain(account, team["id"])
        seen = await manager.snapshot(account)
        assert seen.brain_id == team["id"] and seen.brain is not None
        index_for(seen.brain, seen.key, manager.index_cache)  # as a recall would
        assert manager.index_cache.peek(seen.key) is not None
        key = (account.subject, team["id"])
        assert key in manager.copies
        brain_store("unshare", team["id"], "--with", bob.name, data=store.data)
        with pytest.raises(AccessLost, match="You no longer have access to the brain 'team'"):
            await manager.snapshot(account)
        assert key not in manager.copies
        assert manager.index_cache.peek(seen.key) is None
        assert (await manager.snapshot(account)).brain_id != team["id"]  # then the member's own brain
        await manager.store.aclose()

    run(scenario())
