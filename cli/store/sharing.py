"""`brain-store share|unshare|key|audit`: members of shared brains and agent keys (applies at once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cli.store.target import cell, data_option, existing_store
from cli.store.users import readable_users, user_named

_brain_arg = click.argument("brain_id", metavar="BRAIN")
_owner_option = click.option("--user", "owner", default=None,
                             help="Whose brain BRAIN names (user name, e-mail or id), when brains of several users "
                                  "share the name (two of one user's: give BRAIN's id).")


class _Store:
    """The users registry, storage and sharing registry of one data directory."""

    def __init__(self, data: Path | None) -> None:
        from store.context import open_registry, open_sharing
        from store.storage.factory import open_backend

        settings = existing_store(data)  # a mistyped --data is an error, not a new empty store
        self.users = readable_users(open_registry(settings))
        self.backend = open_backend(settings)
        self.sharing = open_sharing(settings, self.users, self.backend)
        try:
            self.registry = self.sharing.require()
        except Exception as exc:
            raise click.ClickException(str(exc)) from None

    def user(self, who: str) -> Any:
        """A user by name, e-mail or id (an e-mail address several users have is refused, naming them)."""
        return user_named(self.users, who)

    def creator(self, given: str, owner: str | None = None) -> tuple[str, str]:
        """``(brain id, id of the user who created and stores it)`` for a brain named by its id or
        its name (among ``owner``'s brains when given; an ambiguous name is refused)."""
        from cli.store.brains import BrainDirectory

        directory = BrainDirectory(self.users, self.backend, self.registry)
        found = directory.find(given, self.user(owner) if owner else None)
        return found.id, found.owner_id

    def may_key(self, user_id: str, brain_id: str) -> bool:
        """True when ``user_id`` has a role on ``brain_id`` (what an agent key of theirs needs)."""
        share = self.registry.share(brain_id)
        if share is not None and user_id in share.members:
            return True
        meta = self.backend.read_meta(user_id, brain_id)
        return meta is not None and meta.user_id == user_id


def _operator(store: _Store, brain_id: str, action: str, **details: Any) -> None:
    """Audit an operator's change (actor ``operator``)."""
    if store.sharing.audit is not None:
        store.sharing.audit.record(brain_id, "operator", "operator (CLI)", action, **details)


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@click.command()
@_brain_arg
@click.option("--with", "who", required=True,
              help="User name, e-mail or id (an e-mail address several users have is refused: name them).")
@click.option("--role", type=click.Choice(["viewer", "editor", "owner"]), required=True)
@_owner_option
@data_option
def share(brain_id: str, who: str, role: str, owner: str | None, data: Path | None) -> None:
    """Share BRAIN (its id or name) with a user, or change their role."""
    from store.sharing.registry import SharingError

    store = _Store(data)
    (brain_id, creator), user = store.creator(brain_id, owner), store.user(who)
    try:
        store.registry.set_member(brain_id, creator, user.id, role)
    except SharingError as exc:
        raise _fail(exc) from None
    _operator(store, brain_id, "member_set", member=user.id, member_name=user.name, role=role)
    click.echo(f"{user.name} is now {role} of brain {brain_id}")


@click.command()
@_brain_arg
@click.option("--with", "who", required=True,
              help="User name, e-mail or id (an e-mail address several users have is refused: name them).")
@_owner_option
@data_option
def unshare(brain_id: str, who: str, owner: str | None, data: Path | None) -> None:
    """Take a user off a shared brain, BRAIN its id or name (their access, and their agent keys'
    access, end at once)."""
    from store.sharing.registry import SharingError

    store = _Store(data)
    brain_id, _ = store.creator(brain_id, owner)
    user = store.user(who)
    try:
        role = store.registry.remove_member(brain_id, user.id)
    except SharingError as exc:
        raise _fail(exc) from None
    _operator(store, brain_id, "member_removed", member=user.id, member_name=user.name, role=role)
    click.echo(f"{user.name} ({role}) no longer shares brain {brain_id}")


@click.group()
def key() -> None:
    """Agent keys: tokens for some brains of one user, read or read+write."""


@key.command("create")
@click.option("--user", "who", required=True, help="User name, e-mail or id.")
@click.option("--brain", "brains", multiple=True, required=True,
              help="Brain id, or name among the user's brains (repeat for several).")
@click.option("--scope", type=click.Choice(["read", "write"]), required=True)
@click.option("--expires", default="", help="Lifetime such as 30d, 12h or 90m (default: none).")
@click.option("--label", default="", help="A name to recognise the key by.")
@data_option
def key_create(who: str, brains: tuple[str, ...], scope: str, expires: str, label: str, data: Path | None) -> None:
    """Create an agent key; prints it once, on the last line."""
    from store.sharing.registry import SharingError, expiry

    store = _Store(data)
    user = store.user(who)
    ids = []
    for given in brains:
        brain_id, _ = store.creator(given, user.id)
        if not store.may_key(user.id, brain_id):
            raise click.ClickException(f"{user.name} has no role on brain {brain_id}")
        ids.append(brain_id)
    try:
        record, token = store.registry.create_key(
            user.id, ids, scope, label=label, expires_at=expiry(expires) if expires else ""
        )
    except SharingError as exc:
        raise _fail(exc) from None
    for brain_id in record.brains:
        _operator(store, brain_id, "key_created", key=record.prefix, member=user.id, scope=scope, label=label)
    click.echo(f"created agent key {record.prefix}… for {user.name} ({scope}, "
               f"expires {record.expires_at or 'never'})")
    click.echo("key (shown once, keep it secret):", err=True)
    click.echo(token)


@key.command("list")
@click.option("--user", "who", default=None, help="Only this user's keys.")
@data_option
def key_list(who: str | None, data: Path | None) -> None:
    """List agent keys: prefix, user, scope, brains, expiry, label."""
    store = _Store(data)
    keys = store.registry.keys(store.user(who).id if who else None)
    if not keys:
        click.echo("no agent keys")
        return
    click.echo(f"{'PREFIX':12}  {'USER':20}  {'SCOPE':5}  {'EXPIRES':27}  {'LABEL':20}  BRAINS")
    for k in keys:
        name = store.sharing.user_name(k.user_id) or k.user_id
        click.echo(f"{k.prefix:12}  {cell(name, 20)}  {k.scope:5}  {k.expires_at or 'never':27}  {cell(k.label, 20)}  "
                   f"{','.join(k.brains)}")


@key.command("revoke")
@click.argument("prefix")
@data_option
def key_revoke(prefix: str, data: Path | None) -> None:
    """Revoke an agent key by the prefix `key list` shows; it stops working at once."""
    from store.sharing.registry import SharingError

    store = _Store(data)
    try:
        record = store.registry.revoke_key(prefix)
    except SharingError as exc:
        raise _fail(exc) from None
    for brain_id in record.brains:
        _operator(store, brain_id, "key_revoked", key=record.prefix, member=record.user_id)
    click.echo(f"revoked agent key {record.prefix}")


@click.command()
@_brain_arg
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 1000))
@_owner_option
@data_option
def audit(brain_id: str, limit: int, owner: str | None, data: Path | None) -> None:
    """Show the sharing audit log of BRAIN (its id or name): uploads, restores, members, keys, oldest first,
    one JSON object a line (a brain without events: one line on stderr saying so)."""
    import json

    store = _Store(data)
    brain_id, _ = store.creator(brain_id, owner)
    if store.sharing.audit is None:
        raise click.ClickException("this store keeps no sharing audit log")
    events = store.sharing.audit.events(brain_id, limit)
    if not events:
        # on stderr: stdout stays JSON lines only, for scripts
        click.echo(f"no events in the audit log of brain {brain_id} (it records member and key changes, "
                   "and uploads and restores of shared brains)", err=True)
    for event in events:
        click.echo(json.dumps(event, sort_keys=True))
