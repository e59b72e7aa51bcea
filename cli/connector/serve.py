"""`brain-connector serve`: run the MCP connector with uvicorn, in one process or several."""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.serving import KEEP_ALIVE_SECONDS, http_origin

if TYPE_CHECKING:
    from connector.settings import ConnectorSettings

# Seconds in-flight requests get to finish once a stop signal arrives (then held writes are flushed).
GRACEFUL_SHUTDOWN_SECONDS = 10
# Seconds a stopping worker gets beyond that to push its held writes before the leader kills it.
SHUTDOWN_PUSH_SECONDS = 10


@click.command()
@click.option("--host", default=None, help="Bind address (CONNECTOR_HOST, default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (CONNECTOR_PORT, default 8788).")
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Worker processes sharing the port and the state, CONNECTOR_STATE_DIR or CONNECTOR_STATE_URL "
    "(CONNECTOR_WORKERS, default 1).",
)
@click.option(
    "--dev",
    is_flag=True,
    default=None,
    help="Development mode: sign everyone in as one fixed local user (never for real use).",
)
def serve(host: str | None, port: int | None, workers: int | None, dev: bool | None) -> None:
    """Serve the MCP connector (POST /mcp) and its OAuth authorization server.

    The shared state (sign-ins, web sessions, held writes) lives in CONNECTOR_STATE_DIR, or with
    CONNECTOR_STATE_URL=s3://bucket/prefix in a bucket (CONNECTOR_S3_ENDPOINT_URL, CONNECTOR_S3_REGION,
    credentials from AWS_*; needs CONNECTOR_STATE_KEY); see docs/replicas.md.
    """
    from connector.app import configure_logging
    from connector.settings import ConnectorSettings, SettingsError

    try:
        settings = ConnectorSettings.load(host=host, port=port, workers=workers, dev=dev or None)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    if settings.idp is None and not settings.dev:
        raise click.ClickException(
            "no identity provider configured: set CONNECTOR_IDP=static or CONNECTOR_IDP=oidc "
            "(or run with --dev for a local development setup). Refusing to start."
        )
    configure_logging(settings.log_level)
    cleanups = []
    try:
        if settings.workers > 1 and settings.metrics and settings.metrics_dir is None:
            # /metrics adds up every worker's series through files in a private directory.
            shared = _private_dir("brain-connector-metrics-", "the workers' metrics", cleanups)
            settings = settings.with_overrides(metrics_dir=shared)
        if settings.workers > 1 and settings.limits_dir is None:
            # One budget of sign-in attempts per address for all the workers, not one each.
            limits = _private_dir("brain-connector-limits-", "the workers' sign-in limits", cleanups)
            settings = settings.with_overrides(limits_dir=limits)
        runtime = None
        if settings.workers > 1 and settings.worker_affinity:
            # The workers' unix sockets for requests they pass to a user's worker (connector/affinity.py).
            # A unix socket's path has at most 107 bytes: under a long TMPDIR they go to /tmp.
            short = len(tempfile.gettempdir()) + len("/brain-run-12345678/worker-64.sock") <= 107
            runtime = _private_dir("brain-run-", "the workers' sockets", cleanups, None if short else "/tmp")
        _serve(settings, runtime)
    except KeyboardInterrupt:
        pass
    finally:
        for cleanup in cleanups:
            cleanup()


def _private_dir(prefix: str, purpose: str, cleanups: list[Callable[[], Any]], parent: str | None = None) -> Path:
    """A new temporary directory only we can enter (0700, in ``parent`` or TMPDIR), removed when `serve` ends."""
    try:
        made = tempfile.mkdtemp(prefix=prefix, dir=parent)
    except OSError as exc:
        raise click.ClickException(f"cannot create a directory for {purpose}: {exc}") from None
    cleanups.append(functools.partial(shutil.rmtree, made, ignore_errors=True))
    return Path(made)


def _serve(settings: ConnectorSettings, runtime: Path | None = None) -> None:
    """Build the app, bind the port and serve until stopped (``runtime``: where the workers' unix sockets go)."""
    import uvicorn

    from cli.serving.workers import bind_listener, freeze_imported, serve_forked
    from common.connection_guard import guarded_protocol
    from connector.app import create_app

    try:
        # Built here, before any fork, so that a bad setting is one clean error (and the state
        # key file exists before the workers read it); the workers build their own after the fork.
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
    sock = bind_listener(settings.host, settings.port, shared_port=settings.workers > 1)
    base = settings.public_url or http_origin(settings.host, settings.port)
    click.echo(f"brain-connector listening on {http_origin(settings.host, settings.port)}")
    if settings.workers > 1:
        click.echo(f"{settings.workers} worker processes (working copies and their budgets are per worker)")
        if runtime:
            click.echo("each user's /mcp requests are served by one worker (CONNECTOR_WORKER_AFFINITY)")
    click.echo(f"MCP URL: {base}/mcp   (store: {settings.store_url})")
    if not settings.public_url and not settings.dev:
        click.echo("CONNECTOR_PUBLIC_URL is not set: the OAuth metadata and links take their scheme and host from "
                   "each request (X-Forwarded-Proto and -Host only from CONNECTOR_TRUST_PROXY). Set it on a public "
                   "server; under a path (https://host/brain) nothing else works: X-Forwarded-Prefix is not read, "
                   "as a client could forge it through the proxy.", err=True)
    if settings.webapp:
        click.echo(f"Web app: {base}/app")
    sys.stdout.flush()
    guarded = guarded_protocol(settings.http_limits)  # header size, slow clients, open connections
    common: dict[str, Any] = dict(
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    if settings.workers == 1:
        freeze_imported()
        uvicorn.Server(uvicorn.Config(app, http=guarded, **common)).run(sockets=[sock])
        return
    leader = os.getpid()
    paths = [runtime / f"worker-{slot}.sock" for slot in range(settings.workers)] if runtime else []
    unix_sockets = [bind_unix(path) for path in paths]
    secret = secrets.token_hex(32)  # this run's forwarding secret, in memory only (inherited by the forks)

    def make_config(slot: int, **extra: Any) -> uvicorn.Config:
        # The leader serves the app built above; every fork builds its own (its own store
        # client, working copies and background tasks, none shared across processes).
        own = app if os.getpid() == leader else create_app(settings)
        if not paths:
            return uvicorn.Config(own, **common, **extra)
        from connector.affinity import WorkerAffinity

        codec = own.state.connector.codec

        def subject_of(token: str) -> str | None:
            claims = codec.open(token)
            return claims.sub if claims else None

        web = own.state.webapp
        routed = WorkerAffinity(
            own,
            slot=slot,
            sockets=paths,
            secret=secret,
            subject_of=subject_of,
            session_subject=web.session_subject if web is not None else None,
            prefix=settings.public_path,
        )
        return uvicorn.Config(routed, **common, **extra)

    # After their requests the workers push what they hold (the journal keeps anything cut short).
    serve_forked(
        settings.workers,
        make_config,
        sock,
        guarded,
        grace_s=GRACEFUL_SHUTDOWN_SECONDS + SHUTDOWN_PUSH_SECONDS,
        own_sockets=unix_sockets,
    )


def bind_unix(path: Path) -> socket.socket:
    """A unix stream socket listening on ``path``; a clean CLI error if that fails.

    Listening from before the fork: a request passed to a worker still building its app
    waits in the backlog for it, instead of being refused and served by a worker that
    holds none of the user's state (a write while the store is away could not be held there).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {path}: {exc.strerror or exc}") from None
    return sock
