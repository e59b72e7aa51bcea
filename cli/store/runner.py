"""Start the store under uvicorn (shared by ``serve`` and ``dev``)."""

from __future__ import annotations

import logging
import os
import sys

import click

from store.settings import SettingsError, StoreSettings

GRACEFUL_SHUTDOWN_SECONDS = 60


def settings_from_cli(**overrides: object) -> StoreSettings:
    """Settings from the environment with CLI flags winning; a bad value is a clean CLI error."""
    try:
        return StoreSettings.from_env(os.environ, **overrides)
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None


def check_oidc(settings: StoreSettings) -> None:
    """Refuse to start with OIDC settings the verifier rejects (e.g. public issuer, no allow-list)."""
    if not settings.oidc:
        return
    from store.auth.oidc import OidcConfig, OidcConfigError

    try:
        OidcConfig.from_settings(settings)
    except OidcConfigError as exc:
        raise click.UsageError(str(exc)) from None


def run_store(settings: StoreSettings, workers: int = 1, *, announce: str | None = None) -> None:
    """Recover the data dir, bind, print ``listening on http://H:P``, serve until stopped.

    Worker processes rebuild the same settings from the environment we export here.
    SIGTERM/SIGINT stop accepting connections and let in-flight requests (uploads) finish.
    """
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from store.app import create_app
    from store.storage.factory import prepare_storage

    check_oidc(settings)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        prepare_storage(settings)  # crash recovery; on S3 also the conditional-write probe
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    common = dict(
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # the store resolves X-Forwarded-For itself, only via trusted proxies
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        lifespan="off",
    )
    cleanup_metrics = None
    if workers > 1:
        if settings.metrics and settings.metrics_multiproc_dir is None:
            # Workers add up their metrics through files in a private directory (store/metrics.py).
            from store.metrics import prepare_multiprocess_dir

            metrics_env, cleanup_metrics = prepare_multiprocess_dir()
            os.environ.update(metrics_env)
        os.environ.update(settings.to_env())
        config = uvicorn.Config("store.app:app_from_env", factory=True, workers=workers, **common)  # type: ignore[arg-type]
    else:
        config = uvicorn.Config(create_app(settings), **common)  # type: ignore[arg-type]
    sock = config.bind_socket()
    host, port = sock.getsockname()[:2]
    click.echo(f"listening on http://{host}:{port}")
    if announce:
        click.echo(announce)
    sys.stdout.flush()  # visible at once even when stdout is a pipe or a file
    try:
        if workers > 1:
            Multiprocess(config, sockets=[sock]).run()
        else:
            uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        if cleanup_metrics is not None:
            cleanup_metrics()
