"""Which store a command acts on: its settings, a label naming it, and a check that it exists."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import click

from cli.store.runner import settings_from_cli
from store.settings import StoreSettings


# The --data option of the commands that act on a store (one definition: its help says what it is with S3).
data_option = click.option(
    "--data", "data", type=click.Path(path_type=Path), default=None,
    help="Data directory [env STORE_DATA_DIR, default ~/.brain-store]; with STORE_BACKEND=s3 the bucket is used.",
)


def store_label(settings: StoreSettings) -> str:
    """Where the configured store lives: its data directory or ``s3://bucket/prefix``."""
    if settings.backend == "s3":
        return f"s3://{settings.s3_bucket}/{settings.s3_prefix}"
    return str(settings.data_dir)


def cell(text: str, width: int) -> str:
    """``text`` as a table cell ``width`` terminal columns wide (a Chinese or Japanese character takes two)."""
    if text.isascii():
        return f"{text:{width}}"
    from connector.engine.format.graphemes import padded_to_columns  # its `regex` takes 0.1 s: only when needed

    return padded_to_columns(text, width)


def existing_store(data: Path | None) -> StoreSettings:
    """Settings of a store that must already exist: a missing data directory is a clear error
    instead of an empty store being created by a command that only reads or changes users."""
    settings = settings_from_cli(data_dir=data)
    note_running_dev(settings)
    if settings.backend != "s3" and not settings.data_dir.is_dir():
        raise click.ClickException(
            f"{settings.data_dir}: no such data directory (give the store's --data or STORE_DATA_DIR; "
            "`brain-store user add` creates a new one)"
        )
    return settings


# Where `make dev` (`brain-store dev --data .dev-data`) keeps its store, from the repository.
DEV_DATA = Path(".dev-data")


def _dev_running(data: Path) -> bool:
    """Whether a `brain-store dev` holds its lock on ``data`` (cli/store/dev.py: ``dev.lock``)."""
    try:
        fd = os.open(data / "dev.lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def note_running_dev(settings: StoreSettings) -> None:
    """Say so (on stderr) when a command is about to act on another store than the `make dev`
    running from this directory: its users and tokens would not reach that store."""
    if settings.backend == "s3" or not _dev_running(DEV_DATA):
        return
    dev_store = (DEV_DATA / "store").resolve()
    if settings.data_dir.expanduser().resolve() == dev_store:
        return
    click.echo(f"note: `make dev` is running here with its store in {DEV_DATA / 'store'}, but this command acts on "
               f"{store_label(settings)}; for the dev store add --data {DEV_DATA / 'store'}", err=True)
