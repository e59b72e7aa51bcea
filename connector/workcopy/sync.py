"""Pull and push: a copy is pulled from the store (conditionally once its freshness TTL passed,
or when another process published a newer head), and its writes are pushed with ``If-Match``;
on 412 the store's brain is pulled and the pending writes are applied again on it, in order,
with their ids (a rebase). Every change of a copy is followed by the recall indexes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import random
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from common.textsafety import escape_one_line
from connector.engine.format.archive import ArchiveError, ArchiveTooLarge, load_archive, pack_archive
from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange, file_digests
from connector.i18n import Text
from connector.workcopy.core import BrainUnavailable, ManagerCore, SignInAgain
from connector.workcopy.longlived import give_back_memory
from connector.workcopy.model import ArchiveEnd, PendingWrite, WorkingCopy
from connector.workcopy.store_client import (
    PreconditionFailed,
    StoreError,
    StoreForbidden,
    StoreNotFound,
    StoreUnauthorized,
    StoreUnreachable,
    UploadResult,
)

log = logging.getLogger("connector.workcopy")


def brain_bytes(brain: Brain) -> int:
    """What a brain's files weigh: the measure of the copies' byte budget."""
    return sum(map(len, brain.files.values()))


def changed_bytes(size: int, before: Brain, after: Brain, paths: Iterable[str]) -> int:
    """`brain_bytes` of ``after``, given ``size``, that of ``before``, and the ``paths`` whose
    files differ between them (a write changes a few files of thousands: no pass over all)."""
    old, new = before.files, after.files
    for path in paths:
        size += len(new.get(path, b"")) - len(old.get(path, b""))
    return size


def _checksum(data: bytes) -> str:
    """SHA-256 of an archive, in hex (in a worker thread, as packing: megabytes of work on the
    event loop held up every other call)."""
    return hashlib.sha256(data).hexdigest()


def empty_key(subject: str, brain_id: str | None) -> str:
    return f"empty:{subject}:{brain_id or '-'}"


class Sync(ManagerCore):
    """Pulling copies from the store and pushing their writes back, rebasing them on a lost race."""

    async def _load(self, copy: WorkingCopy, data: bytes) -> Brain:
        """Unpack a downloaded archive within the per-brain limit; a refusal is said to the user."""
        try:
            return await asyncio.to_thread(load_archive, data, self.tuning.archive_limits)
        except ArchiveTooLarge:
            await asyncio.to_thread(give_back_memory)
            limit_mb = self.tuning.archive_limits.max_inflated // (1024 * 1024)
            raise BrainUnavailable(
                Text("The brain '%(name)s' is larger than this connector accepts: it unpacks to more than "
                     "%(limit)s MiB (the operator's CONNECTOR_MAX_BRAIN_MB). The connector did not load it and "
                     "changed nothing.", name=escape_one_line(copy.brain_name), limit=limit_mb)
            ) from None
        except ArchiveError as exc:
            await asyncio.to_thread(give_back_memory)
            raise BrainUnavailable(
                Text("The brain '%(name)s' at the store could not be read safely (%(reason)s); "
                     "the connector did not use it and changed nothing.", name=escape_one_line(copy.brain_name),
                     reason=str(exc))
            ) from None

    async def _pull(self, copy: WorkingCopy, *, conditional: bool) -> None:
        """Replace a clean copy with the store's archive (304 keeps it). Lock held."""
        assert copy.brain_id is not None
        old_key = copy.key
        async with self._loads:  # downloads and unpacking: a few at once
            try:
                with self._watching(copy.account):
                    download = await self.store.download(
                        copy.account.credential, copy.brain_id, copy.base_checksum if conditional else None
                    )
            except StoreNotFound:
                # No archive yet (or the brain is gone): an empty copy, base None.
                self._forget_brain(copy)
                copy.checked_at = self._mono()
                return
            if download.not_modified:
                copy.checked_at = self._mono()
                return
            assert download.data is not None
            checksum = download.checksum or _checksum(download.data)
            end = ArchiveEnd.of(checksum, download.data)
            # Indexes reuse what a newer archive did not change; digests of the old files say
            # what that is without holding the old brain beside the new one.
            digests = await asyncio.to_thread(file_digests, copy.brain) if copy.brain.files else None
            # The old version goes before the new one is unpacked, never both at once: a clean
            # copy left empty by a failed load is simply pulled again on its next use.
            self._forget_brain(copy)
            with self._room_for_load():
                brain = await self._load(copy, download.data)
            del download
        copy.brain, copy.base_checksum, copy.key = brain, checksum, checksum
        copy.base_end = end
        copy.size_bytes = brain_bytes(brain)
        copy.checked_at = self._mono()
        if digests is not None and old_key != checksum:
            await asyncio.to_thread(self._follow, old_key, checksum, brain, BrainChange.since(digests, brain))
        self.long_lived.loaded()
        if not copy.account.writes:
            # What a listener does may write (the review queue's pairs): it waits for a writer.
            copy.pull_untold = True
            return
        self._tell_pull(copy, old_key)

    def _tell_pull(self, copy: WorkingCopy, old_key: str) -> None:
        """Tell the pull listeners of the copy's brain as it is now."""
        assert copy.brain_id is not None
        copy.pull_untold = False
        for listener in self.pull_listeners:
            try:
                listener(copy.account, copy.brain_id, old_key, copy.key, copy.brain)
            except Exception:  # a listener's failure never fails the pull
                log.warning("a pull listener failed", exc_info=True)

    @staticmethod
    def _forget_brain(copy: WorkingCopy) -> None:
        """Empty a clean copy: no archive held, pulled again (unconditionally) when next needed."""
        copy.brain, copy.base_checksum, copy.size_bytes = Brain(), None, 0
        copy.key = empty_key(copy.subject, copy.brain_id)
        copy.checked_at = -1e18

    async def _refresh(self, copy: WorkingCopy, *, force: bool = False) -> None:
        """Freshness rule: re-check a clean copy once the TTL passed (or when forced). Lock held."""
        if copy.dirty:
            # Never overwrite unsynced writes with a pull; try to push them instead.
            if self._mono() >= copy.next_retry_at:
                await self._push(copy)
            if copy.needs_rebase:
                why = f" ({copy.held_reason})" if copy.held_reason else ""
                raise BrainUnavailable(
                    f"The brain could not be loaded from the store{why}. Writes held before the connector "
                    "restarted are kept and pushed once it can be. Try again shortly."
                )
            return
        ttl = self.tuning.repull_ttl_s
        never_pulled = copy.checked_at < -1e17
        due = never_pulled or force or (ttl > 0 and self._mono() - copy.checked_at >= ttl)
        # Read before asking the store: a push published after this is noticed next time.
        head = await self._head(copy)
        if not due and (head is None or head == copy.head_seen):
            return
        try:
            await self._pull(copy, conditional=not never_pulled)
            copy.head_seen = head
        except StoreUnreachable:
            if never_pulled:
                raise BrainUnavailable(
                    Text("The store cannot be reached right now, so the brain could not be loaded. Try again shortly.")
                ) from None
            # Serve the copy held; the next check waits for the TTL again instead of every call
            # (a head that changed too: asking again on every call would wait on the store each time).
            copy.checked_at = self._mono()
            copy.head_seen = head
            log.warning("store unreachable on freshness check; serving the copy held")
        except StoreUnauthorized:
            raise SignInAgain() from None
        except StoreError as exc:
            raise BrainUnavailable(Text("The brain could not be loaded from the store: %(reason)s.", reason=str(exc))) from None

    async def _head(self, copy: WorkingCopy) -> str | None:
        """The copy's brain head now (`heads.py`, through its cache); None without heads or when it cannot be read."""
        heads = self.heads
        if heads is None or copy.brain_id is None:
            return None
        cached = heads.cached(copy.brain_id)
        if cached is not None:
            return cached
        if heads.inline:
            return heads.read(copy.brain_id)
        return await asyncio.to_thread(heads.read, copy.brain_id)

    async def _publish(self, copy: WorkingCopy) -> None:
        """After a push the store accepted: publish the brain's new head for the other processes.

        On a remote state (S3: a GET and a conditional PUT) the write is not waited for: the
        tool answers at once and the copy takes the new token as seen when it is published. The
        copy holds at least what it pushed by then, so taking that token never hides a change."""
        heads = self.heads
        if heads is None or copy.brain_id is None:
            return
        if heads.inline:  # a state directory: a locked rename, ~1-4 ms, kept off the event loop
            copy.head_seen = await asyncio.to_thread(heads.publish, copy.brain_id, copy.head_seen)
            return
        brain_id, seen = copy.brain_id, copy.head_seen

        async def publish() -> None:
            copy.head_seen = await asyncio.to_thread(heads.publish, brain_id, seen)

        task = asyncio.create_task(publish(), name="workcopy-publish-head")
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _ensure_brain(self, copy: WorkingCopy) -> None:
        """Create the brain at the store for a copy that has none yet. Lock held."""
        with self._watching(copy.account):
            record = await self.store.create_brain(copy.account.credential)
        old_key = (copy.subject, None)
        copy.brain_id, copy.brain_name, copy.base_checksum = record.id, record.name, None
        if self._copies.get(old_key) is copy:
            del self._copies[old_key]
        self._copies[(copy.subject, record.id)] = copy
        state = self._users.get(copy.subject)
        if state is not None:
            state.brains_at = -1e18  # re-list next time
        log.info("created a brain at the store for a first write", extra={"brain_id": record.id})

    async def _replay(self, copy: WorkingCopy, dropped: list[str]) -> bool:
        """Pull the store's brain and apply the pending writes on it; False when pushing stops here. Lock held."""
        try:
            dropped += await self._rebase(copy)
        except (StoreUnauthorized, StoreForbidden) as exc:
            if self._final(copy, exc):
                self._discard(copy, exc)
            else:
                self._hold(copy, "the sign-in expired; the write is pushed when the user signs in again")
            return False
        except (StoreError, BrainUnavailable) as exc:
            self._hold(copy, str(exc))
            return False
        if not copy.pending:
            self._mark_synced(copy, copy.base_checksum)
            return False
        return True

    async def _push_pending(self, copy: WorkingCopy) -> list[str]:
        """Push the copy's pending writes, rebasing on 412. Lock held. Returns labels of dropped writes."""
        dropped: list[str] = []
        if not copy.pending:
            return dropped
        for attempt in range(self.tuning.max_push_attempts):
            # A copy recovered from the journal first gets the store's brain under its writes.
            if copy.needs_rebase and not await self._replay(copy, dropped):
                return dropped
            archive = await asyncio.to_thread(pack_archive, copy.brain)
            self._release_follow(copy.key)  # the write's indexes follow while the store is awaited
            checksum: str | None = None
            if copy.base_checksum is not None and self._may_be_base(copy, archive):
                checksum = await asyncio.to_thread(_checksum, archive)
                if checksum == copy.base_checksum:
                    # Packing unchanged: nothing to send.
                    self._mark_synced(copy, checksum)
                    return dropped
            try:
                if copy.brain_id is None:
                    await self._ensure_brain(copy)
                assert copy.brain_id is not None
                with self._watching(copy.account):
                    if copy.base_checksum is None:
                        result = await self.store.upload(
                            copy.account.credential, copy.brain_id, archive, if_none_match_any=True
                        )
                    else:
                        result = await self.store.upload(
                            copy.account.credential, copy.brain_id, archive, if_match=copy.base_checksum
                        )
            except PreconditionFailed:
                log.info("push lost a race; rebasing pending writes", extra={"attempt": attempt + 1})
                if not await self._replay(copy, dropped):
                    return dropped
                delay = min(self.tuning.retry_cap_s, self.tuning.retry_base_s * (2**attempt))
                await self._sleep(random.uniform(0, delay))
                continue
            except (StoreNotFound, StoreUnauthorized, StoreForbidden) as exc:
                if self._final(copy, exc):
                    self._discard(copy, exc)
                else:
                    self._hold(copy, "the sign-in expired; the write is pushed when the user signs in again")
                return dropped
            except StoreError as exc:
                self._hold(copy, str(exc))
                return dropped
            pushed = result.checksum or checksum or await asyncio.to_thread(_checksum, archive)
            self._mark_synced(copy, pushed)
            copy.base_end = ArchiveEnd.of(pushed, archive)
            await self._publish(copy)
            self._note_pushed(copy, result)
            return dropped
        self._hold(copy, "other devices kept changing the brain at the same time")
        return dropped

    async def _rebase(self, copy: WorkingCopy) -> list[str]:
        """Pull the store's brain and apply the pending writes again, in order, with their ids."""
        base = Brain()
        checksum: str | None = None
        end: ArchiveEnd | None = None
        head = await self._head(copy)
        if copy.brain_id is not None:  # else: a brain-less account's first writes, recovered
            async with self._loads:
                try:
                    with self._watching(copy.account):
                        download = await self.store.download(copy.account.credential, copy.brain_id, None)
                except StoreNotFound:
                    download = None
                if download is not None and download.data is not None:
                    checksum = download.checksum or _checksum(download.data)
                    end = ArchiveEnd.of(checksum, download.data)
                    with self._room_for_load():
                        base = await self._load(copy, download.data)
                del download
        working = base.copy()
        kept, dropped = await asyncio.to_thread(self._apply_pending, copy, working)
        self._release_follow(copy.key)
        following = self._following.get(copy.key)
        if following is not None:
            await following  # the index of the write being replayed, to follow from
        key = f"rebased:{copy.subject}:{copy.brain_id}:{checksum}:{len(kept)}:{id(working)}"
        parsed = BrainChange.of_journal(working.journal or ()).parsed
        working.journal = None
        await asyncio.to_thread(self._follow_between, copy.key, key, copy.brain, working, parsed)
        copy.brain, copy.base_checksum, copy.pending = working, checksum, kept
        copy.base_end = end
        copy.needs_rebase = False
        copy.head_seen = head
        copy.size_bytes = brain_bytes(working)
        copy.key = key
        copy.checked_at = self._mono()
        return dropped

    @staticmethod
    def _apply_pending(copy: WorkingCopy, working: Brain) -> tuple[list[PendingWrite], list[str]]:
        """Apply the copy's pending writes to ``working`` in order (journal kept); (kept, dropped labels)."""
        working.journal = []
        kept: list[PendingWrite] = []
        dropped: list[str] = []
        for pending in copy.pending:
            try:
                pending.op.apply(working, pending.at)
                kept.append(pending)
            except Exception as exc:  # an op the newer brain no longer allows (e.g. pin of a forgotten id)
                log.warning("a pending write no longer applies after a concurrent change", extra={"op": pending.label})
                dropped.append(f"{pending.label}: {exc}")
        return kept, dropped

    def _follow_between(
        self, old_key: str, new_key: str, before: Brain, after: Brain, parsed: dict[str, Any] | None = None
    ) -> None:
        """Every index follows from ``before`` to ``after``, compared file by file (worker thread)."""
        self._follow(old_key, new_key, after, BrainChange.between(before, after, parsed))

    def _follow(self, old_key: str, new_key: str, brain: Brain, change: BrainChange) -> None:
        """Every index follows a copy's change (worker thread, copy lock held)."""
        for follower in self.followers:
            try:
                follower.follow(old_key, new_key, brain, change)
            except Exception:  # e.g. a brain recall cannot read: the next recall builds and reports it
                log.warning("an index could not follow a change; it is built again when needed", exc_info=True)

    def _note_pushed(self, copy: WorkingCopy, pushed: UploadResult) -> None:
        """Record in the cached brain list what the push changed: checksum, size, file count
        and time of the last sync.

        Until the list expires it would still show the brain as before the push, which read
        as "this account has no brain" right after the account's first write, and made
        brain_status say "0 bytes, never synced" after writes it had called saved and synced.
        The push told us all that changes, so the cached record is updated without asking
        the store.
        """
        state = self._users.get(copy.subject)
        if state is None or state.brains is None or not copy.base_checksum:
            return
        synced = datetime.fromtimestamp(copy.synced_at or time.time(), UTC).isoformat().replace("+00:00", "Z")
        state.brains = [
            dataclasses.replace(brain, checksum=copy.base_checksum, size_bytes=pushed.size_bytes,
                                file_count=pushed.file_count or brain.file_count, last_synced_at=synced)
            if brain.id == copy.brain_id else brain
            for brain in state.brains
        ]

    @staticmethod
    def _may_be_base(copy: WorkingCopy, archive: bytes) -> bool:
        """Whether ``archive`` may be the store's archive the copy is based on: only then is it
        hashed before the push (SHA-256 of 5 MB, ~3-5 ms of the answer's path; the store's
        answer gives the new checksum). A copy whose base archive was not seen here is hashed."""
        end = copy.base_end
        return end is None or end.checksum != copy.base_checksum or not end.differs(archive)

    def _mark_synced(self, copy: WorkingCopy, checksum: str | None) -> None:
        copy.pending.clear()
        copy.base_checksum = checksum
        if checksum:
            if copy.key != checksum:
                for follower in self.followers:
                    follower.rename(copy.key, checksum)
            copy.key = checksum
        copy.held_reason = None
        copy.failures = 0
        copy.next_retry_at = 0.0
        copy.checked_at = self._mono()
        copy.synced_at = time.time()
