"""The web app's brains page: every brain a person can reach (their own and those shared
with them), which one is in use, and creating, renaming and deleting their own.

Switching is ``brain_use`` (the manager's shared choice, by brain id), so the web app and
the MCP tools of the same sign-in always work on the same brain. Creating, renaming and
deleting go to the store (``POST /api/brains``, and this store's extensions ``PATCH
/api/brains/{id}`` and ``POST /api/brains/{id}/trash``: a deleted brain is gone for every
client while the store keeps its archive and snapshots); the brain list is read again at
once afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.brainnames import checked_brain_name
from connector.i18n import N_, Text
from connector.identity.agentkey import looks_like_agent_key
from connector.webapp.actions import ActionRefused
from connector.workcopy.manager import BrainUnavailable, WorkingCopyManager
from connector.workcopy.model import Account
from connector.workcopy.store_client import BrainRecord, StoreError, StoreForbidden, StoreNotFound, StoreUnauthorized

ROLE_LABELS = {"owner": N_("owner"), "editor": N_("editor"), "viewer": N_("viewer (read-only)")}
NAME_RULE = N_("A brain's name is 1 to 100 characters, without slashes, backslashes or control characters.")


@dataclass(frozen=True)
class BrainEntry:
    """One brain as the brains page shows it."""

    id: str
    name: str
    active: bool
    role: str  # owner, editor or viewer (owner when the store does not share)
    owner: str | None  # the creator's name, for a brain shared with the person
    last_synced_at: str | None
    size_bytes: int

    @property
    def role_label(self) -> str:
        """The role in words (translated where shown)."""
        return ROLE_LABELS.get(self.role, self.role)

    @property
    def own(self) -> bool:
        """The person may rename and delete it (they are an owner)."""
        return self.role == "owner"


def checked_name(name: str) -> str:
    """A new brain name as the store keeps it (`checked_brain_name`), or ActionRefused saying the rule."""
    checked = checked_brain_name(name)
    if checked is None:
        raise ActionRefused(NAME_RULE)
    return checked


class BrainAdmin:
    """Lists, creates, renames and deletes brains for one signed-in account at a time."""

    def __init__(self, manager: WorkingCopyManager) -> None:
        self.manager = manager

    async def listing(self, account: Account) -> list[BrainEntry]:
        """The account's brains (listed afresh), oldest first, the one in use marked."""
        try:
            records, active = await self.manager.brains(account)
        except StoreUnauthorized:
            raise  # the sign-in ended: the route sends the person to sign in again
        except StoreError as exc:
            raise BrainUnavailable(Text("The store could not list the brains (%(reason)s).", reason=str(exc))) from None
        return [self._entry(record, active) for record in records]

    @staticmethod
    def _entry(record: BrainRecord, active: BrainRecord | None) -> BrainEntry:
        role = record.role or "owner"
        return BrainEntry(record.id, record.name, active is not None and record.id == active.id, role,
                          record.owner if role != "owner" else None, record.last_synced_at, record.size_bytes)

    async def find(self, account: Account, brain_id: str) -> BrainEntry | None:
        """One of the account's brains by id, or None."""
        return next((entry for entry in await self.listing(account) if entry.id == brain_id.lower()), None)

    async def create(self, account: Account, name: str) -> BrainRecord:
        """A new, empty brain of the account named ``name``."""
        name = checked_name(name)
        try:
            record = await self.manager.store.create_brain(account.credential, name)
        except StoreForbidden:
            if looks_like_agent_key(account.credential):
                # The store refuses every agent key this (403), whatever the account's count.
                raise ActionRefused(Text("An agent key cannot create brains. Sign in with your store token "
                                         "to create one.")) from None
            raise ActionRefused(Text("Your account already has as many brains as the store allows.")) from None
        except StoreUnauthorized:
            raise
        except StoreError as exc:
            raise ActionRefused(Text("The store could not create the brain (%(reason)s).", reason=str(exc))) from None
        await self.listing(account)  # the manager lists again: MCP sees the new brain at once
        return record

    async def _owned(self, account: Account, brain_id: str) -> BrainEntry:
        entry = await self.find(account, brain_id)
        if entry is None:
            raise ActionRefused(Text("This account has no such brain."))
        if not entry.own:
            raise ActionRefused(Text("Only an owner of the brain '%(name)s' can rename or delete it.", name=entry.name))
        return entry

    async def rename(self, account: Account, brain_id: str, name: str) -> BrainRecord:
        """The brain under its new name (owners)."""
        name = checked_name(name)
        await self._owned(account, brain_id)
        try:
            record = await self.manager.store.rename_brain(account.credential, brain_id, name)
        except StoreUnauthorized:
            raise
        except StoreError as exc:
            raise ActionRefused(self._refusal(exc)) from None
        await self.listing(account)
        return record

    async def delete(self, account: Account, brain_id: str) -> str:
        """Delete a brain (owners), the store keeping its data; its name."""
        entry = await self._owned(account, brain_id)
        try:
            await self.manager.store.trash_brain(account.credential, entry.id)
        except StoreUnauthorized:
            raise
        except StoreError as exc:
            raise ActionRefused(self._refusal(exc)) from None
        await self.listing(account)
        return entry.name

    @staticmethod
    def _refusal(exc: StoreError) -> Text:
        if isinstance(exc, StoreNotFound) or exc.status in (404, 405):
            # A store without this project's extensions answers 404/405 to them.
            return Text("This store cannot rename or delete brains (it lacks this project's extensions).")
        return Text("The store refused (%(reason)s); nothing was changed.", reason=str(exc))
