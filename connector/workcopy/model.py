"""Plain data the working-copy manager works with: who calls, which brain, what happened.

No I/O here, so the tools and the tests can build and inspect these freely.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from connector.engine.format.brain import Brain
from connector.workcopy.store_client import BrainRecord

# How each identity provider is named to the user (wording names the kind in use).
ACCOUNT_KIND_LABELS = {
    "static": "a store token",
    "oidc": "your organisation's sign-in",
    "dev": "the development sign-in (one fixed local user)",
}

STATUS_NO_BRAIN = "no-cloud-brain"
STATUS_OK = "ok"
STATUS_MULTIPLE = "multiple-brains"


@dataclass(frozen=True)
class Account:
    """The caller of a tool: the connector subject and the credential used at the store."""

    subject: str
    credential: str
    kind: str = "static"
    client_name: str = ""
    # The sign-in (refresh-token family) the caller's access token belongs to; "" when unknown.
    session: str = ""
    # The brain (name or id) the connection is bound to (``/mcp/brains/{brain}``); "" for the
    # user's chosen brain (``/mcp``, switched with brain_use).
    brain: str = ""
    # False for a sign-in that may only read (no ``brain.write`` scope): nothing it does, not
    # even work a pull starts (the review queue's check), writes to a brain.
    writes: bool = True

    @property
    def kind_label(self) -> str:
        """How this account's sign-in is named in user-facing notes."""
        return ACCOUNT_KIND_LABELS.get(self.kind, "this sign-in")


class Operation(Protocol):
    """A brain write that can be applied again to a newer base and keeps its ids."""

    def apply(self, brain: Brain, now: datetime) -> dict[str, Any]:
        """Change ``brain`` in place and describe the result; raise on refusal (nothing changed)."""
        ...


@dataclass
class PendingWrite:
    """An acknowledged write not yet accepted by the store, with its original time."""

    op: Operation
    at: datetime
    label: str


@dataclass(frozen=True)
class ArchiveEnd:
    """An archive's checksum, length and last bytes: a pack whose length or last bytes differ
    is another archive, known without hashing its megabytes (gzip ends with the CRC-32 and
    length of what it holds, so a changed brain nearly always changes its last bytes)."""

    checksum: str
    length: int
    tail: bytes

    @classmethod
    def of(cls, checksum: str, archive: bytes) -> ArchiveEnd:
        """The end of ``archive``, whose checksum is ``checksum``."""
        return cls(checksum, len(archive), bytes(archive[-_TAIL_BYTES:]))

    def differs(self, archive: bytes) -> bool:
        """Whether ``archive`` is surely not the archive this describes."""
        return len(archive) != self.length or archive[-_TAIL_BYTES:] != self.tail


_TAIL_BYTES = 32  # a gzip trailer (8) and the deflate bytes before it


@dataclass
class WorkingCopy:
    """One user's in-memory copy of one brain.

    ``brain`` is the store's archive at ``base_checksum`` with ``pending`` applied
    on top. ``base_checksum`` None means the store holds no archive for it yet.
    ``key`` identifies the content for the recall-index cache.
    """

    subject: str
    brain_id: str | None
    brain_name: str
    brain: Brain
    base_checksum: str | None
    key: str
    account: Account
    pending: list[PendingWrite] = field(default_factory=list)
    checked_at: float = 0.0
    used_at: float = 0.0
    synced_at: float | None = None
    held_reason: str | None = None
    next_retry_at: float = 0.0
    failures: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Set when the store refused the copy's writes for good (brain deleted, access lost):
    # the copy is out of the manager and must not be served; the text is for the user.
    discarded: str | None = None
    # Bytes of the brain's files (what the copy costs in memory, roughly), for the LRU budget.
    size_bytes: int = 0
    # The held-write journal file of this copy (None until it first holds writes), and what
    # was last written there, so an unchanged copy is not written again on every retry.
    journal_name: str | None = None
    journaled: tuple[object, ...] | None = None
    # Restored from the journal at start-up: ``brain`` is not the store's brain yet; the
    # pending writes are applied to it when it is pulled (as after a lost race).
    needs_rebase: bool = False
    # A pull the pull listeners were not told of because the sign-in that pulled may only
    # read: told (with the copy as it is then) when a sign-in that may write uses the copy.
    pull_untold: bool = False
    # The brain's head token (`heads.py`) read before the copy last matched the store:
    # a different token now means another process pushed since. None: never read.
    head_seen: str | None = None
    # The archive at ``base_checksum`` as far as a push needs to tell a new pack apart from it
    # (`ArchiveEnd`): None when not seen here (recovered from the journal, never pulled).
    base_end: ArchiveEnd | None = None

    @property
    def dirty(self) -> bool:
        """True while some acknowledged write has not reached the store."""
        return bool(self.pending)


@dataclass(frozen=True)
class Identity:
    """What the user should know about which brain they are talking to."""

    status: str
    note: str | None
    brains: tuple[BrainRecord, ...]
    active_id: str | None
    # The brain in use exists but holds nothing yet (a new user): pages show a welcome, not a warning.
    empty: bool = False


@dataclass(frozen=True)
class WriteOutcome:
    """The result of one write: the operation's own result and whether it reached the store."""

    result: dict[str, Any]
    synced: bool
    brain_id: str | None
    brain_name: str
    held_reason: str | None = None
    pending_writes: int = 0
    dropped: tuple[str, ...] = ()
    brain: Brain | None = None
    key: str | None = None
    # The user's message when the store refused this write (and any held with it) for good.
    discarded: str | None = None
    # False when the write is held in this process's memory only (no journal, or it failed):
    # a restart before the store accepts it loses it.
    durable: bool = True


@dataclass(frozen=True)
class Snapshot:
    """A consistent read view of a working copy (or of no brain at all)."""

    brain: Brain | None
    key: str | None
    brain_id: str | None
    brain_name: str | None
    identity: Identity
    pending_writes: int = 0
    held_reason: str | None = None
    synced_at: float | None = None
    # The store could not be reached when the brains were last listed: identity's list is the last known.
    brains_stale: bool = False
