"""`brain-store import-reference DIR`: take over a reference store's users, tokens and history."""

from __future__ import annotations

from pathlib import Path

import click

from cli.store.runner import settings_from_cli
from cli.store.target import store_label


@click.command("import-reference")
@click.argument("ref_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--key", "key_text", default=None, envvar="REFERENCE_ENCRYPTION_KEY", metavar="KEY",
              help="The reference store's STORE_ENCRYPTION_KEY (64 hex or base64), if it sealed archives "
                   "[env REFERENCE_ENCRYPTION_KEY].")
@click.option("--into-existing", is_flag=True,
              help="Let a reference user who already has an account here get the brains that account lacks "
                   "(refused without it).")
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="This store's data directory [env STORE_DATA_DIR, default ~/.brain-store]; with STORE_BACKEND=s3 "
                   "the bucket is used.")
def import_reference(ref_dir: Path, key_text: str | None, into_existing: bool, data: Path | None) -> None:
    """Import users (token hashes: their tokens keep working), brains and snapshots from REF_DIR.

    Every archive is opened (decrypting the reference's sealed files), hashed and checked
    like an upload before anything is written: the first file that fails stops the import
    and nothing changes. Archives are stored sealed with this store's key when
    STORE_ENCRYPTION_KEY is set; snapshots keep their reference names. Users and brains
    already here are left as they are, so running it again adds only what is missing.
    Refused, with nothing changed: a brain id another user here already has, a brain that
    would be added to an account already here (unless --into-existing), a user name that
    is not 1-128 ASCII letters, digits or . _ @ + - or is another user's name or e-mail.
    """
    from store.backup.reference import ReferenceImportError
    from store.backup.reference import import_reference as run
    from store.settings import SettingsError, parse_key
    from store.context import open_registry
    from store.storage.factory import open_backend

    settings = settings_from_cli(data_dir=data)
    try:
        ref_key = parse_key(key_text, "--key / REFERENCE_ENCRYPTION_KEY") if key_text else None
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    sealer = None
    if settings.encryption_key:
        from store.sealed import ArchiveSealer

        sealer = ArchiveSealer(settings.encryption_key, settings.previous_keys)
    click.echo(f"importing {ref_dir} into {store_label(settings)}" + (" (sealed with this store's key)" if sealer else ""))
    try:
        report = run(ref_dir, open_registry(settings), lambda: open_backend(settings), ref_key=ref_key,
                     sealer=sealer, limits=settings.inspect_limits, progress=click.echo,
                     into_existing=into_existing)
    except ReferenceImportError as exc:
        raise click.ClickException(str(exc)) from None
    for warning in report.warnings:
        click.echo(f"warning: {warning}")
    click.echo(
        f"imported {len(report.users_added)} user(s) ({len(report.users_present)} already here), "
        f"{len(report.brains_added)} brain(s) ({len(report.brains_present)} already here), "
        f"{report.archives} archive(s) stored ({report.sealed_by_reference} reference file(s) were sealed); "
        f"{len(report.warnings)} warning(s)"
    )
