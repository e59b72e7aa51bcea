"""`brain-store user add|list|rotate|remove|allow`: manage accounts (applies to a running store at once)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.store.runner import settings_from_cli

if TYPE_CHECKING:
    from store.auth.users import User
    from store.service import BrainService

_data_option = click.option(
    "--data", "data", type=click.Path(path_type=Path), default=None,
    help="Data directory [env STORE_DATA_DIR, default ~/.brain-store].",
)


def _open(data: Path | None):  # type: ignore[no-untyped-def]
    from store.service import BrainService
    from store.storage.factory import open_backend, open_registry

    settings = settings_from_cli(data_dir=data)
    return open_registry(settings), BrainService(settings, open_backend(settings))


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@click.group()
def user() -> None:
    """Manage store accounts and their tokens."""


@user.command("add")
@click.argument("name")
@click.option("--email", default="", help="E-mail address shown by /auth/me.")
@_data_option
def add(name: str, email: str, data: Path | None) -> None:
    """Create a user with a first brain named `default`; prints the token once (last line)."""
    from store.auth.users import UsersFileError

    registry, service = _open(data)
    try:
        account, token = registry.add(name, email)
    except UsersFileError as exc:
        raise _fail(exc) from None
    service.ensure_default(account.id)
    click.echo(f"created user {account.name} ({account.id})")
    click.echo("token (shown once, keep it secret):", err=True)
    click.echo(token)


@user.command("list")
@_data_option
def list_users(data: Path | None) -> None:
    """List users: id, name, email, kind, brains, bytes stored, created."""
    registry, service = _open(data)
    users = registry.users()
    if not users:
        click.echo("no users")
    else:
        _print_users(users, service)
    for d in registry.denied():
        click.echo(f"removed OIDC user {d.user_id or d.subject} ({d.name or '?'}, {d.email or 'no email'}) "
                   f"stays out since {d.removed_at}; `brain-store user allow` lets them back")


def _print_users(users: list[User], service: BrainService) -> None:
    click.echo(f"{'ID':36}  {'NAME':20}  {'EMAIL':28}  {'KIND':6}  {'BRAINS':>6}  {'BYTES':>12}  CREATED")
    for u in users:
        brains = service.list_brains(u.id)
        used = sum(m.stored_bytes() for m in brains)
        click.echo(
            f"{u.id:36}  {u.name:20}  {u.email:28}  {u.kind:6}  {len(brains):>6}  {used:>12}  {u.created_at}"
        )


@user.command("rotate")
@click.argument("name_or_id")
@_data_option
def rotate(name_or_id: str, data: Path | None) -> None:
    """Give a user a new token; the old one stops working at once. Prints the token last."""
    from store.auth.users import UsersFileError

    registry, _ = _open(data)
    try:
        account, token = registry.rotate(name_or_id)
    except UsersFileError as exc:
        raise _fail(exc) from None
    click.echo(f"new token for {account.name} ({account.id}); the old one no longer works")
    click.echo(token)


@user.command("remove")
@click.argument("name_or_id")
@click.option("--purge", is_flag=True, help="Also delete the user's brains, archives and snapshots.")
@_data_option
def remove(name_or_id: str, purge: bool, data: Path | None) -> None:
    """Remove a user (their token stops working at once)."""
    from store.auth.users import UsersFileError

    registry, service = _open(data)
    try:
        account = registry.remove(name_or_id)
    except UsersFileError as exc:
        raise _fail(exc) from None
    if purge:
        service.backend.delete_user(account.id)
        click.echo(f"removed user {account.name} ({account.id}) and deleted their brains")
    else:
        click.echo(f"removed user {account.name} ({account.id}); their brains stay on disk (use --purge to delete)")


@user.command("allow")
@click.argument("who")
@_data_option
def allow(who: str, data: Path | None) -> None:
    """Let a removed OIDC user sign in again (by former user id, name, email or subject)."""
    from store.auth.users import UsersFileError

    registry, _ = _open(data)
    try:
        record = registry.allow(who)
    except UsersFileError as exc:
        raise _fail(exc) from None
    label = record.name or record.subject
    click.echo(f"allowed {label} ({record.user_id or record.subject}) to sign in again; "
               "their account is re-created on their next token")
