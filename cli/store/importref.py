"""`brain-store import-reference DIR`: take over a reference store's users, tokens and history."""

from __future__ import annotations

from pathlib import Path

import click

from cli.store.runner import settings_from_cli


@click.command("import-reference")
@click.argument("ref_dir", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--key", "key_text", default=None, envvar="REFERENCE_ENCRYPTION_KEY", metavar="KEY",
              help="The reference store's STORE_ENCRYPTION_KEY (64 hex or base64), if it encrypted archives "
                   "[env REFERENCE_ENCRYPTION_KEY].")
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="This store's data directory [env STORE_DATA_DIR]; with STORE_BACKEND=s3 the bucket is used.")
def import_reference(ref_dir: Path, key_text: str | None, data: Path | None) -> None:
    """Import users (token hashes: old tokens keep working), brains and snapshots from REF_DIR.

    Archives are checked like uploads, re-hashed, and sealed with this store's key when
    STORE_ENCRYPTION_KEY is set. Users and brains already here are skipped, so running it
    twice changes nothing. Snapshots get this store's names (listed in /versions).
    """
    from store.backup.reference import ReferenceImportError
    from store.backup.reference import import_reference as run
    from store.settings import SettingsError, parse_key
    from store.storage.factory import open_backend, open_registry

    settings = settings_from_cli(data_dir=data)
    try:
        ref_key = parse_key(key_text, "--key") if key_text else None
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    if settings.backend != "s3":
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    sealer = None
    if settings.encryption_key:
        from store.sealed import ArchiveSealer

        sealer = ArchiveSealer(settings.encryption_key, settings.previous_keys)
    try:
        report = run(ref_dir, open_backend(settings), open_registry(settings), ref_key=ref_key, sealer=sealer,
                     limits=settings.inspect_limits, progress=click.echo)
    except ReferenceImportError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"imported {len(report.users_added)} user(s) ({len(report.users_present)} already present), "
        f"{len(report.brains_added)} brain(s) ({len(report.brains_present)} already present), "
        f"{report.archives} archive(s); {len(report.warnings)} warning(s)"
    )
    if report.warnings:
        raise SystemExit(1)
