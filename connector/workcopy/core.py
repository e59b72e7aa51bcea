"""The working-copy manager's shared state, errors and tuning (`ManagerCore`).

The manager (`manager.py`) is made of parts that each do one job on this state: the account's
brains (`accounts.py`), pulling and pushing (`sync.py`), held writes (`held.py`) and the memory
budget and maintenance (`upkeep.py`). Each part is a class over `ManagerCore`;
`WorkingCopyManager` joins them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from connector.engine.format.archive import ArchiveLimits
from connector.engine.format.brain import Brain
from connector.engine.format.change import BrainChange
from connector.engine.recall.indexcache import IndexCache
from connector.i18n import Text
from connector.workcopy.heads import BrainHeads
from connector.workcopy.journal import HeldWriteJournal
from connector.workcopy.longlived import LongLivedObjects
from connector.workcopy.model import Account, WorkingCopy
from connector.workcopy.store_client import BrainRecord, StoreClient, StoreError, StoreUnauthorized

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
class UserState:
    subject: str
    account: Account
    brains: list[BrainRecord] | None = None
    brains_at: float = -1e18
    lock: asyncio.Lock | None = None
    # Who this account is at the store (name, kind), as memories written to shared brains name them.
    who: tuple[str, str] | None = None
    # The one brain an agent key was made for (its only brain for good), else "" (asked with ``who``).
    key_brain: str = ""
    # A chosen brain id missing from the list even after listing again for it (see _active).
    missing_choice: str | None = None
    # The last listing failed (store unreachable): ``brains`` is the last known list.
    brains_stale: bool = False


class ManagerCore:
    """The state every part of the working-copy manager works on, made in one place, and what
    all of them use: the clock, each user's state, the watch on store calls."""

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
        self._users: dict[str, UserState] = {}
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
        # Content key -> the gate its follow waits at: opened once the write's archive is packed
        # (the follow then runs while the push waits for the store) or when anything needs it.
        self._follow_gates: dict[str, asyncio.Event] = {}
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

    @property
    def copies(self) -> dict[tuple[str, str | None], WorkingCopy]:
        """The live copies (for status and tests; do not mutate)."""
        return self._copies

    def now(self) -> datetime:
        """The current wall-clock time used for operations."""
        return self._clock()

    def _user(self, account: Account) -> UserState:
        state = self._users.get(account.subject)
        if state is None:
            state = UserState(subject=account.subject, account=account, lock=asyncio.Lock())
            self._users[account.subject] = state
        state.account = account
        return state

    if TYPE_CHECKING:
        # What one part calls on another (each is defined in the part named), so that each part
        # type-checks on its own; `WorkingCopyManager` has them all.
        async def _copy_for(self, account: Account, record: BrainRecord | None) -> WorkingCopy | None: ...  # manager
        async def _refresh(self, copy: WorkingCopy, *, force: bool = False) -> None: ...  # sync
        async def _push_pending(self, copy: WorkingCopy) -> list[str]: ...  # sync
        async def recover(self) -> int: ...  # held
        async def _push(self, copy: WorkingCopy) -> list[str]: ...  # held
        def _hold(self, copy: WorkingCopy, reason: str) -> None: ...  # held
        def _discard(self, copy: WorkingCopy, refusal: StoreError) -> None: ...  # held
        @staticmethod
        def _final(copy: WorkingCopy, refusal: StoreError) -> bool: ...  # held
        def _room_for_load(self) -> contextlib.AbstractContextManager[None]: ...  # upkeep
        def _forget_index(self, dropped: WorkingCopy) -> None: ...  # upkeep

    def _release_follow(self, key: str) -> None:
        """Let the index follow of the write that made ``key`` start (no-op when it has)."""
        gate = self._follow_gates.pop(key, None)
        if gate is not None:
            gate.set()

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
