"""`brain-store keygen` and `brain-store rekey`: encryption keys at rest."""

from __future__ import annotations

import secrets
from pathlib import Path

import click

from cli.store.target import data_option, existing_store


@click.command()
def keygen() -> None:
    """Print a new random 32-byte key as 64 hex characters (for STORE_ENCRYPTION_KEY)."""
    click.echo(secrets.token_bytes(32).hex())


@click.command()
# the key may come from the environment: on the command line it is readable by every local user
# (ps, /proc/PID/cmdline) for as long as the rekey runs, and it stays in the shell's history
@click.option("--new-key", "new_key", required=True, envvar="NEW_ENCRYPTION_KEY",
              help="The new master key (64 hex or base64) [env NEW_ENCRYPTION_KEY].")
@data_option
def rekey(new_key: str, data: Path | None) -> None:
    """Re-seal every archive and snapshot under NEW_KEY while the store keeps serving.

    Rolling procedure: (1) restart the store with STORE_ENCRYPTION_KEY=<new> and
    STORE_ENCRYPTION_PREVIOUS_KEYS=<old> (both open, new seals); (2) run
    `brain-store rekey --new-key <new>` with STORE_ENCRYPTION_KEY=<old> (or the
    previous keys) in its environment, so it can open what is stored; (3) drop
    STORE_ENCRYPTION_PREVIOUS_KEYS and restart. Plain (unsealed) archives are sealed too.
    A brain whose metadata is damaged is left as it is: it is named, and the command exits
    with status 1 once everything else is re-sealed.
    """
    from common.files import NotARegularFile
    from store.context import no_store_there
    from store.rekey import RekeyError, rekey_data_dir
    from store.settings import SettingsError, parse_key

    settings = existing_store(data)  # a mistyped --data must not "re-seal 0 blobs" of a new empty store
    # nor a mistyped STORE_S3_PREFIX (a bucket has no directory to be missing: its users.json is)
    if settings.backend == "s3" and (problem := no_store_there(settings)) is not None:
        raise click.ClickException(problem)
    try:
        key = parse_key(new_key, "--new-key")
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        if settings.backend == "s3":
            from store.storage.factory import open_backend
            from store.rekey.s3 import rekey_bucket

            report = rekey_bucket(settings, open_backend(settings), key, progress=lambda line: click.echo(line))
        else:
            report = rekey_data_dir(settings, key, progress=lambda line: click.echo(line))
    except NotARegularFile as exc:  # a named pipe or device in blobs/ (outside damage): refused, not waited on
        raise click.ClickException(f"rekey stopped: {exc}; archives already re-sealed stay so") from None
    except RekeyError as exc:
        raise click.ClickException(
            f"rekey stopped at {exc}; give the key it was sealed with in STORE_ENCRYPTION_KEY or "
            "STORE_ENCRYPTION_PREVIOUS_KEYS and run it again (archives already re-sealed stay so)"
        ) from None
    click.echo(f"re-sealed {report.resealed} blob(s) in {report.brains} brain(s); {report.skipped} already current")
    if report.damaged:
        # their archives still need the old key: it must not be dropped on the strength of this run
        raise click.ClickException(
            f"{len(report.damaged)} brain(s) NOT re-sealed, their metadata is damaged: {'; '.join(report.damaged)}; "
            "keep the old key in STORE_ENCRYPTION_PREVIOUS_KEYS, repair them and run rekey again")
