"""`brain-store dev` as a newcomer runs it: a subprocess that prints URLs and a token; an MCP client
(the official SDK) signs in through the connector's OAuth flow, memorizes and recalls; SIGTERM stops
both servers; a second start reuses the saved token."""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from tests.connector.oauth.test_e2e_mcp_client import MemoryStorage, oauth_provider
from tests.support.processes import REPO_ROOT, console_script, free_port, run_command

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]
START_TIMEOUT_S = 120.0


@dataclass
class DevRun:
    process: subprocess.Popen[str]
    lines: list[str]
    store_url: str
    mcp_url: str
    token: str


def _reader(stream: object, out: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        out.put(line.rstrip("\n"))
    out.put(None)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# A newcomer's shell after `make dev`: the virtualenv is not activated, so its commands are not on PATH.
NEWCOMER_PATH = os.pathsep.join(part for part in os.environ.get("PATH", os.defpath).split(os.pathsep)
                                if part and not (Path(part) / "brain-store").exists())


def banner_command(run: DevRun, name: str) -> list[str]:
    """The banner's `user add` command as a shell splits it, NAME replaced by ``name``."""
    line = next(line.strip() for line in run.lines if " user add NAME " in line)
    return shlex.split(line.replace("NAME", name))


@contextmanager
def brain_store_dev(data: Path, store_port: int, connector_port: int, *extra: str,
                    env: dict[str, str] | None = None) -> Iterator[DevRun]:
    """Start `brain-store dev` (in ``env``, else this environment), wait for its banner, yield what it
    printed; always stop it."""
    process = subprocess.Popen(
        [console_script("brain-store"), "dev", "--data", str(data), "--port", str(store_port),
         "--connector-port", str(connector_port), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT, start_new_session=True,
        env={**(os.environ if env is None else env), "STORE_BACKEND": "local"},
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        fields: dict[str, str] = {}
        while not seen or not seen[-1].startswith("Ctrl-C stops"):
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "brain-store dev exited early:\n" + "\n".join(seen)
            seen.append(line)
            match = re.match(r"\s*(store URL|MCP URL|token):\s+(\S+)$", line)
            if match:
                fields[match.group(1).split()[0].lower()] = match.group(2)
        yield DevRun(process, seen, fields["store"], fields["mcp"], fields["token"])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                raise


async def test_dev_prints_urls_token_and_a_client_signs_in_memorizes_and_recalls(tmp_path: Path) -> None:
    data = tmp_path / "dev-data"
    store_port, connector_port = free_port(), free_port()
    storage = MemoryStorage()
    attempts: list[str] = []
    newcomer = {**os.environ, "PATH": NEWCOMER_PATH}
    with brain_store_dev(data, store_port, connector_port, env=newcomer) as run:
        assert run.store_url == f"http://127.0.0.1:{store_port}"
        assert run.mcp_url == f"http://127.0.0.1:{connector_port}/mcp"
        assert re.fullmatch(r"bst_[A-Za-z0-9_-]{43}", run.token)
        text = "\n".join(run.lines)
        assert f"claude mcp add --transport http brain {run.mcp_url}" in text
        assert "Claude Desktop" in text
        # The banner names the data and the exact command adding a user to this store, which works.
        assert f"store data: {data.resolve() / 'store'}" in text
        # In a shell without the virtualenv on PATH, it names the command by its path (a bare
        # `brain-store` was "command not found" there) and runs as printed.
        argv = banner_command(run, "newcomer")
        assert argv[1:] == ["user", "add", "newcomer", "--data", str(data.resolve() / "store")]
        assert Path(argv[0]).is_absolute() and Path(argv[0]).samefile(console_script("brain-store"))
        added = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True, env=newcomer)
        new_token = added.stdout.strip().splitlines()[-1]
        assert httpx2.get(run.store_url + "/auth/me", headers={"Authorization": f"Bearer {new_token}"}).status_code == 200
        # The token is kept private on disk so a restart keeps client sign-ins working.
        token_file = data / "demo-token"
        assert token_file.read_text().strip() == run.token
        assert token_file.stat().st_mode & 0o777 == 0o600

        provider = oauth_provider(run.mcp_url, run.token, storage, attempts)
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60)) as http:
            async with Client(streamable_http_client(run.mcp_url, http_client=http)) as client:
                saved = await client.call_tool("brain_memorize", {
                    "content": "We deploy the payments service with blue-green releases.",
                    "tags": ["deploy", "payments"]})
                assert not saved.is_error, saved
                found = await client.call_tool("brain_recall", {"query": "payments deploy releases"})
                assert not found.is_error, found
                assert "blue-green" in str(found.structured_content or found.content)
        assert len(attempts) == 1

        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(timeout=60) == 0
    assert not _listening(store_port) and not _listening(connector_port)

    # A second start reuses the saved token, and the earlier OAuth session still works.
    with brain_store_dev(data, store_port, connector_port) as again:
        assert again.token == run.token
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60)) as http:
            async with Client(streamable_http_client(again.mcp_url, http_client=http)) as client:
                found = await client.call_tool("brain_recall", {"query": "blue-green payments"})
                assert "blue-green" in str(found.structured_content or found.content)
        assert len(attempts) == 1, "no new sign-in after a restart"


@pytest.mark.parametrize("which", ["--port", "--connector-port"])
def test_dev_says_which_port_is_in_use_before_starting(which: str, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run([console_script("brain-store"), "dev", "--data", str(tmp_path / "d"), which, str(port)],
                              capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
        took = time.monotonic() - started
    assert done.returncode == 1
    assert f"port {port} is in use" in done.stderr and "store URL" not in done.stdout
    assert "Traceback" not in done.stderr and not (tmp_path / "d").exists()
    assert took < 15, took


def test_make_dev_passes_extra_arguments() -> None:
    done = subprocess.run(["make", "-n", "-o", ".venv/.installed", "dev", "ARGS=--port 9000 --connector-port 9001"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "brain-store dev --data .dev-data --port 9000 --connector-port 9001" in done.stdout


def test_check_against_the_dev_store_passes_in_under_30_seconds(tmp_path: Path) -> None:
    with brain_store_dev(tmp_path / "dev-data", free_port(), free_port()) as run:
        started = time.monotonic()
        done = subprocess.run([console_script("brain-store"), "check", "--url", run.store_url, "--token", run.token],
                              capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
        took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^\[1/\d+\] PASS ", done.stderr, re.M)  # progress, one line per check
    assert "rate-limited" not in done.stderr  # the dev store does not pace its one user
    assert took < 30, took


async def test_dev_seeds_example_memories_once_and_a_second_run_on_the_same_data_is_refused(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from connector.engine.recall.exact import recall
    from tests.connector.conftest import brains_of, download_brain

    data = tmp_path / "dev-data"
    with brain_store_dev(data, free_port(), free_port()) as run:
        banner = "\n".join(run.lines)
        assert "3 example memories" in banner and "--no-examples" in banner
        [record] = brains_of(run.store_url, run.token)
        brain, _ = download_brain(run.store_url, run.token, record["id"])
        # Written as any client writes: a whole brain recall (the reference's scoring) reads.
        titles = {hit["title"] for hit in recall(brain, "deploys Thursdays team", now=datetime.now(UTC))}
        assert "Example: the team deploys on Thursdays" in titles

        # A second `brain-store dev` on the same data: refused at once, naming the running one,
        # not moved to other ports beside it.
        started = time.monotonic()
        second = subprocess.run([console_script("brain-store"), "dev", "--data", str(data)],
                                capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
        assert second.returncode == 1 and time.monotonic() - started < 15
        assert f"another `brain-store dev` is already running with the data in {data.resolve()}" in second.stderr
        assert f"(process {run.process.pid})" in second.stderr
        assert "store URL" not in second.stdout and "Traceback" not in second.stderr
        assert brains_of(run.store_url, run.token)[0]["checksum"] == record["checksum"]

    # Started again: the examples are not added twice; --no-examples leaves a new brain empty.
    with brain_store_dev(data, free_port(), free_port()) as again:
        assert "example memories" not in "\n".join(again.lines)
        assert brains_of(again.store_url, again.token)[0]["checksum"] == record["checksum"]
    with brain_store_dev(tmp_path / "bare", free_port(), free_port(), "--no-examples") as bare:
        assert "example memories" not in "\n".join(bare.lines)
        assert brains_of(bare.store_url, bare.token)[0]["checksum"] is None


def _time_wait_on(port: int) -> None:
    """Leave a connection of a server on ``port`` in TIME_WAIT, as a Ctrl-C'd server leaves
    its closed keep-alive connections: the server side closes first."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's active close: its end goes to TIME_WAIT
        client.recv(1)
        client.close()


def _in_time_wait(port: int) -> bool:
    """Whether /proc/net/tcp lists a TIME_WAIT (state 06) connection whose local port is ``port``."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(int(row.split()[1].split(":")[1], 16) == port and row.split()[3] == "06" for row in rows)


def test_a_restart_comes_back_on_the_same_ports_while_the_old_ones_are_in_time_wait(tmp_path: Path) -> None:
    store_port, connector_port = free_port(), free_port()
    for port in (store_port, connector_port):
        _time_wait_on(port)
        assert _in_time_wait(port)
    with brain_store_dev(tmp_path / "d", store_port, connector_port) as run:
        assert run.store_url == f"http://127.0.0.1:{store_port}"
        assert run.mcp_url == f"http://127.0.0.1:{connector_port}/mcp"
        assert httpx2.get(run.mcp_url.removesuffix("/mcp") + "/health").status_code == 200


def test_the_default_port_in_use_stops_dev_naming_it_and_the_way_out(tmp_path: Path) -> None:
    from cli.store.dev import pick_port

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(Exception) as refused:
            pick_port(None, port, "--port")
    message = str(refused.value)
    assert f"port {port} is in use" in message and 'make dev ARGS="--port N"' in message
    _time_wait_on(port)  # only TIME_WAIT left: the same port is taken again, not another one
    assert _in_time_wait(port) and pick_port(None, port, "--port") == port


def test_the_same_port_for_both_servers_is_said_as_such(tmp_path: Path) -> None:
    # The port is free: "in use by another program" sent the user looking for a program that does not exist.
    port = free_port()
    done = run_command([console_script("brain-store"), "dev", "--data", str(tmp_path / "d"), "--port", str(port),
                        "--connector-port", str(port)], timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"port {port} is also the store's port (--port)" in done.stderr and "another --connector-port" in done.stderr
    assert "another program" not in done.stderr and not (tmp_path / "d").exists()


def test_user_add_says_which_store_and_the_banner_command_reaches_the_dev_store(tmp_path: Path) -> None:
    from tests.connector.webapp.conftest import csrf_of

    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("STORE_")}
    env["HOME"] = str(home)

    def web_sign_in(base: str, token: str) -> httpx2.Response:
        with httpx2.Client(base_url=base, timeout=30) as http:
            page = http.get("/app/signin")
            return http.post("/app/signin", data={"csrf": csrf_of(page.text), "token": token, "access": "write"})

    with brain_store_dev(tmp_path / ".dev-data", free_port(), free_port()) as run:
        base = run.mcp_url.removesuffix("/mcp")
        # As the README's table shows it, from the directory `make dev` runs in: another store,
        # and the command says so, naming the dev store's --data.
        elsewhere = subprocess.run([console_script("brain-store"), "user", "add", "carol"], cwd=tmp_path, env=env,
                                   capture_output=True, text=True, timeout=60)
        assert elsewhere.returncode == 0, elsewhere.stderr
        assert f"in {home / '.brain-store'}" in elsewhere.stdout
        assert "note: `make dev` is running here" in elsewhere.stderr
        assert "add --data .dev-data/store" in elsewhere.stderr
        refused = web_sign_in(base, elsewhere.stdout.strip().splitlines()[-1])
        assert refused.status_code == 401 and "A token works only with the store that made it" in refused.text

        # The banner's command, as printed: the running store knows the new user at once.
        added = subprocess.run(banner_command(run, "dave"), cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=60)
        assert added.returncode == 0 and "note:" not in added.stderr, added.stderr
        assert web_sign_in(base, added.stdout.strip().splitlines()[-1]).status_code == 303


def test_the_demo_users_address_taken_by_another_user_is_said_in_one_line(tmp_path: Path) -> None:
    import click

    from cli.store.dev import demo_token
    from store.auth.users import UserRegistry

    store_dir = tmp_path / "store"
    store_dir.mkdir(mode=0o700)
    UserRegistry(store_dir).add("erin", "Demo@localhost")
    with pytest.raises(click.ClickException) as refused:
        demo_token(store_dir, tmp_path / "token")
    assert "cannot create the demo user" in refused.value.message and "'erin'" in refused.value.message
    assert not (tmp_path / "token").exists()
