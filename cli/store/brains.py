"""`brain-store brain list|create|rename|delete|undelete|purge`, and finding a brain by its name
or id for every command taking one.

A brain is named by its id (a UUID) or by its name; ``--user NAME`` says whose brains
to look among (the brains the user owns or shares). A name several brains share is
refused, naming each candidate with its id and owner, so that nothing is done to the
wrong brain.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from cli.store.target import cell, data_option, existing_store, store_label
from cli.store.users import members_listed, readable_users, refuse_damaged, removed_users_brains, user_named
from common.brainnames import brain_name_key
from store.storage.base import SAFE_ID, DamagedBrain, usable_meta


@dataclass(frozen=True)
class BrainRow:
    """One brain as a user sees it: whose it is, and this user's role on it."""

    id: str
    name: str
    owner: str
    owner_id: str
    role: str
    size_bytes: int  # the current archive
    stored_bytes: int  # every distinct archive the brain keeps: current and snapshots
    last_change: str


class BrainDirectory:
    """The brains of one store (data directory or bucket), by user, with their roles."""

    def __init__(self, users: Any, backend: Any, registry: Any | None) -> None:
        self.users, self.backend, self.registry = users, backend, registry

    def _row(self, meta: Any, role: str) -> BrainRow:
        owner = self.users.get(meta.user_id)
        current = meta.current
        return BrainRow(
            id=meta.id, name=meta.name, owner=owner.name if owner else "", owner_id=meta.user_id, role=role,
            size_bytes=current.size if current else 0, stored_bytes=meta.stored_bytes(),
            last_change=(current.synced_at if current else "") or meta.created_at,
        )

    def of_user(self, user: Any) -> list[BrainRow]:
        """The brains ``user`` owns, then those shared with them (their role on each); a brain whose
        metadata is damaged is left out (``refuse_damaged_brain`` names it when asked for by id)."""
        rows = [self._row(meta, "owner") for meta in self.backend.list_brains(user.id) if not meta.deleted_at]
        for share in self.registry.shared_with(user.id) if self.registry is not None else []:
            meta = usable_meta(self.backend, share.owner_id, share.brain_id)
            if meta is not None and meta.user_id == share.owner_id and not meta.deleted_at:
                rows.append(self._row(meta, share.members[user.id]))
        return rows

    def _shared_orphan(self, brain_id: str) -> BrainRow | None:
        """A shared brain whose creator was removed (its members keep it; the operator manages it)."""
        share = self.registry.share(brain_id) if self.registry is not None else None
        meta = usable_meta(self.backend, share.owner_id, brain_id) if share is not None else None
        return (self._row(meta, "owner") if meta is not None and meta.user_id == share.owner_id
                and not meta.deleted_at else None)

    def every(self) -> list[BrainRow]:
        """Every brain of the store once, with its owner."""
        return [self._row(meta, "owner") for user in self.users.users() for meta in self.backend.list_brains(user.id)
                if not meta.deleted_at]

    def deleted(self) -> list[tuple[BrainRow, str, int]]:
        """Brains their owners deleted that the store still keeps: (row, deleted at, snapshots)."""
        return [(self._row(meta, "owner"), meta.deleted_at, len(meta.snapshots)) for user in self.users.users()
                for meta in self.backend.list_brains(user.id) if meta.deleted_at]

    def deleted_brain(self, given: str) -> BrainRow | None:
        """The deleted brain kept until purged that ``given`` is the id of: a current user's, else a
        removed user's (it was deleted before they were removed, or a member deleted it since), else None."""
        brain_id = given.strip().lower()
        found = [row for row, _, _ in self.deleted() if row.id == brain_id]
        if found:
            return found[0]
        for kept in removed_users_brains(self.users, self.backend).values():
            for meta in kept.brains:
                if meta.id == brain_id and meta.deleted_at:
                    return self._row(meta, "owner")
        return None

    def damaged_brain(self, given: str) -> DamagedBrain | None:
        """The brain whose metadata is damaged that ``given`` is the id of (any owner's), else None."""
        brain_id = given.strip().lower()
        if not SAFE_ID.match(brain_id):
            return None
        for user_id in self.backend.iter_users():
            for damaged in self.backend.survey_brains(user_id)[1]:
                if damaged.brain_id == brain_id:
                    return damaged
        return None

    def refuse_damaged_brain(self, given: str) -> None:
        """Refuse, naming the damage, when ``given`` is the id of a brain whose metadata is damaged:
        such a brain is in no listing, and "no brain" would send the operator looking elsewhere."""
        damaged = self.damaged_brain(given)
        if damaged is not None:
            raise click.ClickException(
                f"brain {damaged.describe()} cannot be used until its metadata is repaired (put back from "
                f"a backup, or by hand); `brain-store brain purge {damaged.brain_id} --damaged` removes it for good")

    def find(self, given: str, user: Any | None = None) -> BrainRow:
        """The brain ``given`` names (id, else name as `brain_name_key` compares it, else ignoring case) among
        ``user``'s brains (all brains without one); ``click.ClickException`` when none or several."""
        text = given.strip()
        # An id names one brain whoever's it is (the caller checks any role it needs).
        every = self.every()
        by_id = [row for row in every if row.id == text.lower()]
        if by_id:
            return by_id[0]
        orphan = self._shared_orphan(text.lower())
        if orphan is not None:
            return orphan
        rows = self.of_user(user) if user is not None else every
        exact, folded = brain_name_key(text), brain_name_key(text, ignore_case=True)
        named = [row for row in rows if brain_name_key(row.name) == exact] or \
            [row for row in rows if brain_name_key(row.name, ignore_case=True) == folded]
        unique = {row.id: row for row in named}
        whose = f" of {user.name}" if user is not None else ""
        if not unique:
            self.refuse_damaged_brain(text)
            raise click.ClickException(f"no brain {given!r}{whose} (`brain-store brain list` shows ids and names)")
        if len(unique) > 1:
            raise click.ClickException(_ambiguous(given, whose, list(unique.values()), user is None))
        return next(iter(unique.values()))


def _owner_of(row: BrainRow) -> str:
    """Whose ``row`` is, in words: its owner's name, or "removed user ID" for a brain kept for one."""
    return row.owner or f"removed user {row.owner_id}"


def _ambiguous(given: str, whose: str, rows: list[BrainRow], any_user: bool) -> str:
    """Why a name several brains answer to is refused: each brain with what tells it from the others
    (its owner, last change and archive size, as `brain list` shows them), and what to give instead."""
    listed = "; ".join(f"{row.id} (owner {row.owner or row.owner_id}, last change {row.last_change}, "
                       f"{row.size_bytes} bytes)" for row in rows)
    # --user narrows to one user's brains: it tells them apart only when no owner has two of them.
    owners = [row.owner_id for row in rows]
    whose_helps = any_user and len(set(owners)) == len(owners)
    hint = "give its id in place of the name" + (", or --user NAME to say whose" if whose_helps else "")
    return f"the brain name {given!r}{whose} is ambiguous: {listed}. {hint}"


def _note_shared_name(directory: BrainDirectory, owner_id: str, brain_id: str, name: str) -> None:
    """Say (on stderr, after the change) when the owner has another brain of this name: allowed, as
    the store's contract allows it, but commands naming either by name will then ask for its id."""
    others = [row for row in directory.every() if row.owner_id == owner_id and row.id != brain_id
              and brain_name_key(row.name) == brain_name_key(name)]
    if others:
        owner = others[0].owner or owner_id
        click.echo(f"note: {owner} has another brain named {name!r} ({', '.join(row.id for row in others)}); "
                   "commands will need the id to tell them apart", err=True)


def open_directory(settings: Any) -> BrainDirectory:
    """The brain directory of an existing store."""
    from store.context import open_registry, open_sharing
    from store.storage.factory import open_backend

    users = readable_users(open_registry(settings))
    backend = open_backend(settings)
    return BrainDirectory(users, backend, open_sharing(settings, users, backend).registry)


@click.group()
def brain() -> None:
    """Brains of the store: list, create, rename, delete (keeping the data), undelete, purge."""


@brain.command("list")
@click.option("--user", "who", default=None, help="Only the brains this user (name, e-mail or id) owns or shares.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@data_option
def list_brains(who: str | None, as_json: bool, data: Path | None) -> None:
    """List brains: id, name, owner, role, bytes and last change (the id is what other commands
    take, though a brain's name works too).

    ARCHIVE is the size of the brain's current archive (what a client downloads); WITH SNAPSHOTS
    adds the earlier versions the store keeps for restore: the brain's stored bytes, which
    `brain-store user list` sums per user and the quota counts.
    """
    settings = existing_store(data)
    directory = open_directory(settings)
    if who is not None:
        user = user_named(directory.users, who)
        rows = directory.of_user(user)
    else:
        rows = directory.every()
    if as_json:
        click.echo(json.dumps([asdict(row) for row in rows], indent=2))
        return
    click.echo(f"brains of {store_label(settings)}:")
    if not rows:
        click.echo("no brains")
        return
    click.echo(f"{'ID':36}  {'NAME':20}  {'OWNER':20}  {'ROLE':6}  {'ARCHIVE':>10}  {'WITH SNAPSHOTS':>14}  LAST CHANGE")
    for row in rows:
        click.echo(f"{row.id:36}  {cell(row.name, 20)}  {cell(row.owner, 20)}  {row.role:6}  {row.size_bytes:>10}  {row.stored_bytes:>14}  {row.last_change}")
    kept = [item for item in directory.deleted() if who is None or item[0].owner_id == user.id]
    if kept:
        click.echo("deleted, kept with their snapshots until purged (`brain-store brain undelete|purge ID`): "
                   + ", ".join(f"{row.name} ({row.id}, {row.owner}, deleted {when})" for row, when, _ in kept))


# -- changing brains (operator commands; a running store sees the change at once) ----------------


def _service(settings: Any) -> Any:
    from store.service import BrainService
    from store.storage.factory import open_backend

    return BrainService(settings, open_backend(settings))


def _run(action: Any, *args: Any) -> Any:
    """A service call whose refusal (ServiceError) becomes a clean CLI error."""
    from store.errors import ServiceError

    try:
        return action(*args)
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None


def _owned(directory: BrainDirectory, given: str, who: str | None) -> BrainRow:
    """The brain ``given`` names (among ``who``'s when given), which its owner changes."""
    return directory.find(given, user_named(directory.users, who) if who else None)


_whose_option = click.option("--user", "who", default=None,
                             help="Whose brain (name, e-mail or id), when brains of several users share the "
                                  "name (two of one user's: give BRAIN's id).")


@brain.command("create")
@click.argument("name")
@click.option("--user", "who", required=True, help="The user (name, e-mail or id) who owns the new brain.")
@data_option
def create_brain(name: str, who: str, data: Path | None) -> None:
    """Create a brain NAME for a user; prints its id (last line)."""
    settings = existing_store(data)
    directory = open_directory(settings)
    user = user_named(directory.users, who)
    meta = _run(_service(settings).create, user.id, name)
    _note_shared_name(directory, user.id, meta.id, meta.name)
    click.echo(f"created brain {meta.name} for {user.name} in {store_label(settings)}; its id:")
    click.echo(meta.id)


@brain.command("rename")
@click.argument("brain_id", metavar="BRAIN")
@click.argument("new_name")
@_whose_option
@data_option
def rename_brain(brain_id: str, new_name: str, who: str | None, data: Path | None) -> None:
    """Give BRAIN (id or name) the name NEW_NAME; its id, memories and snapshots stay."""
    settings = existing_store(data)
    directory = open_directory(settings)
    row = _owned(directory, brain_id, who)
    meta = _run(_service(settings).rename, row.owner_id, row.id, new_name)
    click.echo(f"renamed brain {row.name} ({row.id}) of {_owner_of(row)} to {meta.name}")
    _note_shared_name(directory, row.owner_id, row.id, meta.name)


@brain.command("delete")
@click.argument("brain_id", metavar="BRAIN")
@_whose_option
@click.option("--yes", is_flag=True, help="Do not ask (for scripts).")
@data_option
def delete_brain(brain_id: str, who: str | None, yes: bool, data: Path | None) -> None:
    """Delete BRAIN for every client (assistants, the web app, `brain`), keeping its archive and
    snapshots in the store: `brain-store brain undelete ID` brings it back, `purge` removes it."""
    settings = existing_store(data)
    directory = open_directory(settings)
    row = _owned(directory, brain_id, who)
    if not yes:
        if not click.get_text_stream("stdin").isatty():
            raise click.ClickException("this would delete a brain: run it in a terminal to confirm, or add --yes")
        click.confirm(f"Delete brain {row.name} ({row.id}) of {_owner_of(row)}? Assistants and the web app lose it; "
                      "the store keeps its archive and snapshots until purged", abort=True)
    _run(_service(settings).trash, row.owner_id, row.id)
    click.echo(f"deleted brain {row.name} ({row.id}) of {_owner_of(row)}; the store keeps its data: "
               f"`brain-store brain undelete {row.id}` brings it back, `brain-store brain purge {row.id}` removes it")


def _deleted_row(directory: BrainDirectory, brain_id: str) -> BrainRow:
    """The deleted brain ``brain_id`` names, any user's (``BrainDirectory.deleted_brain``); else a
    ``click.ClickException``, naming the damage of a brain whose metadata is damaged."""
    found = directory.deleted_brain(brain_id)
    if found is None:
        directory.refuse_damaged_brain(brain_id)
        raise click.ClickException(f"no deleted brain {brain_id!r} (`brain-store brain list` lists the deleted ones, "
                                   "`brain-store user orphans` those of removed users)")
    return found


@brain.command("undelete")
@click.argument("brain_id", metavar="ID")
@data_option
def undelete_brain(brain_id: str, data: Path | None) -> None:
    """Bring back a deleted brain (by id; a removed user's too, which `user orphans` lists) as it
    was, with its snapshots and members."""
    settings = existing_store(data)
    row = _deleted_row(open_directory(settings), brain_id)
    _run(_service(settings).undelete, row.owner_id, row.id)
    click.echo(f"brought back brain {row.name} ({row.id}) of {_owner_of(row)}"
               + ("" if row.owner else ": `brain-store user orphans` lists it with their other brains"))


@brain.command("purge")
@click.argument("brain_id", metavar="ID")
@click.option("--damaged", is_flag=True,
              help="ID is a brain whose metadata is damaged (it cannot be deleted first): remove it as it is, "
                   "with its archives, members and audit log (a removed user's last brain: what is left of "
                   "them too, as user purge does).")
@click.option("--yes", is_flag=True, help="Do not ask (for scripts).")
@data_option
def purge_brain(brain_id: str, damaged: bool, yes: bool, data: Path | None) -> None:
    """Remove a deleted brain (by id; a removed user's too, their last one taking what is left of them
    along) with its archive, snapshots and members, for good; with --damaged, a brain
    whose metadata is damaged (which cannot be deleted first), with its archives, members and audit log."""
    settings = existing_store(data)
    directory = open_directory(settings)
    if damaged:
        _purge_damaged(settings, directory, brain_id, yes)
        return
    row = _deleted_row(directory, brain_id)
    # its members go too: a damaged sharing file would refuse that after the brain was gone
    refuse_damaged(directory.registry, "brain purge")
    _confirm(yes, f"Remove deleted brain {row.name} ({row.id}) of {_owner_of(row)} and its snapshots for good?")
    _run(_service(settings).purge, row.owner_id, row.id)
    _sharing(settings, directory).forget(row.id)
    click.echo(f"purged brain {row.name} ({row.id}) of {_owner_of(row)}")
    if not row.owner:
        _last_of_removed_user(directory, row.owner_id)


def _confirm(yes: bool, question: str) -> None:
    """Ask ``question`` in a terminal unless ``yes``; refuse, changing nothing, without one."""
    if yes:
        return
    if not click.get_text_stream("stdin").isatty():
        raise click.ClickException("this removes a brain for good: run it in a terminal to confirm, or add --yes")
    click.confirm(question, abort=True)


def _sharing(settings: Any, directory: BrainDirectory) -> Any:
    """Members and audit logs of the store's brains (``store.sharing.access.Sharing``)."""
    from store.context import open_sharing

    return open_sharing(settings, directory.users, directory.backend)


def _purge_damaged(settings: Any, directory: BrainDirectory, given: str, yes: bool) -> None:
    """`brain purge ID --damaged`: remove the brain whose metadata is damaged that ``given`` names,
    naming what went; a brain that can be read is refused (it is deleted, then purged, as usual)."""
    found = directory.damaged_brain(given)
    if found is None:
        raise click.ClickException(_not_damaged(directory, given))
    refuse_damaged(directory.registry, "brain purge")  # its members go too, as in a purge
    owner = directory.users.get(found.user_id)
    whose = owner.name if owner is not None else f"removed user {found.user_id}"
    _confirm(yes, f"Remove brain {found.describe()} of {whose} with its archives, members and audit log "
                  "for good? Repaired from a backup it would be usable again")
    # asked and answered: a brain repaired meanwhile is one to keep, removed only the usual way
    if directory.damaged_brain(found.brain_id) is None:
        raise click.ClickException(f"brain {found.user_id}/{found.brain_id} can be read again (repaired "
                                   "meanwhile?); nothing was removed")
    sharing = _sharing(settings, directory)
    removed = _what_goes(directory, sharing, found)
    directory.backend.delete_brain(found.user_id, found.brain_id)
    sharing.forget(found.brain_id)
    click.echo(f"purged brain {found.describe()} of {whose}: {removed}")
    if owner is None:
        _last_of_removed_user(directory, found.user_id)


def _last_of_removed_user(directory: BrainDirectory, former_id: str) -> None:
    """After a purge of removed user ``former_id``'s brain: when it was their last, what is left of
    them (an empty directory, an account object) no command lists goes, as with `user purge`."""
    if directory.users.get(former_id) is None and directory.backend.delete_empty_user(former_id):
        click.echo(f"it was the last brain of removed user {former_id}: nothing of theirs is kept any more")


def _not_damaged(directory: BrainDirectory, given: str) -> str:
    """Why ``brain purge ID --damaged`` refuses an id no brain with damaged metadata has."""
    brain_id = given.strip().lower()
    deleted = directory.deleted_brain(brain_id)  # a current or a removed user's
    if deleted is not None:
        return (f"brain {deleted.name} ({deleted.id}) of {_owner_of(deleted)} has no damaged metadata, so --damaged "
                f"does not remove it: it is deleted already, `brain-store brain purge {deleted.id}` removes it; "
                "nothing was removed")
    live = [row for row in directory.every() if row.id == brain_id]
    if live:
        row = live[0]
        return (f"brain {row.name} ({row.id}) of {row.owner} has no damaged metadata, so --damaged "
                f"does not remove it: `brain-store brain delete {row.id}` then `brain-store brain purge {row.id}` "
                "does; nothing was removed")
    return _removed_users_brain(directory, brain_id) or \
        f"no brain with damaged metadata has the id {given!r} (`brain-store brain list` shows the others)"


def _removed_users_brain(directory: BrainDirectory, brain_id: str) -> str:
    """Why ``brain purge ID --damaged`` refuses a readable brain of a removed user, and what removes it
    (no brain command takes it: only `user purge`, with the user's other brains); "" for no such brain."""
    for former_id, kept in removed_users_brains(directory.users, directory.backend).items():
        for meta in kept.brains:
            if meta.id == brain_id:
                others = kept.count() - 1
                along = (f", with that user's {others} other brain(s) (`brain-store user orphans` lists them)"
                         if others else " (it is that user's only brain)")
                return (f"brain {meta.name} ({meta.id}) of removed user {former_id} has no damaged metadata, so "
                        f"--damaged does not remove it: `brain-store user purge {former_id}` does{along}; "
                        "nothing was removed")
    return ""


def _what_goes(directory: BrainDirectory, sharing: Any, found: DamagedBrain) -> str:
    """What removing the damaged brain ``found`` takes with it, in words: its archives' bytes (as the
    quota counted them), its members and its audit log."""
    stored = directory.backend.damaged_bytes(found.user_id, [found])[found.brain_id]
    members = members_listed(sharing, found.brain_id, found.user_id)
    logged = sharing.audit is not None and bool(sharing.audit.events(found.brain_id, 1))
    return (f"its archives ({stored} bytes), " + (f"its members {members}" if members else "no members")
            + (" and its audit log" if logged else " and no audit log"))
