"""`brain-store dev`: a local store and MCP connector with a demo user, for trying things out.

Both servers run as child processes on 127.0.0.1 (the store on local disk under
``DATA/store``, the connector with the static identity provider and its OAuth state
under ``DATA/connector``); their logs go to ``DATA/*.log`` so the terminal shows only
what a newcomer needs: the URLs, the token and how to connect a client.

The demo token is kept in ``DATA/demo-token`` (0600) so that sign-ins made by a
client survive a restart; it is checked against the users file at each start and
replaced when it no longer works (e.g. after ``brain-store user rotate demo``).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import click

from cli.store.dev_examples import seed_examples
from cli.store.runner import settings_from_cli

DEFAULT_STORE_PORT = 8787
DEFAULT_CONNECTOR_PORT = 8788
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
TOKEN_FILE = "demo-token"
LOCK_FILE = "dev.lock"
DEV_RATE_LIMITS = {"STORE_RATE_REQUESTS_PER_MIN": "6000", "STORE_RATE_UPLOADS_PER_MIN": "600"}


def _port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now. Probed as the servers bind (uvicorn and
    cli/serving set SO_REUSEADDR): a port whose last connections are in TIME_WAIT after a
    Ctrl-C is free for them, so a restart comes back on the same URLs."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(given: int | None, preferred: int, option: str, taken: Sequence[int] = ()) -> int:
    """The given port, else ``preferred``: the URLs stay the same across runs (clients keep
    the MCP URL they were given). A port really in use is a ``click.ClickException`` naming it
    and ``option``, the flag that picks another; it never silently moves. ``taken``: the store's
    port, when picking the connector's."""
    port = given or preferred
    hint = f"make dev ARGS=\"{option} N\"" if not given else f"another {option}"
    if port in taken:
        # Free a moment ago, but the other server of this run gets it: no other program to stop.
        raise click.ClickException(f"port {port} is also the store's port (--port); the store and the connector "
                                   f"need one each, so choose {hint}.")
    if not _port_is_free(port):
        raise click.ClickException(
            f"port {port} is in use by another program on 127.0.0.1, so `brain-store dev` did not start "
            f"(it keeps its URLs the same on every run). Stop that program, or choose {hint}; "
            "`ss -ltnp` shows who holds it.")
    return port


def _console_script(name: str) -> str:
    """Our console script next to the running interpreter (the venv), else from PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise click.ClickException(f"cannot find the {name!r} command (is the package installed?)")
    return found


def _command_as_typed(name: str) -> str:
    """Our command ``name`` as a newcomer types it in a shell: its bare name when their PATH finds this
    very one (installed, or the venv activated), else its full path (`make dev` runs `.venv/bin/brain-store`,
    and a bare `brain-store` in the banner was "command not found" in a fresh terminal)."""
    script = Path(_console_script(name)).absolute()
    found = shutil.which(name)
    if found is not None and Path(found).resolve() == script.resolve():
        return name
    return shlex.quote(str(script))


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a fresh 0600 file, replacing ``path`` atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
    os.replace(tmp, path)


def demo_token(store_dir: Path, token_file: Path) -> str:
    """The demo user's token: the saved one while it still works, else a new one (saved 0600)."""
    from store.auth.users import EmailInUse, UserRegistry
    from store.service import BrainService
    from store.storage.local import LocalBackend

    settings = settings_from_cli(data_dir=store_dir, backend="local")
    registry = UserRegistry(store_dir)
    demo = registry.find("demo")
    saved = token_file.read_text().strip() if token_file.is_file() else ""
    if demo is not None and saved and (owner := registry.by_token(saved)) is not None and owner.id == demo.id:
        token = saved
    else:
        if demo is None:
            try:
                demo, token = registry.add("demo", "demo@localhost")
            except EmailInUse as exc:  # a user added to the dev store by hand took the demo's address
                raise click.ClickException(f"cannot create the demo user in {store_dir}: {exc}") from None
        else:
            demo, token = registry.rotate("demo")
        _write_private(token_file, token)
    BrainService(settings, LocalBackend(store_dir, fsync=settings.fsync)).ensure_default(demo.id)
    return token


def hold_lock(data: Path) -> int:
    """Lock ``data`` for this run (``DATA/dev.lock``, flock); ``click.ClickException`` naming the
    running one when another `brain-store dev` holds it. Returns the descriptor (kept open)."""
    fd = os.open(data / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip()
        os.close(fd)
        raise click.ClickException(
            f"another `brain-store dev` is already running with the data in {data}"
            + (f" (process {holder})" if holder.isdigit() else "")
            + ". Use that one (its banner has the URLs and the token), stop it with Ctrl-C in its terminal, "
            "or start a separate one with another --data directory."
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _wait_ready(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    """Poll ``url`` until 200, failing with the child's log if it exits or takes too long."""
    import httpx

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise click.ClickException(f"a server exited during start-up; its log:\n{_tail(log_path)}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise click.ClickException(f"{url} did not answer within {START_TIMEOUT_S:.0f}s; log:\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        os.chmod(log_path, 0o600)
        # Own process group: a Ctrl-C in the terminal reaches only us, and we stop the
        # children in order (connector first, then the store, which finishes uploads).
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT_S)
    except ProcessLookupError:
        pass


class _Stop(Exception):
    """Raised by the signal handler to leave the wait loop."""


def _on_signal(signum: int, frame: object) -> None:
    raise _Stop()


def instructions(store_url: str, mcp_url: str, token: str, data: Path, examples: int | None = None) -> str:
    """What a newcomer reads after start-up (the test parses the first lines); ``examples``:
    how many example memories were just added (None: skipped with --no-examples)."""
    store_dir = shlex.quote(str(data / "store"))
    if examples:
        seeded = (f"\nThe demo brain has {examples} example memories to try recall on (forget them any time; "
                  "start with --no-examples to skip them on a new --data directory).\n")
    else:
        seeded = ""
    return f"""
brain-store dev is running (data in {data}; logs in {data}/store.log and {data}/connector.log)
{seeded}
  store URL:  {store_url}
  MCP URL:    {mcp_url}
  token:      {token}
  store data: {data / "store"}

More users (the running store sees them at once; each command prints the new token):
  {_command_as_typed("brain-store")} user add NAME --data {store_dir}

Claude Code:
  claude mcp add --transport http brain {mcp_url}
  then run /mcp in Claude Code, choose "brain", authenticate, and paste the token on the sign-in page.

Claude Desktop / claude.ai (Settings > Connectors > Add custom connector):
  URL {mcp_url}, then sign in with the token above. Hosted clients reach the connector
  from the internet, so they need it on a public HTTPS name (see docs/self-hosting.md);
  this loopback URL works for clients running on this machine.

In a browser: {mcp_url.removesuffix("/mcp")}/app (sign in with the token above).

Ctrl-C stops both servers.
""".strip("\n")


@click.command()
@click.option("--data", "data", type=click.Path(path_type=Path), default=Path(".dev-data"), show_default=True,
              help="Directory for the local store, the connector's state and the logs.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help=f"Store port [default {DEFAULT_STORE_PORT}; in use: said, and nothing starts].")
@click.option("--connector-port", type=click.IntRange(1, 65535), default=None,
              help=f"Connector port [default {DEFAULT_CONNECTOR_PORT}; in use: said, and nothing starts].")
@click.option("--no-examples", is_flag=True,
              help="Do not put example memories in the demo brain (they are added only while it is empty).")
def dev(data: Path, port: int | None, connector_port: int | None, no_examples: bool) -> None:
    """Run a local store and MCP connector on 127.0.0.1 with a demo user; Ctrl-C stops both.

    On its first start the demo brain gets a few example memories (see --no-examples).
    Only one `brain-store dev` runs on one --data directory: a second one is refused."""
    data = data.expanduser().resolve()
    # A run already on this data directory is said first (not moved to other ports beside it).
    lock = hold_lock(data) if data.is_dir() else None
    # Both ports next: a port in use is said at once, before anything is created or started.
    store_port = pick_port(port, DEFAULT_STORE_PORT, "--port")
    mcp_port = pick_port(connector_port, DEFAULT_CONNECTOR_PORT, "--connector-port", taken=(store_port,))
    store_dir, state_dir = data / "store", data / "connector"
    for directory in (data, store_dir, state_dir):
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if lock is None:
        lock = hold_lock(data)
    token = demo_token(store_dir, data / TOKEN_FILE)

    store_url = f"http://127.0.0.1:{store_port}"
    connector_url = f"http://127.0.0.1:{mcp_port}"
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # One person on loopback: the per-user limits are raised (unless set) so that trying
    # things, e.g. `brain-store check` against the dev store, is not paced like a public server.
    # The store listens on loopback only, so trusting loopback proxies lets the connector
    # name the person signing in (their wrong tokens count against them, not the connector).
    # Both answer only for loopback names (421 otherwise): a page on another name that is made to
    # resolve to 127.0.0.1 (DNS rebinding) cannot use them with the demo user's sign-in.
    store_env = {**DEV_RATE_LIMITS, "STORE_TRUST_PROXY": "loopback", **base_env,
                 "STORE_BACKEND": "local", "STORE_DATA_DIR": str(store_dir), "STORE_ALLOWED_HOSTS": "localhost"}
    connector_env = {
        **base_env,
        "CONNECTOR_IDP": "static",
        "CONNECTOR_STORE_URL": store_url,
        "CONNECTOR_STATE_DIR": str(state_dir),
        "CONNECTOR_HOST": "127.0.0.1",
        "CONNECTOR_PORT": str(mcp_port),
        "CONNECTOR_PUBLIC_URL": "",  # the URL comes from the request: loopback only
        "CONNECTOR_ALLOWED_HOSTS": "localhost",
    }

    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    store = connector = None
    try:
        store = _start([_console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", str(store_port),
                        "--data", str(store_dir)], store_env, data / "store.log")
        # Both start at once (start-up is mostly imports); the connector only needs the store per request.
        connector = _start([_console_script("brain-connector"), "serve", "--host", "127.0.0.1",
                            "--port", str(mcp_port)], connector_env, data / "connector.log")
        _wait_ready(store_url + "/health/ready", store, data / "store.log")
        _wait_ready(connector_url + "/health/ready", connector, data / "connector.log")
        examples = None if no_examples else seed_examples(store_url, token)
        click.echo(instructions(store_url, connector_url + "/mcp", token, data, examples))
        sys.stdout.flush()
        while True:
            for name, process in (("store", store), ("connector", connector)):
                if process.poll() is not None:
                    raise click.ClickException(
                        f"the {name} stopped unexpectedly (exit {process.returncode}); see {data}/{name}.log"
                    )
            time.sleep(0.5)
    except _Stop:
        click.echo("stopping...")
    finally:
        # Ignore further Ctrl-C while stopping, so the children always get stopped.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stop(connector)
        _stop(store)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(lock)  # releases the lock: the next `brain-store dev` may start
    click.echo("stopped.")
