"""Huge headers, slow clients and too many connections, against real store and connector processes.

Both servers run behind the same guard (common/connection_guard.py), each started here with
short timeouts (2 s) so that the tests stay quick; the defaults are the same code with
longer numbers.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from common.connection_guard import HttpLimits, guarded_protocol
from connector.settings import ConnectorSettings
from store.settings import StoreSettings
from tests.support.processes import ServerProcess, console_script, free_port, run_server

TIMEOUT_S = 2
MAX_CONNECTIONS = 70
LIMITS = {
    "HTTP_HEADER_TIMEOUT_S": str(TIMEOUT_S),
    "HTTP_BODY_TIMEOUT_S": str(TIMEOUT_S),
    "HTTP_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
    "HTTP_MAX_HEADER_KB": "64",
}


def _store(tmp: Path, workers: int) -> Iterator[ServerProcess]:
    port = free_port()
    env = {"HOME": str(tmp), "STORE_QUIET": "1", **{"STORE_" + k: v for k, v in LIMITS.items()}}
    argv = [console_script("brain-store"), "serve", "--port", str(port), "--data", str(tmp / "data"), "--workers", str(workers)]
    with run_server(argv, port=port, log_path=tmp / "store.log", env=env, health_path="/health/ready") as server:
        yield server


def _connector(tmp: Path) -> Iterator[ServerProcess]:
    port = free_port()
    env = {
        "HOME": str(tmp),
        "CONNECTOR_STORE_URL": "http://127.0.0.1:9",  # never reached by these tests
        "CONNECTOR_IDP": "static",
        "CONNECTOR_STATE_DIR": str(tmp / "state"),
        "CONNECTOR_PORT": str(port),
        **{"CONNECTOR_" + k: v for k, v in LIMITS.items()},
    }
    with run_server([console_script("brain-connector"), "serve"], port=port, env=env, log_path=tmp / "connector.log",
                    health_path="/health/live") as server:
        yield server


@pytest.fixture(scope="module", params=["store", "store-2-workers", "connector"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp(request.param)
    if request.param == "connector":
        yield from _connector(tmp)
    else:
        yield from _store(tmp, 2 if request.param == "store-2-workers" else 1)


def _address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.base_url.removeprefix("http://").split(":")
    return host, int(port)


def _health(server: ServerProcess) -> str:
    return "/health/live" if "connector" in server.log_path.name else "/health/ready"


def _cpu_seconds(server: ServerProcess) -> float:
    """CPU time of the server's process group so far (workers included)."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == server.process.pid:  # process group id
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _quick_request(server: ServerProcess) -> float:
    started = time.monotonic()
    assert httpx.get(server.base_url + _health(server), timeout=10).status_code == 200
    return time.monotonic() - started


def test_oversized_header_is_refused_at_once_without_burning_cpu(server: ServerProcess) -> None:
    """64 MiB of one header streamed: 431 (or a closed connection) within a second, not seconds of CPU."""
    cpu_before = _cpu_seconds(server)
    answer = bytearray()
    sock = socket.create_connection(_address(server), timeout=10)

    def read() -> None:
        try:
            while chunk := sock.recv(65536):
                answer.extend(chunk)
        except OSError:
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = time.monotonic()
    sent = 0
    chunk = b"a" * 65536
    try:
        sock.sendall(f"GET {_health(server)} HTTP/1.1\r\nHost: x\r\nX-Filler: ".encode())
        while sent < 64 << 20:
            sock.sendall(chunk)
            sent += len(chunk)
        sock.sendall(b"\r\n\r\n")
    except OSError:
        pass  # refused and closed while we were still sending
    reader.join(timeout=10)
    elapsed = time.monotonic() - started
    sock.close()
    assert not reader.is_alive()
    assert sent < 64 << 20, "the server read the whole 64 MiB header"
    assert elapsed < 1.5, elapsed
    assert not answer or answer.startswith(b"HTTP/1.1 431 "), bytes(answer[:80])
    assert _cpu_seconds(server) - cpu_before < 0.5
    assert _quick_request(server) < 1.0


def test_header_just_under_the_limit_is_served(server: ServerProcess) -> None:
    resp = httpx.get(server.base_url + _health(server), headers={"X-Filler": "a" * 60_000}, timeout=10)
    assert resp.status_code == 200
    resp = httpx.get(server.base_url + _health(server), headers={"X-Filler": "a" * 70_000}, timeout=10)
    assert resp.status_code == 431


def _trickle(sock: socket.socket, data: bytes) -> bool:
    """Send ``data`` (b'' sends nothing); False once the server closed the connection."""
    try:
        if data:
            sock.send(data)
        sock.setblocking(False)
        try:
            return sock.recv(4096) != b""  # b"": closed; bytes: an answer (408) before closing
        except BlockingIOError:
            return True
        finally:
            sock.setblocking(True)
    except OSError:
        return False


def test_slow_headers_are_cut_off_while_other_clients_stay_fast(server: ServerProcess) -> None:
    slow = []
    for _ in range(50):
        sock = socket.create_connection(_address(server), timeout=5)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        slow.append(sock)
    started = time.monotonic()
    open_at: dict[int, float] = {}
    worst = 0.0
    try:
        while time.monotonic() - started < TIMEOUT_S + 4:
            for index, sock in enumerate(slow):
                if index not in open_at and not _trickle(sock, b"X"):
                    open_at[index] = time.monotonic() - started
            worst = max(worst, _quick_request(server))
            if len(open_at) == len(slow):
                break
            time.sleep(0.3)
    finally:
        for sock in slow:
            sock.close()
    assert len(open_at) == len(slow), f"{len(slow) - len(open_at)} slow connections still open"
    assert max(open_at.values()) < TIMEOUT_S + 2.5, open_at
    assert min(open_at.values()) > TIMEOUT_S - 1, open_at  # not before the timeout
    assert worst < 1.5, worst


def test_silent_connection_is_closed_after_the_header_timeout(server: ServerProcess) -> None:
    sock = socket.create_connection(_address(server), timeout=TIMEOUT_S + 4)
    started = time.monotonic()
    try:
        assert sock.recv(100) == b""  # closed without an answer: nothing was asked
    finally:
        sock.close()
    assert TIMEOUT_S - 1 < time.monotonic() - started < TIMEOUT_S + 2


def test_slow_body_is_cut_off(server: ServerProcess) -> None:
    """A body announced as 1 MB that trickles in a byte at a time is closed after the body timeout."""
    sock = socket.create_connection(_address(server), timeout=5)
    sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
    started = time.monotonic()
    closed_at = None
    try:
        while time.monotonic() - started < TIMEOUT_S + 5:
            if not _trickle(sock, b" "):
                closed_at = time.monotonic() - started
                break
            time.sleep(0.2)
    finally:
        sock.close()
    assert closed_at is not None, "the trickling body was never cut off"
    assert closed_at < TIMEOUT_S + 2.5


def test_connection_cap_answers_503_and_frees_up(server: ServerProcess) -> None:
    # Each worker process has its own cap, so two workers take up to twice as many.
    workers = 2 if "store-2-workers" in str(server.log_path) else 1
    held = [socket.create_connection(_address(server), timeout=5) for _ in range(MAX_CONNECTIONS * workers)]
    try:
        refused = 0
        for _ in range(4 * workers):
            extra = socket.create_connection(_address(server), timeout=5)
            started = time.monotonic()
            extra.sendall(f"GET {_health(server)} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answer = extra.recv(200)
            extra.close()
            assert time.monotonic() - started < 1.0
            refused += answer.startswith(b"HTTP/1.1 503 ")
        assert refused >= 1
    finally:
        for sock in held:
            sock.close()
    # the held connections are gone: served again
    deadline = time.monotonic() + 5
    while True:
        try:
            if httpx.get(server.base_url + _health(server), timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_guard_bench_measures_both_protocols() -> None:
    """bench/guard_bench.py (the guard's cost per request) keeps working."""
    import importlib.util

    import uvloop
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    spec = importlib.util.spec_from_file_location("guard_bench", Path(__file__).parents[2] / "bench" / "guard_bench.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for protocol in (HttpToolsProtocol, guarded_protocol(HttpLimits())):
        assert uvloop.run(bench.cpu_per_request(protocol, 50)) > 0


def test_settings_carry_the_limits() -> None:
    assert StoreSettings.from_env({}).http_limits == HttpLimits()
    env = {"CONNECTOR_STORE_URL": "http://127.0.0.1:9", **{"CONNECTOR_" + k: v for k, v in LIMITS.items()}}
    limits = ConnectorSettings.load(env).http_limits
    assert (limits.header_timeout_s, limits.max_connections, limits.max_header_bytes) == (2, 70, 64 * 1024)
    store = StoreSettings.from_env({"STORE_" + k: v for k, v in LIMITS.items()})
    assert store.http_limits == limits
    assert StoreSettings.from_env(store.to_env()) == store
    with pytest.raises(ValueError):
        HttpLimits(max_connections=-1)
