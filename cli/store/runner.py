"""Start the store under uvicorn (shared by ``serve`` and ``dev``)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from cli.serving import KEEP_ALIVE_SECONDS, http_origin
from cli.serving.workers import bind_listener, freeze_imported, serve_forked
from common.connection_guard import guarded_protocol
from store.settings import SettingsError, StoreSettings

GRACEFUL_SHUTDOWN_SECONDS = 60


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Within the block, SIGTERM (`timeout`, `systemctl stop`, `docker stop`) ends the command as
    Ctrl-C does: the interrupt unwinds it, so a copy in progress removes its partial file and
    scratch directory instead of leaving them (a partial backup holds every token hash)."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def settings_from_cli(**overrides: object) -> StoreSettings:
    """Settings from the environment with CLI flags winning; a bad value is a clean one-line CLI error
    (no usage block: the environment, not the command line, is what to fix)."""
    try:
        return StoreSettings.from_env(os.environ, **overrides)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


def check_oidc(settings: StoreSettings) -> None:
    """Refuse to start with OIDC settings the verifier rejects (e.g. public issuer, no allow-list)."""
    if not settings.oidc:
        return
    from common.oidc import OidcConfig, OidcConfigError

    try:
        OidcConfig.from_settings(settings)
    except OidcConfigError as exc:
        raise click.ClickException(str(exc)) from None


def run_store(settings: StoreSettings, workers: int = 1, *, announce: str | None = None) -> None:
    """Recover the data dir, check the encryption keys open its archives, bind, print
    ``listening on http://H:P``, serve until stopped.

    Worker processes rebuild the same settings from the environment we export here.
    SIGTERM/SIGINT stop accepting connections and let in-flight requests (uploads) finish.
    """
    import uvicorn
    from store.logs import configure_logging
    from store.sealed import check_keys_fit
    from store.storage.factory import open_backend, prepare_storage
    from store.upload import upload_threads

    check_oidc(settings)
    share_one_malloc_arena()  # first, before any thread exists
    # the automatic number depends on how many workers share the cores: fixed here, for all of them
    settings = dataclasses.replace(settings, upload_threads=upload_threads(settings.upload_threads, workers))
    configure_logging(settings)
    try:
        prepare_storage(settings)  # crash recovery; on S3 also the conditional-write probe
        # sealed archives and no key (or another key) would make every download fail: refuse now
        check_keys_fit(settings, open_backend(settings))
        if workers > 1:
            # each worker reads them as it starts; a document a newer release wrote (refused, see
            # WatchedDocument) is one clear error here rather than a traceback per worker
            from store.auth.users import UserRegistry
            from store.context import document_store
            from store.sharing.registry import SharingRegistry

            docs = document_store(settings)
            UserRegistry(docs)
            SharingRegistry(docs)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    from store.context import rate_limit_file

    for kind in ("failed-logins", "requests", "uploads"):
        # rate-limit buckets belong to one run of the store (their clock is the host's
        # monotonic clock, which restarts with the host)
        rate_limit_file(settings, kind).unlink(missing_ok=True)
    common = dict(
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # the store resolves X-Forwarded-For itself, only via trusted proxies
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        lifespan="off",
    )
    cleanup_metrics = None
    if workers > 1:
        if settings.metrics and settings.metrics_dir is None:
            # Workers add up their metrics through files in a private directory (store/metrics.py).
            from store.metrics import prepare_multiprocess_dir

            metrics_env, cleanup_metrics = prepare_multiprocess_dir()
            os.environ.update(metrics_env)
        # every process rebuilds its settings from this environment (prometheus_client reads
        # its multiprocess directory at import time, so the environment comes first)
        os.environ.update(settings.to_env())
    from store.app import app_from_env, serving_app

    guarded = guarded_protocol(settings.http_limits)  # header size, slow clients, open connections
    config = uvicorn.Config(serving_app(settings) if workers == 1 else "unused", http=guarded, **common)  # type: ignore[arg-type]
    sock = bind_listener(settings.host, settings.port, shared_port=workers > 1)
    host, port = sock.getsockname()[:2]
    click.echo(f"listening on {http_origin(host, port)}")
    if announce:
        click.echo(announce)
    sys.stdout.flush()  # visible at once even when stdout is a pipe or a file
    try:
        if workers > 1:
            serve_forked(
                workers,
                lambda _slot, **extra: uvicorn.Config(app_from_env(), **common, **extra),  # type: ignore[arg-type]
                sock,
                guarded,
                grace_s=GRACEFUL_SHUTDOWN_SECONDS,
            )
        else:
            freeze_imported()
            uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        if cleanup_metrics is not None:
            cleanup_metrics()


# glibc's mallopt() parameter for the number of malloc arenas (<malloc.h>: M_ARENA_MAX)
_M_ARENA_MAX = -8


def share_one_malloc_arena() -> None:
    """Make every thread of this process (and of workers forked from it) allocate from one arena.

    glibc gives threads arenas of their own (up to eight per core), and what is freed in
    an arena stays with the process. Uploads allocate MiB-sized buffers in whichever pooled
    thread runs them, so each arena ends up holding a few MiB (two workers, 8 concurrent
    40 MiB uploads after a minute of 1 MiB uploads: peak RSS 142 -> 122 MiB). Uploads/s do
    not change: the threads take turns on the GIL anyway. Without glibc this does nothing.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_ARENA_MAX, 1)
