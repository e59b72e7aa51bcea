"""Which store a command acts on: its settings, a label naming it, and a check that it exists."""

from __future__ import annotations

from pathlib import Path

import click

from cli.store.runner import settings_from_cli
from store.settings import StoreSettings


def store_label(settings: StoreSettings) -> str:
    """Where the configured store lives: its data directory or ``s3://bucket/prefix``."""
    if settings.backend == "s3":
        return f"s3://{settings.s3_bucket}/{settings.s3_prefix}"
    return str(settings.data_dir)


def existing_store(data: Path | None) -> StoreSettings:
    """Settings of a store that must already exist: a missing data directory is a clear error
    instead of an empty store being created by a command that only reads or changes users."""
    settings = settings_from_cli(data_dir=data)
    if settings.backend != "s3" and not settings.data_dir.is_dir():
        raise click.ClickException(
            f"{settings.data_dir}: no such data directory (give the store's --data or STORE_DATA_DIR; "
            "`brain-store user add` creates a new one)"
        )
    return settings
