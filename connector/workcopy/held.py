"""Held writes: writes the store has not accepted yet. Each is kept in the copy and in the
held-write journal (`journal.py`) before the tool answers; `recover` reads the journal back at
start-up and, on every maintenance pass, renews this process's leases on its journal documents
and takes over those of a process that died. A refusal for good (404, 401/403) drops them, and
the user is told on their next tool call (`take_notices`).
"""

from __future__ import annotations

import asyncio
import logging
import random

from common.textsafety import escape_one_line
from connector.engine.format.brain import Brain
from connector.workcopy.core import ManagerCore
from connector.workcopy.journal import JournalEntry, JournalError, new_entry_name
from connector.workcopy.model import WorkingCopy
from connector.workcopy.store_client import StoreError, StoreForbidden, StoreNotFound, StoreUnauthorized

log = logging.getLogger("connector.workcopy")

# Notices kept per user about dropped writes (the most recent ones).
_MAX_NOTICES = 10


def _counted(labels: list[str]) -> str:
    """``["memorize", "pin", "memorize"]`` as ``"2 memorize, 1 pin"``."""
    return ", ".join(f"{labels.count(label)} {label}" for label in dict.fromkeys(labels))


def _journal_mark(copy: WorkingCopy) -> tuple[object, ...]:
    """What a copy's journal file says; when it changes, the file is written again."""
    return (copy.account, copy.brain_id, copy.base_checksum, tuple(id(item) for item in copy.pending))


class HeldWrites(ManagerCore):
    """Writes the store has not accepted yet: journaled, recovered, retried, or dropped for good."""

    async def recover(self) -> int:
        """Take over the journal files no process holds; returns the writes found.

        At start-up (before serving) these are the writes held when the connector
        stopped; on each maintenance pass, those of a worker process (or a replica on
        the same state directory) that died. Each file becomes a copy holding its writes
        again, with the account that wrote them; its brain is pulled and the writes
        applied on it when it is next pushed (the maintenance task tries at once), as
        after a lost race.
        """
        if self.journal is None:
            return 0
        entries = await asyncio.to_thread(self.journal.load)
        found = 0
        for entry in entries:
            key = (entry.account.subject, entry.brain_id)
            while not await self._hold_recovered(key, entry):  # the copy it joined left meanwhile: again
                pass
            found += len(entry.pending)
            self._recovered.setdefault(entry.account.subject, []).extend(item.label for item in entry.pending)
        if found:
            log.warning("held writes recovered from the journal; pushing them", extra={"writes": found, "copies": len(entries)})
        return found

    async def _hold_recovered(self, key: tuple[str, str | None], entry: JournalEntry) -> bool:
        """Hold a journal file's writes in the copy of their brain (made for them if there is none).

        Two files for one copy (replicas sharing a state directory, or a dead worker's writes
        for a brain this process holds too): one copy holds both, rebuilt from the store's
        brain with every pending write applied in order. False when the copy joined was
        dropped while its lock was awaited (nothing changed; try again).
        """
        assert self.journal is not None
        copy = self._copies.get(key)
        if copy is None:
            copy = WorkingCopy(
                subject=entry.account.subject,
                brain_id=entry.brain_id,
                brain_name=entry.brain_name,
                brain=Brain(),
                base_checksum=entry.base_checksum,
                key=f"recovered:{entry.name}",
                account=entry.account,
                pending=entry.pending,
                checked_at=-1e18,
                used_at=self._mono(),
                journal_name=entry.name,
                needs_rebase=True,
            )
            copy.journaled = _journal_mark(copy)
            self._copies[key] = copy
            self._user(entry.account)
            return True
        async with copy.lock:
            if self._copies.get(key) is not copy:
                return False
            copy.pending = sorted([*copy.pending, *entry.pending], key=lambda item: item.at)
            copy.needs_rebase = True
            copy.next_retry_at = 0.0
            copy.journaled = None
            await self._journal(copy)
            if copy.journaled is not None:
                await asyncio.to_thread(self.journal.remove, entry.name)
        return True

    async def _push(self, copy: WorkingCopy) -> list[str]:
        """Push the copy's pending writes, then bring its journal file up to date. Lock held.

        Returns labels of the writes dropped because they no longer applied.
        """
        dropped = await self._push_pending(copy)
        await self._journal(copy)
        return dropped

    async def _journal(self, copy: WorkingCopy) -> None:
        """Write a copy still holding writes to the journal (if changed); remove it once it holds none. Lock held."""
        if self.journal is None:
            return
        if copy.pending and copy.discarded is None:
            mark = _journal_mark(copy)
            if mark == copy.journaled:
                return
            copy.journal_name = copy.journal_name or new_entry_name()
            try:
                await asyncio.to_thread(
                    self.journal.record,
                    copy.journal_name,
                    copy.account,
                    copy.brain_id,
                    copy.brain_name,
                    copy.base_checksum,
                    list(copy.pending),
                )
            except JournalError as exc:
                copy.journaled = None
                log.error("held writes are in memory only: %s", exc, extra={"pending": len(copy.pending)})
                return
            copy.journaled = mark
        elif copy.journal_name is not None:
            await asyncio.to_thread(self.journal.remove, copy.journal_name)
            copy.journal_name, copy.journaled = None, None

    @staticmethod
    def _final(copy: WorkingCopy, refusal: StoreError) -> bool:
        """Whether a refusal means the writes can never be pushed.

        404 (brain gone) and 403 (not allowed) always do; 401 does for a store token
        (revoked or rotated) but not for an organisation sign-in, whose ID token simply
        expires within the hour and is renewed the next time the user comes back.
        """
        return not (isinstance(refusal, StoreUnauthorized) and copy.account.kind == "oidc")

    def _discard(self, copy: WorkingCopy, refusal: StoreError) -> None:
        """The store refused the copy's writes for good: drop them and the copy, tell the user later.

        A 404 means the brain was deleted (by another device or the operator); 401/403
        mean this sign-in may no longer write it. Retrying would never succeed, so the
        writes are dropped, the copy (which still holds them) is removed, and a notice
        waits for the user's next tool call. The log names the count and the kinds of
        write, never their content. Lock held.
        """
        labels = [pending.label for pending in copy.pending]
        gone = isinstance(refusal, StoreNotFound)
        if gone:
            why = f"the brain '{escape_one_line(copy.brain_name)}' was deleted at the store"
        elif isinstance(refusal, StoreForbidden):
            # A role or agent key that only reads (or was just reduced to that): the store says which.
            why = (
                f"the store refused this sign-in's writes to the brain '{escape_one_line(copy.brain_name)}' "
                f"({escape_one_line(str(refusal))})"
            )
        else:
            why = f"the store no longer accepts this sign-in's writes to the brain '{escape_one_line(copy.brain_name)}'"
        counted = _counted(labels)
        notice = (
            f"{len(labels)} write(s) ({counted}) could not be saved and were dropped: {why}. "
            "They are not in any brain. Ask the user whether to save them again"
            + (" (a new write goes to the account's remaining or a new brain)." if gone else " after signing in again.")
        )
        copy.pending.clear()
        copy.held_reason = None
        copy.failures = 0
        copy.next_retry_at = 0.0
        copy.discarded = notice
        for key, held in list(self._copies.items()):
            if held is copy:
                del self._copies[key]
        self._forget_index(copy)
        self.long_lived.dropped()
        state = self._users.get(copy.subject)
        if state is not None:
            state.brains_at = -1e18  # the brain list changed (or access did): list again next time
        owed = self._notices.setdefault(copy.subject, [])
        owed.append(notice)
        del owed[:-_MAX_NOTICES]  # a user who never comes back must not grow this without bound
        log.warning(
            "held writes dropped: the store refused them for good",
            extra={"writes": len(labels), "kinds": counted, "status": refusal.status, "brain_id": copy.brain_id},
        )

    def take_notices(self, subject: str) -> list[str]:
        """Messages for the user about their writes that were dropped or recovered (each is given once)."""
        notices = self._notices.pop(subject, [])
        recovered = self._recovered.pop(subject, None)
        if recovered:
            held = sum(len(copy.pending) for key, copy in self._copies.items() if key[0] == subject)
            where = (
                f"{held} write(s) are still held and are pushed once the store accepts them"
                if held
                else "they are now synced to the store"
            )
            notices.insert(
                0,
                f"The connector restarted while {len(recovered)} write(s) ({_counted(recovered)}) were held "
                f"for the store; they were kept in its journal and {where}.",
            )
        return notices

    def _hold(self, copy: WorkingCopy, reason: str) -> None:
        copy.held_reason = reason
        copy.failures += 1
        backoff = min(60.0, self.tuning.held_retry_s * (2 ** min(copy.failures - 1, 4)))
        copy.next_retry_at = self._mono() + backoff * random.uniform(0.8, 1.2)
        log.warning("writes held, not yet synced", extra={"pending": len(copy.pending), "reason": reason})
