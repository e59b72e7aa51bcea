"""Listening sockets and forked worker processes for `serve --workers N` (store and connector).

One process binds the port, imports the web stack and forks; each worker builds its own
application after the fork and serves on a socket of its own (SO_REUSEPORT), while a
table in shared memory keeps long-lived connections balanced (``balance.py``).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import click

log = logging.getLogger("serving")


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


def serve_forked(
    workers: int,
    make_config: Callable[..., Any],
    sock: socket.socket,
    base: type[Any],
    *,
    grace_s: float,
    own_sockets: Sequence[socket.socket] = (),
) -> None:
    """Serve from ``workers`` processes: this one on ``sock`` and ``workers - 1`` forks.

    Each fork binds its own socket to ``sock``'s address (SO_REUSEPORT, see
    :func:`bind_listener`) so the kernel balances connections across the processes, and
    a worker holding more than its share of keep-alive connections closes some
    (``cli/serving/balance.py``). ``make_config(**extra)`` builds one process's uvicorn config.

    Why not uvicorn's supervisor: it adds a supervisor process and a multiprocessing
    resource tracker (about 45 MB together) and re-imports everything in each worker.
    Here the web stack is imported once before forking (pages shared copy-on-write),
    every process builds its own app after the fork, and the first process doubles as
    the leader: a stop signal it gets is passed on to the others once. ``base`` is the HTTP
    protocol the workers' balancing protocol extends (the guarded one). ``make_config(slot,
    **extra)`` gets the worker's slot (0 for the leader). ``own_sockets``, when given, holds
    one more listening socket per slot (the connector's unix sockets for requests its
    workers pass to each other): each worker serves its own and closes the others, so a
    dead worker's socket refuses connections. Every process
    shuts down gracefully (in-flight requests finish, bounded by the graceful timeout);
    repeated signals do not turn that into an abrupt exit. The leader waits for the
    others and kills what is left ``grace_s`` (how long a worker may take to stop: the
    uvicorn graceful timeout, and the application's own shutdown) plus five seconds after
    it stopped. Dead workers are not restarted.
    """
    import uvicorn

    from cli.serving.balance import ConnectionTable, balanced_protocol

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
                kept = _keep_own(own_sockets, slot)  # before building the app: a slow start holds no other's socket
                own = bind_listener(*sock.getsockname()[:2], shared_port=True)
                sock.close()
                _Worker(make_config(slot, http=protocol)).run(sockets=[own, *kept])
            except BaseException:  # noqa: BLE001 - report and exit non-zero
                log.exception("worker failed")
                code = 1
            finally:
                table.leave()
                os._exit(code)
        children.append(pid)
    table.join(0)
    kept = _keep_own(own_sockets, 0)
    try:
        _Leader(make_config(0, http=protocol)).run(sockets=[sock, *kept])
    finally:
        table.leave()
        _reap(children, grace_s + 5)


def _keep_own(sockets: Sequence[socket.socket], slot: int) -> list[socket.socket]:
    """Close the sockets of the other slots (this process's copies); the one of ``slot``, if any."""
    for index, other in enumerate(sockets):
        if index != slot:
            other.close()
    return [sockets[slot]] if sockets else []


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
