"""The copies' memory budget and maintenance: at most ``max_copies`` copies and ``max_copy_bytes``
bytes (least recently used clean copies leave first; loads reserve their peak before they
unpack), and the periodic pass that retries held writes and purges idle copies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from connector.workcopy.core import ManagerCore
from connector.workcopy.longlived import give_back_memory
from connector.workcopy.model import WorkingCopy

log = logging.getLogger("connector.workcopy")


class Upkeep(ManagerCore):
    """The copies' memory budget and the maintenance pass."""

    @contextlib.contextmanager
    def _room_for_load(self) -> Iterator[None]:
        """Reserve a load's peak in the byte budget, dropping clean copies first if needed.

        Copies are dropped before the brain is unpacked (not after it), so the copies
        held plus the loads under way stay within ``max_copy_bytes``. Only loads that
        unpack reserve: a freshness check answered 304 costs nothing.
        """
        cost = self.tuning.load_cost if self.tuning.max_copy_bytes else 0
        self._enforce_budget(incoming=cost)
        self._reserved += cost
        try:
            yield
        finally:
            self._reserved -= cost

    def _forget_index(self, dropped: WorkingCopy) -> None:
        """Drop the recall index of a dropped copy's content unless another copy holds that content."""
        if not any(copy.key == dropped.key for copy in self._copies.values()):
            self.index_cache.invalidate(dropped.key)

    def _enforce_budget(self, incoming: int = 0) -> int:
        """Drop least recently used clean copies while over ``max_copies`` or ``max_copy_bytes``.

        The bytes counted are the copies', those reserved by loads under way, and
        ``incoming`` (a load about to start). Never a copy holding unpushed writes,
        one in use (locked), or the most recently used one (the copy just served:
        dropping it would only make the next call pull it again). Returns how many
        copies were dropped; their memory is handed back to the system at once.
        """
        most, budget = self.tuning.max_copies, self.tuning.max_copy_bytes
        count = len(self._copies)
        total = sum(copy.size_bytes for copy in self._copies.values()) + self._reserved + incoming if budget else 0

        def over() -> bool:
            return bool((most and count > most) or (budget and total > budget))

        if not over():
            return 0
        ordered = sorted(self._copies.items(), key=lambda item: item[1].used_at)
        evicted = 0
        for key, copy in ordered[:-1]:
            if not over():
                break
            if copy.dirty or copy.lock.locked():
                continue
            del self._copies[key]
            self._forget_index(copy)
            count -= 1
            total -= copy.size_bytes
            evicted += 1
        if evicted:
            self.long_lived.dropped()
            give_back_memory()
            log.info(
                "dropped least recently used working copies over the budget",
                extra={"evicted": evicted, "copies": count, **({"bytes": total} if budget else {})},
            )
        return evicted

    async def maintain(self) -> None:
        """One maintenance pass: take over orphaned held writes, retry those due, purge idle clean copies."""
        try:
            await self.recover()
        except Exception:  # the journal directory may be unreadable for a moment; the next pass tries again
            log.exception("reading the held-write journal failed")
        now = self._mono()
        for key, copy in list(self._copies.items()):
            if copy.lock.locked():
                continue
            if copy.dirty and now >= copy.next_retry_at:
                async with copy.lock:
                    await self._push(copy)
            idle = now - copy.used_at >= self.tuning.idle_purge_s
            if idle and not copy.dirty and not copy.lock.locked():
                if self._copies.get(key) is copy:
                    del self._copies[key]
                    self._forget_index(copy)
                    self.long_lived.dropped()
                    log.info("purged an idle working copy")
        self._enforce_budget()
        self.long_lived.maybe_settle()
        for subject in [s for s in self._users if not any(k[0] == s for k in self._copies)]:
            if subject not in self._notices:  # keep the brain list cache of a user still owed a notice
                del self._users[subject]

    async def purge_user(self, subject: str) -> int:
        """Drop a user's copies (their last session ended), pushing held writes first.

        Copies whose writes still cannot be pushed are kept; returns how many are kept.
        """
        kept = 0
        for key, copy in list(self._copies.items()):
            if key[0] != subject:
                continue
            async with copy.lock:
                if copy.dirty:
                    await self._push(copy)
                if copy.dirty:
                    kept += 1
                    continue
                self._copies.pop(key, None)
                self._forget_index(copy)
                self.long_lived.dropped()
        if not kept:
            self._users.pop(subject, None)
        return kept

    async def _maintain_forever(self, at_once: bool = False) -> None:
        while True:
            if not at_once:
                await asyncio.sleep(self.tuning.maintenance_every_s)
            at_once = False
            try:
                await self.maintain()
            except Exception:
                log.exception("working-copy maintenance failed")
