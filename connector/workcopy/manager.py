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
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from common.textsafety import escape_one_line
from connector.i18n import Text
from connector.engine.archive import ArchiveError, ArchiveLimits, ArchiveTooLarge, load_archive, pack_archive
from connector.engine.brain import Brain
from connector.engine.change import BrainChange, file_digests
from connector.engine.index import IndexCache
from connector.workcopy.heads import BrainHeads
from connector.workcopy.journal import HeldWriteJournal, JournalEntry, JournalError, new_entry_name
from connector.workcopy.longlived import LongLivedObjects, give_back_memory
from connector.workcopy.model import (
    STATUS_MULTIPLE,
    STATUS_NO_BRAIN,
    STATUS_OK,
    Account,
    Identity,
    Operation,
    PendingWrite,
    Snapshot,
    WorkingCopy,
    WriteOutcome,
)
from connector.workcopy.store_client import (
    BrainRecord,
    PreconditionFailed,
    StoreClient,
    StoreError,
    StoreForbidden,
    StoreNotFound,
    StoreUnauthorized,
    StoreUnreachable,
    UploadResult,
)

log = logging.getLogger("connector.workcopy")

# Recall indexes kept: one per copy the cap allows (CONNECTOR_MAX_WORKING_COPIES), at least 64,
# and this many without a cap (0). An index also leaves with the last copy of its content.
INDEX_CACHE_MIN = 64
INDEX_CACHE_UNCAPPED = 1024
SIGN_IN_AGAIN = Text("The store refused this sign-in's credential; sign in again.")
# Told (subject, store credential, session) when the store refuses a store token for good.
CredentialRefused = Callable[[str, str, str], None]


class BrainChoices(Protocol):
    """Where each user's chosen brain is persisted (the OAuth state store implements this)."""

    async def get_chosen_brain(self, subject: str) -> str | None:
        """The brain id the user chose with brain_use, or None."""
        ...

    async def set_chosen_brain(self, subject: str, brain_id: str) -> None:
        """Remember the user's choice across sessions and restarts."""
        ...


class MemoryBrainChoices:
    """Brain choices kept in memory only (tests, and when no state store is given)."""

    def __init__(self) -> None:
        self._chosen: dict[str, str] = {}

    async def get_chosen_brain(self, subject: str) -> str | None:
        """The remembered choice."""
        return self._chosen.get(subject)

    async def set_chosen_brain(self, subject: str, brain_id: str) -> None:
        """Remember a choice."""
        self._chosen[subject] = brain_id


class IndexFollower(Protocol):
    """Indexes kept per content key (`WorkingCopy.key`) that follow the copies' changes.

    The manager calls these in a worker thread, with the copy's lock held, right
    after each change: a write (``change`` from the brain's journal: the memory
    ids and files it changed), a replay after a 412 or a pull of a newer archive
    (``change`` from comparing the two brains file by file).
    """

    def follow(self, old_key: str, new_key: str, brain: Brain, change: BrainChange) -> object:
        """``brain`` is the content of ``old_key`` changed by ``change``; it is now ``new_key``."""
        ...

    def rename(self, old_key: str, new_key: str) -> None:
        """The content of ``old_key`` is now known as ``new_key`` (unchanged)."""
        ...


class BrainUnavailable(Exception):
    """The brain cannot be served right now; the message is safe to show to the user."""


class SignInAgain(BrainUnavailable):
    """The store refused the caller's credential (401/403): only a new sign-in helps."""

    def __init__(self, message: str = SIGN_IN_AGAIN) -> None:
        super().__init__(message)


class UnknownBrain(Exception):
    """brain_use named no brain of this account; carries the names to offer."""

    def __init__(self, wanted: str, brains: list[BrainRecord], message: str | None = None) -> None:
        self.wanted = wanted
        self.brains = brains
        names = ", ".join(f"{escape_one_line(b.name)} ({b.id})" for b in brains) or "none"
        super().__init__(message or f"No brain named '{escape_one_line(wanted)}' in this account. Brains: {names}.")


class AmbiguousBrain(UnknownBrain):
    """A name several brains of this account answer to (none of them the caller's own, or several
    of its own): refused with the choices, by id and owner, rather than guessed."""

    def __init__(self, wanted: str, choices: list[BrainRecord]) -> None:
        listed = "; ".join(
            f"{escape_one_line(b.name)} ({b.id}" + (f", owned by {escape_one_line(b.owner)}" if b.owner else "") + ")"
            for b in choices
        )
        super().__init__(wanted, choices, f"Several brains are named '{escape_one_line(wanted)}': {listed}. "
                                          "Nothing was used; name one by its id (brain_use <id>, or the URL "
                                          "/mcp/brains/<id>).")


@dataclass
class ManagerTuning:
    """Knobs of the manager; defaults suit production, tests shrink them."""

    repull_ttl_s: float = 120.0
    idle_purge_s: float = 900.0
    brains_ttl_s: float = 30.0
    max_push_attempts: int = 8
    retry_base_s: float = 0.05
    retry_cap_s: float = 1.0
    held_retry_s: float = 5.0
    maintenance_every_s: float = 5.0
    # Caps on the copies held at once (0 = no cap): beyond either, the least recently
    # used clean copies are dropped (they are pulled again when needed). A copy with
    # writes the store has not accepted yet is never dropped.
    max_copies: int = 0
    max_copy_bytes: int = 0
    # What one working copy may hold once unpacked (the whole brain lives in memory).
    archive_limits: ArchiveLimits = field(
        default_factory=lambda: ArchiveLimits(max_inflated=128 * 1024 * 1024, max_entries=200_000)
    )
    # Brains downloaded and unpacked at once; more wait their turn.
    max_loads: int = 2

    @property
    def load_cost(self) -> int:
        """Bytes one load may hold at its peak, reserved in ``max_copy_bytes`` before it unpacks.

        The archive (at most ``max_inflated``), the files taken out of it (at most
        ``max_inflated``) and, briefly, the largest file twice over while it is cut out
        of the stream: three times the limit bounds it.
        """
        return 3 * self.archive_limits.max_inflated


@dataclass
class _UserState:
    subject: str
    account: Account
    brains: list[BrainRecord] | None = None
    brains_at: float = -1e18
    lock: asyncio.Lock | None = None
    # Who this account is at the store (name, kind), as memories written to shared brains name them.
    who: tuple[str, str] | None = None
    # A chosen brain id missing from the list even after listing again for it (see _active).
    missing_choice: str | None = None


def oldest_first(brains: list[BrainRecord]) -> list[BrainRecord]:
    """Brains ordered oldest first: by creation time, then id."""
    return sorted(brains, key=lambda b: (b.created_at, b.id))


def is_own(record: BrainRecord, me: str | None) -> bool:
    """Whether the caller created ``record`` (``me``: the caller's name at the store, None when
    unknown). A store without sharing lists no role: every brain is the caller's. Without the
    name, only the owner role counts (an editor or viewer is never the creator)."""
    if record.role is None:
        return True
    if me is not None:
        return bool(record.owner) and record.owner == me
    return record.role == "owner"


def choose_brain(brains: list[BrainRecord], chosen_id: str | None, me: str | None = None) -> BrainRecord | None:
    """The chosen brain when it still exists, else the caller's own oldest one, else None.

    A brain shared with the caller is used only when chosen (brain_use) or named (a brain's
    URL): a share never changes where a connection that chose nothing reads or writes (an
    account with only shared brains gets its own on its first write)."""
    if chosen_id:
        for brain in brains:
            if brain.id == chosen_id.lower():
                return brain
    ordered = oldest_first([b for b in brains if is_own(b, me)])
    return ordered[0] if ordered else None


def find_brain(brains: list[BrainRecord], wanted: str, me: str | None = None) -> BrainRecord | None:
    """A brain by id (any case), else by exact name, else by name ignoring case.

    Among brains of that name the caller's own one wins (a share never takes a name that
    already pointed at the caller's brain); several others by that name raise AmbiguousBrain
    with the choices, never a guess."""
    text = wanted.strip()
    for brain in brains:
        if brain.id == text.lower():
            return brain
    for same in (lambda b: b.name == text, lambda b: b.name.lower() == text.lower()):
        named = [b for b in brains if same(b)]
        own = [b for b in named if is_own(b, me)]
        if len(own) == 1:
            return own[0]
        if len(own) > 1 or len(named) > 1:
            raise AmbiguousBrain(wanted, oldest_first(own or named))
        if named:
            return named[0]
    return None


def viewer_refusal(record: BrainRecord) -> str:
    """Why a write to a brain the user only views is refused (before anything is attempted)."""
    owner = f", shared by {escape_one_line(record.owner)}" if record.owner else ""
    return (
        f"Not saved: you are a viewer of the brain '{escape_one_line(record.name)}'{owner}. A viewer can recall and "
        "read it but not change it; nothing was changed. Ask its owner for the editor role, or switch to one of "
        "your own brains with brain_use."
    )


def empty_brain_note(name: str) -> str:
    """What a new user reads while the brain in use holds nothing yet: what to do next."""
    return (
        f"Your brain '{escape_one_line(name)}' is ready and empty: nothing is saved yet. Ask your assistant to "
        "remember something (brain_memorize), or add a memory in the web app (New memory); every assistant "
        "connected to this brain can then recall it."
    )


def identity_for(account: Account, brains: list[BrainRecord], active: BrainRecord | None) -> Identity:
    """The identity signal of section 5: status and the note the user should see.

    An account with no brain at all may be a different account than the one used elsewhere:
    that is warned about. An account whose brain exists but is empty is a new user: it gets a
    welcome saying what to do next, not a warning."""
    label = account.kind_label
    if not brains:
        note = (
            f"This account (signed in with {label}) has no brain at the store yet. "
            "Probably a different account is signed in than the one used elsewhere, or this is a new user. "
            "The first memory saved creates one."
        )
        return Identity(STATUS_NO_BRAIN, note, tuple(brains), active.id if active else None, empty=True)
    if active is None:
        # Only brains shared with the account: none is used until chosen (see choose_brain).
        shared = ", ".join(f"'{escape_one_line(b.name)}' ({b.id}" + (f", shared by {escape_one_line(b.owner)}"
                                                                    if b.owner else "") + ")" for b in brains)
        note = (
            f"This account (signed in with {label}) has no brain of its own yet; shared with it: {shared}. "
            "The first memory saved creates its own brain; brain_use <id> switches to a shared one."
        )
        return Identity(STATUS_NO_BRAIN, note, tuple(brains), None, empty=True)
    empty = active is not None and not active.checksum
    welcome = empty_brain_note(active.name) if empty and active is not None else None
    if len(brains) > 1 and active is not None:
        note = (
            f"This account (signed in with {label}) has {len(brains)} brains; serving '{escape_one_line(active.name)}' "
            f"({active.id}). Use brain_use to switch."
        )
        return Identity(STATUS_MULTIPLE, f"{note} {welcome}" if welcome else note, tuple(brains), active.id,
                        empty=empty)
    return Identity(STATUS_OK, welcome, tuple(brains), active.id if active else None, empty=empty)


# Notices kept per user about dropped writes (the most recent ones).
_MAX_NOTICES = 10


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


def _counted(labels: list[str]) -> str:
    """``["memorize", "pin", "memorize"]`` as ``"2 memorize, 1 pin"``."""
    return ", ".join(f"{labels.count(label)} {label}" for label in dict.fromkeys(labels))


def _journal_mark(copy: WorkingCopy) -> tuple[object, ...]:
    """What a copy's journal file says; when it changes, the file is written again."""
    return (copy.account, copy.brain_id, copy.base_checksum, tuple(id(item) for item in copy.pending))


def _checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _packed(brain: Brain) -> tuple[bytes, str]:
    """The brain's archive and its checksum (in a worker thread: hashing megabytes on the
    event loop held up every other call)."""
    archive = pack_archive(brain)
    return archive, _checksum(archive)


def _apply_journaled(op: Operation, working: Brain, at: datetime) -> tuple[dict[str, Any], BrainChange]:
    """``op`` applied to ``working`` (raises, changing nothing, on refusal) and what it changed."""
    working.journal = []
    try:
        result = op.apply(working, at)
    finally:
        journal, working.journal = working.journal, None
    return result, BrainChange.of_journal(journal)


def _empty_key(subject: str, brain_id: str | None) -> str:
    return f"empty:{subject}:{brain_id or '-'}"


class WorkingCopyManager:
    """Owns every working copy of this process."""

    def __init__(
        self,
        store: StoreClient,
        *,
        choices: BrainChoices | None = None,
        tuning: ManagerTuning | None = None,
        journal: HeldWriteJournal | None = None,
        heads: BrainHeads | None = None,
        clock: Callable[[], datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        index_cache: IndexCache | None = None,
    ) -> None:
        self.store = store
        self.choices: BrainChoices = choices or MemoryBrainChoices()
        self.tuning = tuning or ManagerTuning()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._mono = monotonic
        self._sleep = sleep
        self._copies: dict[tuple[str, str | None], WorkingCopy] = {}
        self._users: dict[str, _UserState] = {}
        # Per subject: what the user must hear about writes that were dropped (see _discard).
        self._notices: dict[str, list[str]] = {}
        self.journal = journal
        # Each brain's head, shared with the other processes on the state directory (None: alone).
        self.heads = heads
        self._publishing: set[asyncio.Task[None]] = set()  # heads being published (remote state)
        # Per subject: the kinds of the writes recovered from the journal at start-up (told once).
        self._recovered: dict[str, list[str]] = {}
        self.long_lived = LongLivedObjects()
        # Recall indexes by content key; every change of a copy is followed in them. Room for
        # one per copy held (a fixed 64 made 200 users rebuild their indexes on every recall);
        # an index leaves with the last copy of its content, so the copy caps bound both.
        if index_cache is None:
            index_cache = IndexCache(capacity=max(INDEX_CACHE_MIN, self.tuning.max_copies or INDEX_CACHE_UNCAPPED))
        self.index_cache = index_cache
        self.followers: list[IndexFollower] = [self.index_cache]
        self._following: dict[str, asyncio.Task[None]] = {}  # content key -> its index being followed
        self._maintenance: asyncio.Task[None] | None = None
        # Brain loads under way (bounded), and the bytes of the budget they have reserved.
        self._loads = asyncio.Semaphore(max(1, self.tuning.max_loads))
        self._reserved = 0
        # Set by the OAuth side (connector/oauth/routes.py): ends the sign-ins of a dead store token.
        self.on_credential_refused: CredentialRefused | None = None
        # Told of every pull that brought a newer archive: (account, brain id, old key, new key, brain).
        # Called on the event loop with the copy's lock held, so a listener only schedules work
        # (the review queue's check of memories other devices wrote: connector/mcp/pullreview.py).
        self.pull_listeners: list[Callable[[Account, str, str, str, Brain], None]] = []

    # ----- lifecycle -------------------------------------------------------

    def start(self) -> None:
        """Start the background task that retries held writes and purges idle copies.

        Writes recovered from the journal are tried at once, not after the first interval.
        """
        if self._maintenance is None:
            at_once = any(copy.dirty for copy in self._copies.values())
            self._maintenance = asyncio.create_task(self._maintain_forever(at_once), name="workcopy-maintenance")

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

    @property
    def copies(self) -> dict[tuple[str, str | None], WorkingCopy]:
        """The live copies (for status and tests; do not mutate)."""
        return self._copies

    def now(self) -> datetime:
        """The current wall-clock time used for operations."""
        return self._clock()

    # ----- brain choice ----------------------------------------------------

    def _user(self, account: Account) -> _UserState:
        state = self._users.get(account.subject)
        if state is None:
            state = _UserState(subject=account.subject, account=account, lock=asyncio.Lock())
            self._users[account.subject] = state
        state.account = account
        return state

    async def _brains(self, state: _UserState, *, force: bool = False) -> list[BrainRecord]:
        fresh = self._mono() - state.brains_at < self.tuning.brains_ttl_s
        if state.brains is not None and fresh and not force:
            return state.brains
        try:
            with self._watching(state.account):
                state.brains = await self.store.list_brains(state.account.credential)
            state.brains_at = self._mono()
        except StoreUnreachable:
            if state.brains is None:
                raise
            # Keep serving the last known list; look again in a few seconds, not on every call.
            state.brains_at = self._mono() - self.tuning.brains_ttl_s + min(5.0, self.tuning.brains_ttl_s)
            log.warning("store unreachable while listing brains; using the last known list")
        return state.brains

    async def _active(self, account: Account, *, force_list: bool = False) -> tuple[list[BrainRecord], BrainRecord | None]:
        if account.brain:
            return await self._bound(account, force_list=force_list)
        state = self._user(account)
        assert state.lock is not None
        chosen = await self.choices.get_chosen_brain(account.subject)
        async with state.lock:
            brains = await self._brains(state, force=force_list)
            if chosen and chosen != state.missing_choice and not any(brain.id == chosen.lower() for brain in brains):
                # Chosen through another worker or replica (the choice is shared) after this one
                # listed the brains, e.g. a brain created since: list again, once per such choice
                # (a chosen brain deleted at the store must not cost a listing on every call).
                state.missing_choice = chosen
                brains = await self._brains(state, force=True)
        return brains, choose_brain(brains, chosen, await self._me(account, brains))

    async def _me(self, account: Account, brains: list[BrainRecord]) -> str | None:
        """The caller's name at the store, which tells its own brains from those shared with it
        (see `is_own`); asked only of a store that shares brains, None when it cannot say."""
        if all(brain.role is None for brain in brains):
            return None
        who = await self._who(account)
        return who[0] or None if who is not None else None

    async def _bound(self, account: Account, *, force_list: bool = False) -> tuple[list[BrainRecord], BrainRecord]:
        """A connection bound to one brain (``/mcp/brains/{brain}``): that brain alone, by id or name.

        A brain created or shared since the last listing is looked for once more (once per
        such name: asking again and again for a brain that is not there must not cost a
        listing each time); one the account cannot see raises UnknownBrain, the same
        whether it exists or not.
        """
        state = self._user(account)
        assert state.lock is not None
        async with state.lock:
            brains = await self._brains(state, force=force_list)
            found = find_brain(brains, account.brain, await self._me(account, brains))
            if found is None and not force_list and state.missing_choice != account.brain:
                state.missing_choice = account.brain
                brains = await self._brains(state, force=True)
                found = find_brain(brains, account.brain, await self._me(account, brains))
        if found is None:
            raise UnknownBrain(account.brain, oldest_first(brains))
        return [found], found

    async def bound_brain(self, account: Account) -> BrainRecord | None:
        """The brain a bound connection names when this account can see it, else None; AmbiguousBrain
        when the name is several brains' (none of them the account's own)."""
        try:
            _, found = await self._bound(account)
        except AmbiguousBrain:
            raise
        except UnknownBrain:
            return None
        return found

    async def brain_id_of(self, subject: str, credential: str, brain: str) -> str:
        """The id of the brain ``brain`` (a name or id) names for this account now; "" when none
        does, several do, or the store cannot say (a sign-in for a brain's URL keeps the id)."""
        try:
            found = await self.bound_brain(Account(subject=subject, credential=credential, brain=brain))
        except (UnknownBrain, StoreError):
            return ""
        return found.id if found is not None else ""

    async def use_brain(self, account: Account, wanted: str) -> tuple[BrainRecord, Identity]:
        """Switch the user's brain (by name or id) and persist the choice."""
        state = self._user(account)
        assert state.lock is not None
        async with state.lock:
            brains = await self._brains(state, force=True)
        found = find_brain(brains, wanted, await self._me(account, brains))
        if found is None:
            raise UnknownBrain(wanted, oldest_first(brains))
        await self.choices.set_chosen_brain(account.subject, found.id)
        copy = await self._copy_for(account, found)
        if copy is not None:
            async with copy.lock:
                await self._refresh(copy, force=True)
        return found, identity_for(account, brains, found)

    # ----- copies ----------------------------------------------------------

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
                key=_empty_key(account.subject, record.id),
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
        copy.key = _empty_key(copy.subject, copy.brain_id)
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
                return Snapshot(None, None, None, None, identity)
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
        )

    async def writer(self, account: Account) -> str:
        """How a memory written to the active brain names its writer: the store's name for the
        account (``alice``, ``alice via an agent key``) when the store shares brains, else "".

        Asked once per account (``GET /auth/me``); a failure leaves it unnamed, never blocks the write.
        """
        try:
            _, active = await self._active(account)
        except StoreError:
            return ""
        if active is None or active.role is None:
            return ""
        who = await self._who(account)
        if who is None:
            return ""
        name, kind = who
        return f"{name} via an agent key" if name and kind == "agent-key" else name

    async def _who(self, account: Account) -> tuple[str, str] | None:
        """The account's name and kind (``static``, ``oidc``, ``agent-key``) at the store, asked
        once (``GET /auth/me``); None when the store cannot say."""
        state = self._user(account)
        if state.who is None:
            try:
                with self._watching(account):
                    me = await self.store.me(account.credential)
            except StoreError:
                return None
            user = me.get("user") if isinstance(me.get("user"), dict) else {}
            name = next((str(user[k]) for k in ("name", "email", "id") if isinstance(user.get(k), str) and user[k]), "")
            state.who = (name, str(user.get("kind") or ""))
        return state.who

    async def _read_only_refusal(self, account: Account, record: BrainRecord) -> str:
        """Why a write to a brain this account may only read is refused: a viewer's role, or a
        read-only agent key (of the brain's owner: then the role is not the reason at all)."""
        who = await self._who(account)
        if who is None or who[1] != "agent-key":
            return viewer_refusal(record)
        name = escape_one_line(record.name)
        if record.owner and record.owner == who[0]:
            reason = f"this connection uses a read-only agent key for the brain '{name}' (your own brain)"
        else:
            reason = (f"this connection's agent key may only read the brain '{name}' (a read-only key, "
                      "or its user is a viewer of the brain)")
        return (
            f"Not saved: {reason}. It can recall and read but not change the brain; nothing was changed. "
            "For this agent to write, sign it in with an agent key created with write access "
            "(brain-store key create --scope write)."
        )

    async def brains(self, account: Account) -> tuple[list[BrainRecord], BrainRecord | None]:
        """The account's brains (refreshed) and the active one."""
        return await self._active(account, force_list=True)

    # ----- writes ----------------------------------------------------------

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
                    active = choose_brain(brains, await self.choices.get_chosen_brain(account.subject), me)
            if active is None and (account.subject, None) not in self._copies:
                raise BrainUnavailable(
                    Text("The store cannot be reached right now, so nothing was saved. Try again shortly.")
                ) from None
        if active is not None and active.read_only:
            raise BrainUnavailable(await self._read_only_refusal(account, active))
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
                    key=_empty_key(account.subject, None),
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
            # The indexes follow the write while it is packed and pushed (mostly waiting
            # for the store); the call returns once both are done.
            following = asyncio.create_task(asyncio.to_thread(self._follow, copy.key, key, working, change))
            self._following[key] = following
            copy.size_bytes = changed_bytes(copy.size_bytes, copy.brain, working, change.paths)
            copy.brain = working
            copy.key = key
            copy.pending.append(PendingWrite(op=op, at=at, label=label))
            try:
                dropped = await self._push(copy)
            finally:
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
            archive, checksum = await asyncio.to_thread(_packed, copy.brain)
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
            self._mark_synced(copy, result.checksum or checksum)
            await self._publish(copy)
            self._note_pushed(copy, result)
            return dropped
        self._hold(copy, "other devices kept changing the brain at the same time")
        return dropped

    async def _rebase(self, copy: WorkingCopy) -> list[str]:
        """Pull the store's brain and apply the pending writes again, in order, with their ids."""
        base = Brain()
        checksum: str | None = None
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
                    with self._room_for_load():
                        base = await self._load(copy, download.data)
                del download
        working = base.copy()
        kept, dropped = await asyncio.to_thread(self._apply_pending, copy, working)
        following = self._following.get(copy.key)
        if following is not None:
            await following  # the index of the write being replayed, to follow from
        key = f"rebased:{copy.subject}:{copy.brain_id}:{checksum}:{len(kept)}:{id(working)}"
        parsed = BrainChange.of_journal(working.journal or ()).parsed
        working.journal = None
        await asyncio.to_thread(self._follow_between, copy.key, key, copy.brain, working, parsed)
        copy.brain, copy.base_checksum, copy.pending = working, checksum, kept
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

    @contextlib.contextmanager
    def _watching(self, account: Account) -> Iterator[None]:
        """Around a store call with ``account``'s credential: a dead store token ends its sign-ins.

        The store counts every 401 as a failed login against the connector's address,
        which carries every user's requests: a client that kept calling with a removed
        or rotated token would get the whole connector refused (429) within a minute.
        So the first 401 for a store token ends the sign-ins using it, and the client's
        next call is refused here (401, sign in again) without asking the store. An
        organisation sign-in's 401 only means its ID token expired: kept, as before.
        The exception goes on to the caller unchanged.
        """
        try:
            yield
        except StoreUnauthorized as refusal:
            hook = self.on_credential_refused
            if refusal.status == 401 and account.kind != "oidc" and hook is not None:
                try:
                    hook(account.subject, account.credential, account.session)
                except Exception:  # the refusal is reported either way; ending the sign-in is best effort
                    log.exception("ending the sign-ins of a refused store token failed")
            raise

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

    # ----- memory budget ---------------------------------------------------

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

    # ----- maintenance -----------------------------------------------------

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
