"""Run real server processes on loopback for tests, and always stop them."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.forkserver import ForkedProcess, fork_server_for

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux; 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_EPHEMERAL_FLOOR = _ephemeral_floor()
_LOWEST = 20000
_handed_out: set[int] = set()
# Our own generator, seeded from the OS: a plugin that seeds `random` alike in every test
# worker cannot make two workers draw the same ports.
_random = random.Random()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, outside the ephemeral range.

    A port the kernel picks (bind to 0) comes from the range it also gives to outgoing
    connections: between picking it and the server binding it, any test's client socket
    may take it as its source port (seen in CI: a SeaweedFS listener that could not bind
    one of its thirteen ports). Below that range only listeners bind. Each parallel test
    worker (pytest-xdist's PYTEST_XDIST_WORKER, gw0, gw1, ...) picks from its own share of it:
    two workers' servers picking the same port between its check and its bind was seen in CI
    (a `brain-store dev` whose start-up poll was answered by another test's store). Never the
    same port twice in one process.
    """
    low, high = _worker_share(_LOWEST, _EPHEMERAL_FLOOR)
    if high - low >= 500:
        for _ in range(200):
            port = _random.randrange(low, high)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # an unusual range: let the kernel pick
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker_share(low: int, high: int) -> tuple[int, int]:
    """This test worker's part of the ports [low, high): the whole range outside pytest-xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0):
        return low, high
    index, parts = int(worker[2:]), int(count)
    size = (high - low) // parts
    return low + index * size, low + (index + 1) * size


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def console_script(name: str) -> str:
    """Path of one of our console scripts inside the running virtualenv."""
    candidate = VENV_BIN / name
    return str(candidate) if candidate.exists() else name


def run_command(argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, ...)`` from the repository root
    (``env``, as there, the whole environment; None: this process's); a command the fork server
    runs as a new process would (tests/support/forkserver.py) is forked from it."""
    full_env = dict(os.environ if env is None else env)
    if helper := fork_server_for(argv, full_env):
        return helper.run(argv, full_env, REPO_ROOT, timeout, input)
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO_ROOT,
                          input=input, check=False)


@dataclass
class ServerProcess:
    """A started server: its process, base URL and log file."""

    process: subprocess.Popen[bytes] | ForkedProcess
    base_url: str
    log_path: Path

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.log_path.read_text(errors="replace")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send a signal to the whole process group (uvicorn workers included)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop gracefully, then forcibly after a bounded wait."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


def _socket_inodes(port: int, *, state: str, remote_port: int | None = None) -> set[str]:
    """Inodes of the TCP sockets on local ``port`` in ``state`` (``0A`` listening, ``01``
    established), any address, optionally only those whose peer is on ``remote_port``: from /proc/net."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (len(fields) > 9 and fields[3] == state and int(fields[1].rsplit(":", 1)[1], 16) == port
                    and (remote_port is None or int(fields[2].rsplit(":", 1)[1], 16) == remote_port)):
                inodes.add(fields[9])
    return inodes


def group_pids(leader: int) -> list[int]:
    """The live processes of ``leader``'s process group (a server and its workers), from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == leader:  # field 5 of stat: the process group
            pids.append(int(entry.name))
    return pids


def _holders(group: int, inodes: set[str]) -> list[int]:
    """The processes of process group ``group`` holding a socket of ``inodes`` open."""
    holders = []
    for pid in group_pids(group):
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue  # gone meanwhile
        if any(link.startswith("socket:[") and link[8:-1] in inodes for link in links):
            holders.append(pid)
    return holders


def _listener_is_ours(port: int, group: int) -> bool:
    """Whether a process of process group ``group`` holds a socket listening on ``port``.

    A port chosen by free_port() may be taken by another test's server before ours binds it
    (most often when a test restarts a server on the port it had): then that server answers
    the health check while ours fails to start. True when /proc cannot tell.
    """
    if not Path("/proc/net/tcp").exists():
        return True
    return bool(_holders(group, _socket_inodes(port, state="0A")))


def connection_owner(group: int, server_port: int, client_port: int) -> int | None:
    """The pid of the process of process group ``group`` (a server and its workers) holding
    the server's end of the open loopback connection from ``client_port`` to ``server_port``:
    which worker accepted it. None when /proc does not show one process holding it.

    For tests only, from outside: the server adds nothing to its answers for this.
    """
    holders = _holders(group, _socket_inodes(server_port, state="01", remote_port=client_port))
    return holders[0] if len(holders) == 1 else None


def wait_for_http(url: str, process: subprocess.Popen[bytes] | ForkedProcess | None = None, timeout: float = 30.0) -> None:
    """Poll ``url`` until it answers 200; bounded in time, fails fast if the process died.

    With ``process`` (the leader of its own process group), the answer counts only once that
    group holds the listening socket: another test's server on the same port does not pass.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    port = httpx.URL(url).port
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with code {process.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                if process is None or port is None or _listener_is_ours(port, process.pid):
                    return
                last_error = RuntimeError(f"port {port} answers, but not from the process started")
        except httpx.HTTPError as exc:
            last_error = exc
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer 200 within {timeout}s ({last_error})")


@contextmanager
def run_server(
    argv: Sequence[str],
    *,
    port: int,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    health_path: str = "/health",
    timeout: float = 30.0,
) -> Iterator[ServerProcess]:
    """Start ``argv`` in its own process group, wait for ``health_path``, stop it on exit."""
    full_env = {**os.environ, **(env or {})}
    process: subprocess.Popen[bytes] | ForkedProcess
    if helper := fork_server_for(argv, full_env):
        process = helper.start(argv, full_env, REPO_ROOT, log_path)
    else:
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                list(argv), stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=REPO_ROOT, start_new_session=True
            )
    server = ServerProcess(process=process, base_url=f"http://127.0.0.1:{port}", log_path=log_path)
    try:
        try:
            wait_for_http(server.base_url + health_path, process, timeout)
        except Exception as exc:
            raise RuntimeError(f"{exc}\n--- server log ---\n{server.log()}") from exc
        yield server
    finally:
        server.stop()
