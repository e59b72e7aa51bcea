"""`brain-connector serve`: run the MCP connector with uvicorn."""

from __future__ import annotations

import sys

import click


@click.command()
@click.option("--host", default=None, help="Bind address (CONNECTOR_HOST, default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (CONNECTOR_PORT, default 8788).")
@click.option(
    "--dev",
    is_flag=True,
    default=None,
    help="Development mode: sign everyone in as one fixed local user (never for real use).",
)
def serve(host: str | None, port: int | None, dev: bool | None) -> None:
    """Serve the MCP connector (POST /mcp) and its OAuth authorization server."""
    import uvicorn

    from common.connection_guard import guarded_protocol
    from connector.app import configure_logging, create_app
    from connector.settings import ConnectorSettings, SettingsError

    try:
        settings = ConnectorSettings.load(host=host, port=port, dev=dev or None)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    if settings.idp is None and not settings.dev:
        raise click.ClickException(
            "no identity provider configured: set CONNECTOR_IDP=static or CONNECTOR_IDP=oidc "
            "(or run with --dev for a local development setup). Refusing to start."
        )
    configure_logging(settings.log_level)
    try:
        app = create_app(settings)
    except (ValueError, OSError, RuntimeError) as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    if settings.dev:
        banner = "!" * 72
        click.echo(banner, err=True)
        click.echo(
            "DEVELOPMENT MODE: everyone who reaches this connector is signed in as one fixed local user.\n"
            "Never expose it to a network.",
            err=True,
        )
        click.echo(banner, err=True)
    base = settings.public_url or f"http://{settings.host}:{settings.port}"
    click.echo(f"brain-connector listening on http://{settings.host}:{settings.port}")
    click.echo(f"MCP URL: {base}/mcp   (store: {settings.store_url})")
    if settings.webapp:
        click.echo(f"Web app: {base}/app")
    sys.stdout.flush()
    uvicorn.run(
        app,
        http=guarded_protocol(settings.http_limits),  # header size, slow clients, open connections
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=10,
    )
