"""The web app's writes: the very operations the MCP tools apply, through the same manager.

Pin, unpin, forget, approve and reject are `connector.engine.writes.ops` operations;
restore is `connector.engine.writes.restore.Restore`; an edit is a ``brain_memorize``
of the new text that supersedes the old memory (so history is kept). Each goes
through ``WorkingCopyManager.write``: applied to the working copy, pushed with
If-Match, replayed on a conflict, held and retried when the store is away.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from connector.engine.recall.index import RecallError
from connector.engine.recall.indexcache import index_for
from connector.engine.tending.review import DECISIONS, Decide
from connector.engine.writes.credentials import credential_refusal, credentials_in_memories
from connector.engine.writes.errors import BrainError
from connector.engine.writes.memorize import (MAX_CONTENT_CHARS, MAX_TITLE_CHARS, WEB_APP_SOURCE, OverLimit,
                                             OverLimitError, attributed, connector_memory)
from connector.engine.writes.ops import Forget, Memorize, Operation, Pin, Unpin, Verify, connector_memorize
from connector.engine.writes.restore import Restore
from connector.i18n import N_, Text, message_of
from connector.mcp.tools import BrainTools
from connector.workcopy.accounts import UnknownBrain
from connector.workcopy.core import BrainUnavailable
from connector.workcopy.manager import WorkingCopyManager
from connector.workcopy.model import Account, WriteOutcome
from connector.workcopy.store_client import StoreError

EDIT_ORIGIN = "user"  # the person typed it in the app themselves
# An import's memories whose similar pairs its write queues for review (the dry run lists the first
# SIMILAR_CHECKED of connector/webapp/routes.py): each check embeds a text.
IMPORT_CHECKED = 50


class ActionRefused(Exception):
    """The write did not happen; the message is safe to show to the person."""


def _refuse_too_long(title: str, content: str) -> None:
    """Refuse a memory's text over the limits brain_memorize has, saying them (in characters)."""
    if len(content) > MAX_CONTENT_CHARS or len(title) > MAX_TITLE_CHARS:
        raise ActionRefused(Text("The text is too long: at most %(content)s characters, and %(title)s for the title.",
                                 content=MAX_CONTENT_CHARS, title=MAX_TITLE_CHARS))


def limit_refusal(over: OverLimit) -> Text:
    """Why a memory with a field past its limit (`over_limit`, the limits brain_memorize and an
    import hold to) was not saved, naming the field and the limit."""
    if over.kind == "items":
        return Text("'%(field)s' has more than %(count)s items; nothing was saved.", field=over.field, count=over.count)
    if over.kind == "item_chars":
        return Text("'%(field)s' holds an item longer than %(count)s characters; nothing was saved.",
                    field=over.field, count=over.count)
    return Text("'%(field)s' is longer than %(count)s characters; nothing was saved.",
                field=over.field, count=over.count)


# Why a page, or a write, for the brain a link or form names is refused when this person can no longer reach it.
GONE_BRAIN = N_("The brain this page was made for is gone, or no longer shared with you; nothing was read "
                "or changed.")


def store_refusal(exc: StoreError) -> Text:
    """Why a write the store could not complete changed nothing."""
    return Text("The store could not complete this (%(reason)s); nothing was changed.", reason=str(exc))


def old_version_refusal(newer: str) -> Text:
    """Why an old (superseded) version is not edited, pinned or forgotten."""
    return Text("This is an old version, replaced by %(newer)s; nothing was changed. "
                "Open the current version to change it.", newer=newer)


@dataclass(frozen=True)
class Done:
    """A write that happened: the memory to show next, and whether the store has it yet."""

    memory_id: str
    synced: bool
    changed: bool = True  # False: nothing needed doing (e.g. unpinning a memory that was not pinned)


class BrainActions:
    """Every write the app offers, for one signed-in account at a time."""

    def __init__(self, manager: WorkingCopyManager, tools: BrainTools) -> None:
        self.manager = manager
        self.tools = tools

    async def _apply(self, account: Account, op: Operation, label: str) -> WriteOutcome:
        try:
            outcome = await self.manager.write(account, op, label)
        except BrainError as exc:
            raise ActionRefused(str(exc)) from None
        except BrainUnavailable as exc:
            raise ActionRefused(message_of(exc)) from None
        except UnknownBrain:  # the brain a page was shown for (`addressed`) went away meanwhile
            raise ActionRefused(GONE_BRAIN) from None
        except StoreError as exc:
            raise ActionRefused(store_refusal(exc)) from None
        if outcome.discarded:
            raise ActionRefused(outcome.discarded)
        # Same as after a tool's write: build the next recall index in the background.
        self.tools.prewarm(outcome)
        return outcome

    async def addressed(self, account: Account, brain_id: str) -> Account:
        """``account`` writing to the brain ``brain_id`` (the one a page or a dry run was made
        for), whatever brain is in use by then: the brain in use is the account's, switched by its
        MCP connections (brain_use) and other tabs. "" leaves ``account`` as is (a page made before
        the account had a brain). ActionRefused when this person can no longer reach that brain."""
        if not brain_id:
            return account
        try:
            found = await self.manager.bound_brain(replace(account, brain=brain_id[:200]))
        except (UnknownBrain, BrainUnavailable) as exc:  # several brains by that name; a share just lost
            raise ActionRefused(message_of(exc)) from None
        except StoreError as exc:
            raise ActionRefused(store_refusal(exc)) from None
        if found is None:
            raise ActionRefused(GONE_BRAIN)
        return replace(account, brain=found.id)

    async def write(self, account: Account, op: Operation, label: str) -> Done:
        """Any other operation; the Done names no particular memory."""
        outcome = await self._apply(account, op, label)
        return Done("", outcome.synced)

    async def import_memories(self, account: Account, op: Memorize) -> Done:
        """An import's one Memorize; its first `IMPORT_CHECKED` memories get brain_memorize's similar check.
        On a store that shares brains each memory's ``source`` names who imported it, after what the
        file said (which may name anyone)."""
        writer = await self.manager.writer(account)
        if writer:
            op = replace(op, memories=[replace(memory, source=attributed(memory.source, writer, "imported"))
                                       for memory in op.memories])
        op = await self._review_flagged(account, op, limit=IMPORT_CHECKED)
        return await self.write(account, op, "import")

    async def _review_flagged(self, account: Account, op: Memorize, limit: int | None = None) -> Memorize:
        """``op`` carrying the pairs brain_memorize's similar check flags, queued for review in the same write."""
        try:
            snapshot = await self.manager.snapshot(account)
        except BrainUnavailable:
            return op  # no check: the write itself says why nothing could be saved
        by = await self.manager.writer(account) or "web app"
        return await self.tools.with_review_flags(snapshot, op, by=by, limit=limit)

    async def _refuse_old_version(self, account: Account, memory_id: str) -> None:
        """An old version (superseded) is history: it is not edited, pinned or forgotten here,
        so no write from the app can make two versions of a fact current."""
        snapshot = await self.manager.snapshot(account)
        if snapshot.brain is None or "index.json" not in snapshot.brain:
            return
        # The recall index brain_recall and the pages share (a cache hit), not index.json parsed again.
        try:
            index = await asyncio.to_thread(index_for, snapshot.brain, snapshot.key, self.tools.index_cache)
        except RecallError:
            return  # an unreadable index: the operation itself refuses what it cannot do
        position = index.positions.get(memory_id)
        newer = index.memories[position].entry.get("superseded_by") if position is not None else None
        if isinstance(newer, str) and newer:
            raise ActionRefused(old_version_refusal(newer))

    async def pin(self, account: Account, memory_id: str) -> Done:
        """Pin into the always-present tier."""
        await self._refuse_old_version(account, memory_id)
        outcome = await self._apply(account, Pin(memory_id), "pin")
        return Done(memory_id, outcome.synced)

    async def unpin(self, account: Account, memory_id: str) -> Done:
        """Back to normal recall and decay; ``changed`` is False when it was not pinned."""
        outcome = await self._apply(account, Unpin(memory_id), "unpin")
        return Done(memory_id, outcome.synced, changed=bool(outcome.result.get("was_pinned")))

    async def forget(self, account: Account, memory_id: str, *, force: bool) -> Done:
        """To the archive (recoverable); salient memories need ``force`` as with brain_forget."""
        await self._refuse_old_version(account, memory_id)
        outcome = await self._apply(account, Forget(memory_id, force=force), "forget")
        return Done(memory_id, outcome.synced)

    async def restore(self, account: Account, memory_id: str) -> Done:
        """Back from the archive under the same id."""
        outcome = await self._apply(account, Restore(memory_id), "restore")
        return Done(memory_id, outcome.synced)

    async def verify(self, account: Account, memory_id: str, action: str) -> Done:
        """Approve or reject a memory waiting for verification."""
        outcome = await self._apply(account, Verify(action, [memory_id]), f"verify-{action}")
        errors = outcome.result.get("errors") or []
        if errors and not outcome.result.get("results"):
            raise ActionRefused(f"{memory_id}: {errors[0].get('error')}")
        return Done(memory_id, outcome.synced)

    async def edit(self, account: Account, memory_id: str, *, title: str, content: str, type_: str,
                   tags: str) -> Done:
        """A new memory with the edited text that supersedes the old one; returns the new id.

        A pinned memory's pin moves to the new version in the same write (`Memorize.pins_follow`),
        as a review decision moves it: the old, superseded text is not served at session start."""
        await self._refuse_old_version(account, memory_id)
        return await self.create(account, title=title, content=content, type_=type_, tags=tags,
                                 supersedes=[memory_id])

    async def create(self, account: Account, *, title: str, content: str, type_: str, tags: str,
                     supersedes: list[str] | None = None) -> Done:
        """A new memory typed in the app (``brain_memorize``'s write), optionally superseding others."""
        if not content.strip():
            raise ActionRefused(Text("The content must not be empty."))
        _refuse_too_long(title, content)
        try:
            op = connector_memorize(
                content, title=title.strip() or None, type=type_, tags=tags, origin=EDIT_ORIGIN,
                supersedes=supersedes or [], agent="web app", source=WEB_APP_SOURCE,
                writer=await self.manager.writer(account),
            )
        except OverLimitError as exc:
            raise ActionRefused(limit_refusal(exc.over)) from None
        except BrainError as exc:
            raise ActionRefused(str(exc)) from None
        kinds = credentials_in_memories(op.memories)
        if kinds:
            raise ActionRefused(Text("%(refusal)s Leave the secret out (say where it is kept instead).",
                                     refusal=credential_refusal(kinds)))
        op = await self._review_flagged(account, op)
        outcome = await self._apply(account, op, "memorize")
        return Done(str(outcome.result["stored"][0]["id"]), outcome.synced)

    async def decide(self, account: Account, new: str, old: str, decision: str, *, title: str = "",
                     content: str = "", type_: str = "learning", tags: str = "") -> Done:
        """A decision about a pair of similar memories (see `connector.engine.tending.review.Decide`).

        ``merge`` writes ``content`` (the person's edit) as one memory superseding both.
        The Done names the memory to show next: the one kept, or the merged one.
        """
        if decision not in DECISIONS:
            raise ActionRefused(Text("The app offers no such decision."))
        merged = None
        if decision == "merge":
            if not content.strip():
                raise ActionRefused(Text("The merged text must not be empty."))
            _refuse_too_long(title, content)
        writer = await self.manager.writer(account)
        try:
            if decision == "merge":
                merged = connector_memory(content, title=title.strip() or None, type=type_, tags=tags,
                                          origin=EDIT_ORIGIN, agent="web app", source=WEB_APP_SOURCE, writer=writer)
            by = writer or "web app"
            op = Decide(new, old, decision, by=by, merged=merged)
        except OverLimitError as exc:
            raise ActionRefused(limit_refusal(exc.over)) from None
        except BrainError as exc:
            raise ActionRefused(str(exc)) from None
        outcome = await self._apply(account, op, f"review-{decision}")
        shown = outcome.result.get("merged_into") or (old if decision == "keep_old" else new)
        return Done(str(shown), outcome.synced)

    async def restore_snapshot(self, account: Account, name: str) -> None:
        """Make one of the store's snapshots of the brain ``account`` addresses live, then serve it
        here (the brain in use stays as it is)."""
        account = await self.manager.pinned(account)  # one brain from the check to the re-read
        snapshot = await self.manager.snapshot(account)
        if snapshot.brain_id is None:
            raise ActionRefused(Text("This account has no brain at the store yet."))
        if snapshot.pending_writes:
            # Held writes would be replayed on top of the snapshot; let them reach the store first.
            raise ActionRefused(Text("Some changes are not synced to the store yet; try again in a moment."))
        try:
            await self.manager.store.restore_version(account.credential, snapshot.brain_id, name)
            # Re-read at once; not brain_use, which would also make it the brain in use.
            await self.manager.pull_now(account)
        except StoreError as exc:
            raise ActionRefused(Text("The snapshot was not restored (%(reason)s).", reason=str(exc))) from None
        except (UnknownBrain, BrainUnavailable) as exc:
            raise ActionRefused(message_of(exc)) from None

    async def use_brain(self, account: Account, wanted: str) -> str:
        """Switch the active brain as brain_use does; returns its name."""
        try:
            record, _ = await self.manager.use_brain(account, wanted)
        except (UnknownBrain, BrainUnavailable) as exc:
            raise ActionRefused(message_of(exc)) from None
        except StoreError as exc:
            raise ActionRefused(Text("The store could not list the brains (%(reason)s).", reason=str(exc))) from None
        return record.name
