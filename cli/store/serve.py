"""`brain-store serve`: run the store."""

from __future__ import annotations

from pathlib import Path

import click

from cli.store.runner import run_store, settings_from_cli


@click.command()
@click.option("--host", default=None, help="Address to listen on [env STORE_HOST, default 127.0.0.1].")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="Port [env STORE_PORT, default 8787].")
@click.option("--data", "data", type=click.Path(path_type=Path), default=None,
              help="Data directory [env STORE_DATA_DIR, default ~/.brain-store]; with STORE_BACKEND=s3 it holds only "
              "scratch files of uploads in progress.")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes sharing the data directory.")
def serve(host: str | None, port: int | None, data: Path | None, workers: int) -> None:
    """Run the store (Ctrl-C or SIGTERM finishes in-flight requests, then stops)."""
    settings = settings_from_cli(host=host, port=port, data_dir=data)
    run_store(settings, workers)
