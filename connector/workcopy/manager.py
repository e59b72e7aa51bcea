"""Working copies: each user's brain, pulled from the store into memory and pushed back.

One copy per (user, brain). Reads come from the copy (re-checked with a
conditional download once the freshness TTL has passed, unless the copy holds
unsynced writes). Every write is an engine operation applied to the copy, then
the whole brain is packed and uploaded with ``If-Match``; on 412 the store's
brain is pulled and the pending operations are applied again, in order, with
their original ids. A write that the store has not accepted yet is kept and
retried in the background: it is never dropped, not even by the idle purge,
with one exception: when the store says the brain is gone (404) or that this
sign-in may no longer write it (401/403), retrying can never succeed, so the held
writes are dropped and the user is told on their next tool call.

Held writes are also written to the held-write journal (`journal.py`, in the
connector's state: a directory or S3) before the tool answers, so a restart or a crash does not lose
them: `recover` reads them back at start-up and they are pushed like any held
write, on the store's current brain with their original ids. Without a state
there is no journal and the tool says the held write is not saved.

Several processes may share the state (`serve --workers N`, replicas): each
journal document is held by one process under a lease (`journal.py`), and `recover`
runs again on every maintenance pass to renew this process's leases and take over
the documents of a process that died. After
each push the brain's head is published (`heads.py`) and a clean copy is re-checked
with the store as soon as another process's head differs from what it last saw, so
a write through one process is seen by a read through any other.

The manager is a thin coordinator: it joins the parts (`core.py` the shared state, `accounts.py`,
`sync.py`, `held.py`, `upkeep.py`) and does what a tool call asks: a read view (`snapshot`) and
a write (`write`), plus starting and closing.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any

from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange
from connector.i18n import Text
from connector.workcopy.accounts import (Accounts, UnknownBrain, agent_key_without_brain, choose_brain, find_brain,
                                         identity_for, oldest_first)
from connector.workcopy.core import BrainUnavailable, SignInAgain
from connector.workcopy.held import HeldWrites
from connector.workcopy.model import Account, Operation, PendingWrite, Snapshot, WorkingCopy, WriteOutcome
from connector.workcopy.store_client import BrainRecord, StoreError, StoreUnauthorized, StoreUnreachable
from connector.workcopy.sync import Sync, changed_bytes, empty_key
from connector.workcopy.upkeep import Upkeep


def _apply_journaled(op: Operation, working: Brain, at: datetime) -> tuple[dict[str, Any], BrainChange]:
    """``op`` applied to ``working`` (raises, changing nothing, on refusal) and what it changed."""
    working.journal = []
    try:
        result = op.apply(working, at)
    finally:
        journal, working.journal = working.journal, None
    return result, BrainChange.of_journal(journal)


class WorkingCopyManager(Accounts, Sync, HeldWrites, Upkeep):
    """Owns every working copy of this process."""

    def start(self) -> None:
        """Start the background task that retries held writes and purges idle copies.

        Writes recovered from the journal are tried at once, not after the first interval.
        """
        if self._maintenance is None:
            at_once = any(copy.dirty for copy in self._copies.values())
            self._maintenance = asyncio.create_task(self._maintain_forever(at_once), name="workcopy-maintenance")

    async def close(self, push_timeout_s: float = 10.0) -> None:
        """Stop the background task and try (bounded) to push every held write."""
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._maintenance
            self._maintenance = None
        if self._publishing:
            await asyncio.wait(list(self._publishing), timeout=push_timeout_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), timeout=push_timeout_s)

    async def flush(self) -> int:
        """Push every copy holding writes now; returns how many copies still hold writes."""
        for copy in list(self._copies.values()):
            if copy.dirty:
                async with copy.lock:
                    await self._push(copy)
        return sum(1 for copy in self._copies.values() if copy.dirty)

    async def _follow_after(
        self, gate: asyncio.Event, old_key: str, new_key: str, working: Brain, change: BrainChange
    ) -> None:
        """The indexes follow a write (`_follow`, in a worker thread) once ``gate`` opens (`_release_follow`)."""
        await gate.wait()
        await asyncio.to_thread(self._follow, old_key, new_key, working, change)

    async def _copy_for(self, account: Account, record: BrainRecord | None) -> WorkingCopy | None:
        """The copy of ``record`` for this user, pulling it the first time."""
        brain_id = record.id if record else None
        key = (account.subject, brain_id)
        copy = self._copies.get(key)
        if copy is None:
            if record is None:
                return None
            copy = WorkingCopy(
                subject=account.subject,
                brain_id=record.id,
                brain_name=record.name,
                brain=Brain(),
                base_checksum=None,
                key=empty_key(account.subject, record.id),
                account=account,
            )
            copy.checked_at = -1e18
            # A concurrent call may have created it meanwhile; keep the first.
            copy = self._copies.setdefault(key, copy)
        copy.account = account
        copy.used_at = self._mono()
        if record is not None:
            copy.brain_name = record.name
        if copy.pull_untold and account.writes:
            self._tell_pull(copy, copy.key)  # a read-only sign-in pulled it (see _refresh)
        return copy

    async def snapshot(self, account: Account, *, fresh_list: bool = False) -> Snapshot:
        """A fresh-enough read view of the user's active brain (pulling it if needed);
        ``fresh_list`` asks the store for the brain list now (what brain_status reports)."""
        for _ in range(3):
            view = await self._snapshot_once(account, fresh_list)
            if view is not None:
                return view
        raise BrainUnavailable(Text("The brain changed at the store while it was being read; try again."))

    async def _snapshot_once(self, account: Account, fresh_list: bool = False) -> Snapshot | None:
        """One attempt; None when the copy was dropped meanwhile (its brain deleted at the store)."""
        try:
            brains, active = await self._active(account, force_list=fresh_list)
        except StoreUnreachable:
            raise BrainUnavailable(Text("The store cannot be reached right now. Try again shortly.")) from None
        except StoreUnauthorized:
            raise SignInAgain() from None
        except StoreError as exc:
            raise BrainUnavailable(Text("The store answered unexpectedly: %(reason)s.", reason=str(exc))) from None
        identity = identity_for(account, brains, active)
        copy = await self._copy_for(account, active)
        if copy is None:
            # No brain at all: maybe held writes of a brain-less account wait under (subject, None).
            copy = self._copies.get((account.subject, None))
            if copy is None:
                return Snapshot(None, None, None, None, identity, brains_stale=self._brains_stale(account.subject))
        else:
            async with copy.lock:
                await self._refresh(copy)
            if copy.discarded is not None:
                return None  # its held writes were refused for good: look again from the brain list
        self._enforce_budget()
        return Snapshot(
            brain=copy.brain,
            key=copy.key,
            brain_id=copy.brain_id,
            brain_name=copy.brain_name,
            identity=identity,
            pending_writes=len(copy.pending),
            held_reason=copy.held_reason,
            synced_at=copy.synced_at,
            brains_stale=self._brains_stale(account.subject),
        )

    def _brains_stale(self, subject: str) -> bool:
        """Whether the user's brain list is the last known one (the store could not be reached)."""
        state = self._users.get(subject)
        return state is not None and state.brains_stale

    async def write(self, account: Account, op: Operation, label: str) -> WriteOutcome:
        """Apply ``op`` to the user's active brain and push it; never loses an acknowledged write.

        Raises the operation's own error (nothing changed) when it refuses, and
        BrainUnavailable when the brain cannot be loaded at all. When the store
        refuses the push for good (brain deleted, access lost) the outcome carries
        ``discarded``: the write was not saved.
        """
        for _ in range(3):
            outcome = await self._write_once(account, op, label)
            if outcome is not None:
                self._enforce_budget()
                return outcome
        raise BrainUnavailable(Text("The brain changed at the store while saving; nothing was saved. Try again."))

    async def _write_once(self, account: Account, op: Operation, label: str) -> WriteOutcome | None:
        """One attempt; None when the copy left the manager before the write touched it."""
        try:
            brains, active = await self._active(account)
            if active is None:
                # Another process (worker or replica) may have created the account's first brain
                # since this one listed them: ask again rather than create a second one.
                brains, active = await self._active(account, force_list=True)
        except StoreUnauthorized:
            raise SignInAgain() from None
        except StoreUnreachable:
            brains, active = [], None
            state = self._users.get(account.subject)
            if state is not None and state.brains is not None:
                brains = state.brains
                me = state.who[0] or None if state.who is not None else None
                if account.brain:
                    active = find_brain(brains, account.brain, me)
                    if active is None:
                        raise UnknownBrain(account.brain, oldest_first(brains)) from None
                else:
                    active = choose_brain(brains, await self.choices.get_chosen_brain(account.subject), me,
                                          key_brain=state.key_brain)
            if active is None and (account.subject, None) not in self._copies:
                raise BrainUnavailable(
                    Text("The store cannot be reached right now, so nothing was saved. Try again shortly.")
                ) from None
        if active is not None and active.read_only:
            raise BrainUnavailable(await self._read_only_refusal(account, active))
        if active is None and await self._is_agent_key(account):
            # Its push would ask the store for a new brain, which refuses every key: say so now.
            raise BrainUnavailable(agent_key_without_brain(brains))
        copy = await self._copy_for(account, active)
        if copy is None:
            copy = self._copies.get((account.subject, None))
            if copy is None:
                # First write of an account without a brain: start from an empty brain;
                # the push creates the brain at the store.
                copy = WorkingCopy(
                    subject=account.subject,
                    brain_id=None,
                    brain_name="default",
                    brain=Brain(),
                    base_checksum=None,
                    key=empty_key(account.subject, None),
                    account=account,
                    checked_at=self._mono(),
                )
                copy = self._copies.setdefault((account.subject, None), copy)
            copy.account = account
            copy.used_at = self._mono()
        async with copy.lock:
            if copy.brain_id is not None:
                await self._refresh(copy)
            if copy.discarded is not None or self._copies.get((copy.subject, copy.brain_id)) is not copy:
                return None  # dropped (brain deleted) or evicted meanwhile: start again from the brain list
            at = self.now()
            working = copy.brain.copy()
            key = f"local:{copy.subject}:{copy.brain_id}:{id(working)}:{at.timestamp()}"
            # Refusal raises here, before anything changed. In a worker thread: at 10,000
            # memories a write takes a few hundred ms, which other users' calls need not wait for.
            result, change = await asyncio.to_thread(_apply_journaled, op, working, at)
            old_key = copy.key
            copy.size_bytes = changed_bytes(copy.size_bytes, copy.brain, working, change.paths)
            copy.brain = working
            copy.key = key
            copy.pending.append(PendingWrite(op=op, at=at, label=label))
            # The indexes follow the write once its archive is packed, while the push waits for
            # the store (following while packing, both needing the interpreter lock, slowed the
            # pack on the answer's path); the call returns once both are done.
            gate = self._follow_gates[key] = asyncio.Event()
            following = asyncio.create_task(self._follow_after(gate, old_key, key, working, change))
            self._following[key] = following
            try:
                dropped = await self._push(copy)
            finally:
                self._release_follow(key)  # when the push ended before packing (e.g. held)
                await following
                self._following.pop(key, None)
            if copy.brain is working and copy.key != key:
                for follower in self.followers:
                    follower.rename(key, copy.key)  # pushed meanwhile: now known by its checksum
            discarded = copy.discarded
            if discarded is not None:
                # Told now, in this call's result: not again on the next one.
                notices = self._notices.get(copy.subject, [])
                if discarded in notices:
                    notices.remove(discarded)
                if not notices:
                    self._notices.pop(copy.subject, None)
            return WriteOutcome(
                result=result,
                synced=not copy.dirty,
                brain_id=copy.brain_id,
                brain_name=copy.brain_name,
                held_reason=copy.held_reason,
                pending_writes=len(copy.pending),
                dropped=tuple(dropped),
                brain=None if discarded else copy.brain,
                key=None if discarded else copy.key,
                discarded=discarded,
                durable=not copy.dirty or copy.journaled is not None,
            )
