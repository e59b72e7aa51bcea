"""Caddy as a round-robin load balancer on loopback, for tests of replicas behind it."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.processes import REPO_ROOT, ServerProcess, run_server
from tests.support.tools import missing_tool


def caddy_binary() -> str:
    """The caddy binary (the test skips, or fails on CI, when it is missing)."""
    caddy = shutil.which("caddy")
    if caddy is None:
        missing_tool("the caddy binary is not installed (apt-get install caddy; .ci/run installs it on CI)")
    return caddy


# Request bodies up to this size are read whole before they go upstream, as in deploy/Caddyfile*
# (request_buffers there): streamed, Caddy may cut an answer mid-body (docs/replicas.md, "Caddy").
# Above every MCP request the connector accepts (1 MiB) and every form.
REQUEST_BUFFER_BYTES = 2 * 1024 * 1024


@functools.cache
def caddy_version(caddy: str) -> tuple[int, int]:
    """``(major, minor)`` of the ``caddy`` binary (Debian's is 2.6)."""
    found = re.search(r"v?(\d+)\.(\d+)", subprocess.run([caddy, "version"], capture_output=True, text=True,
                                                         timeout=30).stdout)
    return (int(found.group(1)), int(found.group(2))) if found else (2, 0)


def request_buffering(version: tuple[int, int]) -> str:
    """The reverse_proxy lines that read request bodies whole before passing them on, for Caddy
    ``version``. Before 2.8 a bounded buffer is no use: a body shorter than the bound was still
    streamed (its last read went to the client's connection), so those versions buffer without
    bound (``buffer_requests`` until 2.6, ``request_buffers unlimited`` in 2.7); tests only."""
    if version < (2, 7):
        return "\t\tbuffer_requests\n"
    if version < (2, 8):
        return "\t\trequest_buffers unlimited\n"
    return f"\t\trequest_buffers {REQUEST_BUFFER_BYTES}\n"


def for_version(caddyfile: str, version: tuple[int, int]) -> str:
    """A Caddyfile of deploy/ (written for the current Caddy) in the syntax of an older ``version``,
    to validate it with the Caddy at hand: its ``request_buffers`` lines as ``request_buffering``."""
    if version >= (2, 8):
        return caddyfile
    return re.sub(r"^[ \t]*request_buffers [^\n]*\n", lambda _: request_buffering(version), caddyfile,
                  flags=re.MULTILINE)


def run_caddy_on_deploy(command: str, name: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``caddy <command>`` (validate, adapt) on deploy/``name`` with example host names, in the syntax
    of the Caddy at hand (deploy/ is written for the image's, the current one; Debian's is older)."""
    caddy = caddy_binary()
    config = tmp_path / name
    config.write_text(for_version((REPO_ROOT / "deploy" / name).read_text(), caddy_version(caddy)))
    env = {**os.environ, "CONNECTOR_HOSTNAME": "brain.example.org", "STORE_HOSTNAME": "store.example.org",
           "SITE_HOSTNAME": "example.org",
           "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    return subprocess.run([caddy, command, "--adapter", "caddyfile", "--config", str(config)],
                          capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)


def round_robin_config(sites: Mapping[int, Sequence[ServerProcess]], *, trust_loopback: bool = False,
                       buffering: str = "") -> str:
    """A Caddyfile: one plain-HTTP loopback site per port, each proxying to its upstreams in turn
    (``lb_policy round_robin``, no sticky sessions). ``trust_loopback`` makes Caddy keep an
    ``X-Forwarded-For`` sent from loopback (and append to it), so a test can speak for several
    client addresses as a chain of proxies would. ``buffering``: the lines of ``request_buffering``
    (empty: request bodies streamed, which lets Caddy cut answers)."""
    # Caddy 2.6.2 (Debian's) takes trusted_proxies in reverse_proxy, not yet in the global options.
    trust = "\t\ttrusted_proxies 127.0.0.1/32\n" if trust_loopback else ""
    config = "{\n\tadmin off\n\tauto_https off\n}\n"
    for port, upstreams in sites.items():
        targets = " ".join(upstream.base_url.removeprefix("http://") for upstream in upstreams)
        config += (f"\nhttp://127.0.0.1:{port} {{\n\treverse_proxy {targets} {{\n\t\tlb_policy round_robin\n"
                   "\t\tflush_interval -1\n" + buffering + trust + "\t}\n}\n")
    return config


@contextmanager
def caddy_sites(tmp_path: Path, sites: Mapping[int, Sequence[ServerProcess]], *,
                trust_loopback: bool = False) -> Iterator[dict[int, ServerProcess]]:
    """Caddy serving ``sites`` (see ``round_robin_config``), request bodies read whole as in deploy/;
    the running process per port."""
    buffering = request_buffering(caddy_version(caddy_binary()))
    config = round_robin_config(sites, trust_loopback=trust_loopback, buffering=buffering)
    with running_caddy(tmp_path, config, next(iter(sites))) as server:
        yield {port: ServerProcess(server.process, f"http://127.0.0.1:{port}", server.log_path) for port in sites}


@contextmanager
def running_caddy(tmp_path: Path, config: str, port: int, health_path: str = "/health/live") -> Iterator[ServerProcess]:
    """Caddy running the Caddyfile ``config`` (its own HOME and data under ``tmp_path``), once
    ``http://127.0.0.1:<port><health_path>`` answers 200 through it."""
    caddy = caddy_binary()
    path = tmp_path / "Caddyfile"
    path.write_text(config)
    home = tmp_path / "caddy-home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config")}
    with run_server([caddy, "run", "--adapter", "caddyfile", "--config", str(path)], port=port, env=env,
                    log_path=tmp_path / "caddy.log", health_path=health_path) as server:
        yield server


@contextmanager
def caddy_round_robin(tmp_path: Path, upstreams: list[ServerProcess], port: int) -> Iterator[ServerProcess]:
    """Caddy on loopback ``port``, proxying to ``upstreams`` in turn (no sticky sessions)."""
    with caddy_sites(tmp_path, {port: upstreams}) as served:
        yield served[port]
