"""`brain-store dev`: a local store with a demo user, for trying things out."""

from __future__ import annotations

from pathlib import Path

import click

from cli.store.runner import run_store, settings_from_cli


@click.command()
@click.option("--data", "data", type=click.Path(path_type=Path), default=Path(".dev-data"), show_default=True,
              help="Data directory for this local store.")
@click.option("--port", type=int, default=None, help="Port [default 8787].")
def dev(data: Path, port: int | None) -> None:
    """Start a store on 127.0.0.1 with a demo user; prints the URL and a fresh token. Ctrl-C stops."""
    from store.auth.users import UserRegistry
    from store.service import BrainService
    from store.storage.local import LocalBackend

    settings = settings_from_cli(host="127.0.0.1", port=port, data_dir=data)
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    registry = UserRegistry(data_dir)
    # Tokens are only ever stored hashed, so the demo token cannot be shown again:
    # each start gives the demo user a fresh one (the previous one stops working).
    demo = registry.find("demo")
    if demo is None:
        demo, token = registry.add("demo", "demo@localhost")
    else:
        demo, token = registry.rotate("demo")
    BrainService(settings, LocalBackend(data_dir, fsync=settings.fsync)).ensure_default(demo.id)
    url = f"http://127.0.0.1:{settings.port}"
    run_store(
        settings,
        1,
        announce=f"store URL: {url}\ndemo user: demo\ntoken: {token}\n(data in {data_dir}; Ctrl-C stops)",
    )
