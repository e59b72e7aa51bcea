"""`brain-store user ...`: manage accounts (applies to a running store at once).

Every command says which store it acts on (the data directory or bucket) and, except
``add``, refuses a data directory that does not exist instead of creating an empty one.
Brains of removed users stay until purged: ``orphans`` lists them, ``purge`` deletes
them, ``adopt`` gives them to a new user.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import click

from cli.store.runner import settings_from_cli
from cli.store.target import cell, data_option, existing_store, note_running_dev, store_label

if TYPE_CHECKING:
    from store.auth.users import User
    from store.service import BrainService
    from store.settings import StoreSettings
    from store.storage.base import BrainMeta, DamagedBrain


def user_named(users: Any, who: str) -> Any:
    """The user ``who`` names (name, e-mail or id: ``UserRegistry.lookup``), else a
    ``click.ClickException``: none has it, or several users have that e-mail address (naming them)."""
    from store.auth.users import AmbiguousEmail

    try:
        user = users.lookup(who)
    except AmbiguousEmail as exc:
        raise click.ClickException(str(exc)) from None
    if user is None:
        raise no_user(who)
    return user


def no_user(who: str) -> click.ClickException:
    """The error for a user name or id nobody has, saying where the users are listed."""
    return click.ClickException(f"no user {who!r} (`brain-store user list` shows them)")


def readable_users(registry: Any) -> Any:
    """``registry`` when its users can be read, else a ``click.ClickException`` naming the file: with
    neither it nor its last good copy readable it reads as no users at all (`user list` printed "no
    users", `brain list` "no brains", `user orphans` would take every user for a removed one)."""
    if (problem := registry.unreadable()) is not None:
        raise click.ClickException(f"{problem}; restore it (or its last good copy) first")
    return registry


def _open(settings: StoreSettings):  # type: ignore[no-untyped-def]
    from store.service import BrainService
    from store.context import open_registry
    from store.storage.factory import open_backend

    return open_registry(settings), BrainService(settings, open_backend(settings))


def _forget_access(sharing: Any, user_id: str, user_name: str, command: str) -> None:
    """Delete a removed user's agent keys and memberships in others' brains, so a later
    ``adopt`` of their id hands over their own brains only; each goes in the brain's audit log
    (actor ``operator (user COMMAND)``), as `unshare` and `key revoke` note theirs."""
    sharing.forget_user(user_id, user_name, f"operator (user {command})")


def _sharing(settings: StoreSettings, registry: Any, service: BrainService) -> Any:
    """Members and agent keys of the store (``store.sharing.access.Sharing``)."""
    from store.context import open_sharing

    return open_sharing(settings, registry, service.backend)


def members_listed(sharing: Any, brain_id: str, creator_id: str) -> str:
    """The members of ``brain_id`` beside its creator, as "name (role), ...", from the sharing
    registry alone (a brain whose metadata is damaged keeps them); "" when it has none."""
    if sharing.registry is None or sharing.registry.share(brain_id) is None:
        return ""
    return ", ".join(f"{m['name'] or m['id']} ({m['role']})" for m in sharing.members(brain_id, creator_id)[1:])


def refuse_damaged(document: Any, command: str) -> None:
    """Stop ``command`` before it changes anything when a state document it must change
    (``users.json``, ``sharing.json``) is damaged: the edit would be refused halfway through,
    after the user or brain was already changed (keys and memberships left behind, unlogged)."""
    problem = document.damaged() if document is not None else None
    if problem is not None:
        name = document.path.rsplit("/", 1)[-1]  # a file or an object: "/data/sharing.json", "s3://b/p/sharing.json"
        raise click.ClickException(
            f"{problem}; `brain-store {command}` must change it, so nothing was changed: put a good {name} "
            f"back (its last good copy {name}.last-good, or `brain-store restore` from a backup) and run it again")


def _fail(exc: Exception) -> click.ClickException:
    """``exc`` (a ``UsersFileError``) as a CLI error; a user nobody has as ``no_user`` words it."""
    from store.auth.users import NoSuchUser

    return no_user(exc.who) if isinstance(exc, NoSuchUser) else click.ClickException(str(exc))


@click.group()
def user() -> None:
    """Manage store accounts and their tokens."""


@user.command("add")
@click.argument("name")
@click.option("--email", default="", help="E-mail address shown by /auth/me (one account per address: another user's is refused).")
@data_option
def add(name: str, email: str, data: Path | None) -> None:
    """Create a user with a first brain named `default`; prints the token once (last line)."""
    from store.auth.users import UsersFileError

    settings = settings_from_cli(data_dir=data)
    note_running_dev(settings)
    registry, service = _open(settings)
    try:
        account, token = registry.add(name, email)
    except UsersFileError as exc:
        raise _fail(exc) from None
    service.ensure_default(account.id)
    click.echo(f"created user {account.name} ({account.id}) in {store_label(settings)}")
    click.echo("token (shown once, keep it secret):", err=True)
    click.echo(token)


@user.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of the users instead of a table.")
@data_option
def list_users(as_json: bool, data: Path | None) -> None:
    """List users: id, name, email, kind, brains, stored bytes, created.

    BRAINS and WITH SNAPSHOTS count what the limits count: every brain the store keeps for the
    user, the deleted ones not yet purged and those whose metadata is damaged included (a line
    under the table says how many of each). WITH SNAPSHOTS is the user's stored bytes: every
    distinct archive their brains keep (the current ones and the snapshots), at the size clients
    upload and download (a damaged brain's by the archives it keeps); what the quota, backup and the
    API's storage_used count. `brain-store brain list` lists the brains themselves with their ids,
    each one's ARCHIVE (current archive only) and WITH SNAPSHOTS (its share of this number).
    """
    settings = existing_store(data)
    registry, service = _open(settings)
    users = readable_users(registry).users()
    held = {u.id: _kept(service.backend, u.id) for u in users}
    if as_json:
        import json

        click.echo(json.dumps([_user_json(u, held[u.id], service) for u in users], indent=2))
        return
    click.echo(f"users of {store_label(settings)}:")
    if not users:
        click.echo("no users")
    else:
        _print_users(users, held, service)
    for d in registry.denied():
        click.echo(f"removed OIDC user {d.user_id or d.subject} ({d.name or '?'}, {d.email or 'no email'}) "
                   f"stays out since {d.removed_at}; `brain-store user allow` lets them back")
    orphans = removed_users_brains(registry, service.backend)
    if orphans:
        count = sum(kept.count() for kept in orphans.values())
        click.echo(f"{count} brain(s) of {len(orphans)} removed user(s) are still kept: `brain-store user orphans`")


def _user_json(u: User, kept: KeptBrains, service: BrainService) -> dict[str, Any]:
    return {"id": u.id, "name": u.name, "email": u.email, "kind": u.kind, "brains": kept.count(),
            "deleted_brains": kept.deleted(), "damaged_brains": len(kept.damaged),
            "stored_bytes": kept.stored_bytes(service.backend, u.id), "created_at": u.created_at}


def _print_users(users: list[User], held: dict[str, KeptBrains], service: BrainService) -> None:
    click.echo(f"{'ID':36}  {'NAME':20}  {'EMAIL':28}  {'KIND':6}  {'BRAINS':>6}  {'WITH SNAPSHOTS':>14}  CREATED")
    for u in users:
        kept = held[u.id]
        click.echo(f"{u.id:36}  {cell(u.name, 20)}  {cell(u.email, 28)}  {u.kind:6}  {kept.count():>6}  "
                   f"{kept.stored_bytes(service.backend, u.id):>14}  {u.created_at}")
    for u in users:
        if note := _counted_note(u, held[u.id]):
            click.echo(note)


def _counted_note(u: User, kept: KeptBrains) -> str:
    """What a user's BRAINS count includes besides the brains clients see ("" when nothing): the
    deleted ones kept until purged, and those whose metadata is damaged (named, with the way out)."""
    parts = []
    if deleted := kept.deleted():
        parts.append(f"{deleted} deleted, kept until purged (`brain-store brain list` lists them)")
    if kept.damaged:
        parts.append(f"{len(kept.damaged)} with damaged metadata, counted by the archives they keep: "
                     f"{_damaged_note(kept.damaged)}; each is unavailable until its metadata is repaired (from a "
                     "backup, or by hand), or removed with `brain-store brain purge ID --damaged`")
    return f"{u.name}'s {kept.count()} brain(s) include {' and '.join(parts)}" if parts else ""


@user.command("rotate")
@click.argument("name_or_id")
@data_option
def rotate(name_or_id: str, data: Path | None) -> None:
    """Give a user a new token; the old one stops working at once. Prints the token last."""
    from store.auth.users import UsersFileError

    settings = existing_store(data)
    registry, _ = _open(settings)
    try:
        account, token = registry.rotate(name_or_id)
    except UsersFileError as exc:
        raise _fail(exc) from None
    click.echo(f"new token for {account.name} ({account.id}) in {store_label(settings)}; "
               "the old one no longer works")
    click.echo(token)


@user.command("remove")
@click.argument("name_or_id")
@click.option("--purge", is_flag=True, help="Also delete the user's brains, archives and snapshots.")
@data_option
def remove(name_or_id: str, purge: bool, data: Path | None) -> None:
    """Remove a user (their token stops working at once)."""
    from store.auth.users import UsersFileError

    settings = existing_store(data)
    registry, service = _open(settings)
    # read before the user goes: a sharing file this release must not rewrite (a newer one, a
    # damaged one) is refused with nothing changed, not after the user was removed
    sharing = _sharing(settings, registry, service)
    refuse_damaged(registry, "user remove")
    refuse_damaged(sharing.registry, "user remove")
    try:
        account = registry.remove(name_or_id)
    except UsersFileError as exc:
        raise _fail(exc) from None
    _forget_access(sharing, account.id, account.name, "remove")
    where = store_label(settings)
    if purge:
        kept = _kept(service.backend, account.id)
        service.backend.delete_user(account.id)
        for brain_id in kept.ids():  # as `user purge` does: the brains' members and audit logs go with them
            sharing.forget(brain_id)
        click.echo(f"removed user {account.name} ({account.id}) from {where} and deleted their "
                   f"{kept.count()} brain(s){_damaged_among(kept)}")
    else:
        click.echo(f"removed user {account.name} ({account.id}) from {where}; their brains are kept: "
                   f"`brain-store user purge {account.id}` deletes them, "
                   f"`brain-store user adopt {account.id} NAME` gives them to a new user")


@user.command("allow")
@click.argument("who")
@data_option
def allow(who: str, data: Path | None) -> None:
    """Let a removed OIDC user sign in again (by former user id, name, email or subject)."""
    from store.auth.users import UsersFileError

    settings = existing_store(data)
    registry, _ = _open(settings)
    try:
        record = registry.allow(who)
    except UsersFileError as exc:
        raise _fail(exc) from None
    label = record.name or record.subject
    click.echo(f"allowed {label} ({record.user_id or record.subject}) to sign in to {store_label(settings)} "
               "again; their account is re-created on their next token")


# -- brains of removed users -------------------------------------------------------------


class KeptBrains(NamedTuple):
    """Every brain the store keeps for a user: readable ones and ones whose metadata is damaged
    (``StorageBackend.survey_brains``), which still hold their ids and archives, and which
    ``delete_user`` deletes too (their shares and audit logs must go with them)."""

    brains: list[BrainMeta]
    damaged: list[DamagedBrain]

    def count(self) -> int:
        """How many brains are kept, damaged ones included."""
        return len(self.brains) + len(self.damaged)

    def ids(self) -> list[str]:
        """The ids of every one of them."""
        return [meta.id for meta in self.brains] + [brain.brain_id for brain in self.damaged]

    def deleted(self) -> int:
        """How many are deleted brains kept until purged."""
        return sum(1 for meta in self.brains if meta.deleted_at)

    def stored_bytes(self, backend: Any, user_id: str) -> int:
        """The bytes they keep, as the quota counts them (``stored_total``)."""
        from store.storage.base import stored_total

        return stored_total(backend, user_id, self.brains, self.damaged)


def _kept(backend: Any, user_id: str) -> KeptBrains:
    return KeptBrains(*backend.survey_brains(user_id))


def removed_users_brains(registry: Any, backend: Any) -> dict[str, KeptBrains]:
    """Brains kept for user ids that are no longer in the users file, by former user id; a user
    whose brains are all damaged is one too (else nothing would find or delete what is left)."""
    present = {u.id for u in readable_users(registry).users()}
    found: dict[str, KeptBrains] = {}
    for user_id in backend.iter_users():
        if user_id not in present:
            kept = _kept(backend, user_id)
            if kept.count():
                found[user_id] = kept
    return found


def _orphan_brains(registry: Any, service: BrainService, former_id: str) -> KeptBrains:
    if registry.get(former_id) is not None:
        raise click.ClickException(f"{former_id} is a current user, not a removed one (see `brain-store user list`)")
    kept = removed_users_brains(registry, service.backend).get(former_id)
    if kept is None:
        raise click.ClickException(f"no brains of a removed user {former_id!r} (see `brain-store user orphans`)")
    return kept


def _damaged_note(damaged: list[DamagedBrain]) -> str:
    """The damaged brains named as the other commands name them (``DamagedBrain.describe``)."""
    return "; ".join(brain.describe() for brain in damaged)


def _damaged_among(kept: KeptBrains) -> str:
    """", N of them with damaged metadata: ..." when some of ``kept`` are damaged, else ""."""
    if not kept.damaged:
        return ""
    return f", {len(kept.damaged)} of them with damaged metadata: {_damaged_note(kept.damaged)}"


@user.command("orphans")
@data_option
def orphans(data: Path | None) -> None:
    """List brains kept for removed users (`user remove` without --purge)."""
    settings = existing_store(data)
    registry, service = _open(settings)
    found = removed_users_brains(registry, service.backend)
    click.echo(f"brains of removed users in {store_label(settings)}:")
    if not found:
        click.echo("none")
        return
    denied = {d.user_id: d for d in registry.denied() if d.user_id}
    sharing = _sharing(settings, registry, service)
    click.echo(f"{'FORMER USER ID':36}  {'BRAIN ID':36}  {'NAME':20}  {'SNAPSHOTS':>9}  {'STORED BYTES':>12}  LAST SYNC")
    for former_id, kept in sorted(found.items()):
        for meta in kept.brains:
            synced = meta.current.synced_at if meta.current else "never"
            click.echo(f"{former_id:36}  {meta.id:36}  {cell(meta.name[:20], 20)}  {len(meta.snapshots):>9}  "
                       f"{meta.stored_bytes():>12}  {synced}")
            if meta.deleted_at:
                # deleted before its user was removed, or by a member since: `brain` commands take it
                click.echo(f"  deleted {meta.deleted_at}, kept until purged: "
                           f"`brain-store brain undelete|purge {meta.id}`")
            if members := members_listed(sharing, meta.id, former_id):
                # members keep their roles; only the operator manages a brain with no creator
                click.echo(f"  shared with {members}: `brain-store share|unshare {meta.id}` manages them")
        for damaged in kept.damaged:
            # its name, snapshots and size are in the metadata that cannot be read
            click.echo(f"{former_id:36}  {damaged.brain_id:36}  metadata damaged: {damaged.where}: {damaged.reason}")
            if members := members_listed(sharing, damaged.brain_id, former_id):
                # sharing.json still has them: who loses the brain if it is purged
                click.echo(f"  shared with {members}: they keep their roles; `brain-store share|unshare "
                           f"{damaged.brain_id}` manages them once its metadata is repaired")
        if former_id in denied:
            click.echo(f"  ({former_id} was {denied[former_id].name or '?'}, removed {denied[former_id].removed_at})")
    click.echo("`brain-store user purge ID` deletes them; `brain-store user adopt ID NAME` gives them to a new user")
    if any(kept.damaged for kept in found.values()):
        click.echo("a brain whose metadata is damaged is unavailable until its metadata is repaired (from a backup, "
                   "or by hand): `user purge` deletes it with the others, `user adopt` hands it over as it is")


@user.command("purge")
@click.argument("former_id")
@data_option
def purge(former_id: str, data: Path | None) -> None:
    """Delete every brain kept for the removed user FORMER_ID (archives and snapshots), those whose
    metadata is damaged too (named)."""
    settings = existing_store(data)
    registry, service = _open(settings)
    kept = _orphan_brains(registry, service, former_id)
    sharing = _sharing(settings, registry, service)  # read first, as in `remove`
    refuse_damaged(sharing.registry, "user purge")
    service.backend.delete_user(former_id)
    for brain_id in kept.ids():
        sharing.forget(brain_id)
    click.echo(f"deleted {kept.count()} brain(s) of removed user {former_id} from {store_label(settings)}"
               f"{_damaged_among(kept)}")


@user.command("adopt")
@click.argument("former_id")
@click.argument("name")
@click.option("--email", default="", help="E-mail address shown by /auth/me (one account per address: another user's is refused).")
@data_option
def adopt(former_id: str, name: str, email: str, data: Path | None) -> None:
    """Give the brains of removed user FORMER_ID to a new user NAME (prints the token last).

    The new user takes over the former id, so the brains, their snapshots and (with
    encryption on) their sealing key come along unchanged; the old token, the removed
    user's agent keys and their memberships in other users' brains stay dead. A brain whose
    metadata is damaged comes along as it is (named): it stays unavailable until its metadata is
    repaired, and is never dropped (`user purge` deletes it with the others instead).
    """
    from store.auth.users import UsersFileError

    settings = existing_store(data)
    registry, service = _open(settings)
    kept = _orphan_brains(registry, service, former_id)
    sharing = _sharing(settings, registry, service)
    # both files are changed: check both before either is
    refuse_damaged(registry, "user adopt")
    refuse_damaged(sharing.registry, "user adopt")
    try:
        registry.check_add(name, email, user_id=former_id)  # a taken name: refused before the keys go
    except UsersFileError as exc:
        raise _fail(exc) from None
    # removed by an older version: still there
    _forget_access(sharing, former_id, "", "adopt")
    try:
        account, token = registry.add(name, email, user_id=former_id)
    except UsersFileError as exc:
        raise _fail(exc) from None
    click.echo(f"created user {account.name} ({account.id}) in {store_label(settings)} with the "
               f"{kept.count()} brain(s) of the removed user")
    if kept.damaged:
        # they stay under the id the new user took over: unreadable, never dropped (see the docstring)
        click.echo(f"{len(kept.damaged)} of them have damaged metadata and stay unavailable until it is repaired "
                   f"(from a backup, or by hand): {_damaged_note(kept.damaged)}")
    click.echo("token (shown once, keep it secret):", err=True)
    click.echo(token)
