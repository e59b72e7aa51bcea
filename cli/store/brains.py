"""`brain-store brain list`, and finding a brain by its name or id for every command taking one.

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

from cli.store.target import existing_store, store_label
from cli.store.users import _data_option as data_option


@dataclass(frozen=True)
class BrainRow:
    """One brain as a user sees it: whose it is, and this user's role on it."""

    id: str
    name: str
    owner: str
    owner_id: str
    role: str
    size_bytes: int
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
            size_bytes=current.size if current else 0,
            last_change=(current.synced_at if current else "") or meta.created_at,
        )

    def of_user(self, user: Any) -> list[BrainRow]:
        """The brains ``user`` owns, then those shared with them (their role on each)."""
        rows = [self._row(meta, "owner") for meta in self.backend.list_brains(user.id)]
        for share in self.registry.shared_with(user.id) if self.registry is not None else []:
            meta = self.backend.read_meta(share.owner_id, share.brain_id)
            if meta is not None and meta.user_id == share.owner_id:
                rows.append(self._row(meta, share.members[user.id]))
        return rows

    def _shared_orphan(self, brain_id: str) -> BrainRow | None:
        """A shared brain whose creator was removed (its members keep it; the operator manages it)."""
        share = self.registry.share(brain_id) if self.registry is not None else None
        meta = self.backend.read_meta(share.owner_id, brain_id) if share is not None else None
        return self._row(meta, "owner") if meta is not None and meta.user_id == share.owner_id else None

    def every(self) -> list[BrainRow]:
        """Every brain of the store once, with its owner."""
        return [self._row(meta, "owner") for user in self.users.users() for meta in self.backend.list_brains(user.id)]

    def find(self, given: str, user: Any | None = None) -> BrainRow:
        """The brain ``given`` names (id, else exact name, else name ignoring case) among
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
        named = [row for row in rows if row.name == text] or [row for row in rows if row.name.lower() == text.lower()]
        unique = {row.id: row for row in named}
        whose = f" of {user.name}" if user is not None else ""
        if not unique:
            raise click.ClickException(f"no brain {given!r}{whose} (`brain-store brain list` shows ids and names)")
        if len(unique) > 1:
            listed = "; ".join(f"{row.id} (owner {row.owner or row.owner_id})" for row in unique.values())
            hint = "give its id" + ("" if user is not None else ", or --user NAME to say whose")
            raise click.ClickException(f"the brain name {given!r}{whose} is ambiguous: {listed}. {hint}")
        return next(iter(unique.values()))


def open_directory(settings: Any) -> BrainDirectory:
    """The brain directory of an existing store."""
    from store.context import open_registry, open_sharing
    from store.storage.factory import open_backend

    users = open_registry(settings)
    backend = open_backend(settings)
    return BrainDirectory(users, backend, open_sharing(settings, users, backend).registry)


@click.group()
def brain() -> None:
    """Brains of the store: list them with their ids."""


@brain.command("list")
@click.option("--user", "who", default=None, help="Only the brains this user (name, e-mail or id) owns or shares.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@data_option
def list_brains(who: str | None, as_json: bool, data: Path | None) -> None:
    """List brains: id, name, owner, role, size and last change (the id is what other commands take,
    though a brain's name works too)."""
    settings = existing_store(data)
    directory = open_directory(settings)
    if who is not None:
        user = directory.users.find(who) or next((u for u in directory.users.users() if u.email == who), None)
        if user is None:
            raise click.ClickException(f"no user {who!r}")
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
    click.echo(f"{'ID':36}  {'NAME':20}  {'OWNER':20}  {'ROLE':6}  {'SIZE':>10}  LAST CHANGE")
    for row in rows:
        click.echo(f"{row.id:36}  {row.name:20}  {row.owner:20}  {row.role:6}  {row.size_bytes:>10}  {row.last_change}")
