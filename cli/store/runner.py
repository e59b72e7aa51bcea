"""Start the store under uvicorn (shared by ``serve`` and ``dev``)."""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from common.connection_guard import guarded_protocol
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
    from common.oidc import OidcConfig, OidcConfigError

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
    from store.storage.factory import prepare_storage
    from store.upload import upload_threads

    check_oidc(settings)
    share_one_malloc_arena()  # first, before any thread exists
    # the automatic number depends on how many workers share the cores: fixed here, for all of them
    settings = dataclasses.replace(settings, upload_threads=upload_threads(settings.upload_threads, workers))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        prepare_storage(settings)  # crash recovery; on S3 also the conditional-write probe
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
    click.echo(f"listening on http://{host}:{port}")
    if announce:
        click.echo(announce)
    sys.stdout.flush()  # visible at once even when stdout is a pipe or a file
    try:
        if workers > 1:
            serve_forked(workers, lambda **extra: uvicorn.Config(app_from_env(), **common, **extra), sock, guarded)  # type: ignore[arg-type]
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


def freeze_imported() -> None:
    """Move every object alive now (modules, the app, settings) out of the cyclic GC's sight.

    They live as long as the process; without this each full collection walks all of
    them again, a pause that lands on whichever request happens to trigger it.
    """
    gc.collect()
    gc.freeze()


def bind_listener(host: str, port: int, *, shared_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` (uvicorn makes it listen); a clean CLI error if taken.

    ``shared_port`` sets SO_REUSEPORT so that every worker process can bind a socket of its
    own to the same port: the kernel then spreads new connections evenly over them. With one
    socket shared by all workers, whichever process wakes first takes the connection, and a
    burst of keep-alive connections was seen split 7 / 25 between two workers. Linux only
    lets sockets of the same user join such a group.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve_forked(workers: int, make_config: Callable[..., Any], sock: socket.socket, base: type[Any]) -> None:
    """Serve from ``workers`` processes: this one on ``sock`` and ``workers - 1`` forks.

    Each fork binds its own socket to ``sock``'s address (SO_REUSEPORT, see
    :func:`bind_listener`) so the kernel balances connections across the processes, and
    a worker holding more than its share of keep-alive connections closes some
    (``cli/store/balance.py``). ``make_config(**extra)`` builds one process's uvicorn config.

    Why not uvicorn's supervisor: it adds a supervisor process and a multiprocessing
    resource tracker (about 45 MB together) and re-imports everything in each worker.
    Here the web stack is imported once before forking (pages shared copy-on-write),
    every process builds its own app after the fork, and the first process doubles as
    the leader: a stop signal it gets is passed on to the others once. ``base`` is the HTTP
    protocol the workers' balancing protocol extends (the guarded one). Every process
    shuts down gracefully (in-flight requests finish, bounded by the graceful timeout);
    repeated signals do not turn that into an abrupt exit. The leader waits for the
    others and kills what is left after the grace period. Dead workers are not restarted.
    """
    import uvicorn

    from cli.store.balance import ConnectionTable, balanced_protocol

    children: list[int] = []
    table = ConnectionTable(workers)  # shared with the forks: made before them
    protocol = balanced_protocol(table, base)
    freeze_imported()  # and shared with the workers copy-on-write: GC bookkeeping would copy those pages

    class _Worker(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # Graceful only: later signals do not force an abrupt exit, and the signal is
            # not re-raised after shutdown (the leader still has to wait for the others).
            self.should_exit = True

    class _Leader(_Worker):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:
                for pid in children:
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            super().handle_exit(sig, frame)

    for slot in range(1, workers):
        pid = os.fork()
        if pid == 0:  # worker: serve until told to stop, never return into the CLI
            code = 0
            try:
                table.join(slot)
                own = bind_listener(*sock.getsockname()[:2], shared_port=True)
                sock.close()
                _Worker(make_config(http=protocol)).run(sockets=[own])
            except BaseException:  # noqa: BLE001 - report and exit non-zero
                logging.getLogger("store").exception("worker failed")
                code = 1
            finally:
                table.leave()
                os._exit(code)
        children.append(pid)
    table.join(0)
    try:
        _Leader(make_config(http=protocol)).run(sockets=[sock])
    finally:
        table.leave()
        _reap(children, GRACEFUL_SHUTDOWN_SECONDS + 5)


def _reap(children: list[int], timeout: float) -> None:
    """Ask the workers to stop, wait for them, kill those still running after ``timeout``."""
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    waiting = set(children)
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                waiting.discard(pid)
        time.sleep(0.05)
    for pid in waiting:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
