"""Caddy as a round-robin load balancer on loopback, for tests of replicas behind it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.processes import ServerProcess, run_server
from tests.support.tools import missing_tool


def caddy_binary() -> str:
    """The caddy binary (the test skips, or fails on CI, when it is missing)."""
    caddy = shutil.which("caddy")
    if caddy is None:
        missing_tool("the caddy binary is not installed (apt-get install caddy; .ci/run installs it on CI)")
    return caddy


def round_robin_config(sites: Mapping[int, Sequence[ServerProcess]], *, trust_loopback: bool = False) -> str:
    """A Caddyfile: one plain-HTTP loopback site per port, each proxying to its upstreams in turn
    (``lb_policy round_robin``, no sticky sessions). ``trust_loopback`` makes Caddy keep an
    ``X-Forwarded-For`` sent from loopback (and append to it), so a test can speak for several
    client addresses as a chain of proxies would."""
    # Caddy 2.6.2 (Debian's) takes trusted_proxies in reverse_proxy, not yet in the global options.
    trust = "\t\ttrusted_proxies 127.0.0.1/32\n" if trust_loopback else ""
    config = "{\n\tadmin off\n\tauto_https off\n}\n"
    for port, upstreams in sites.items():
        targets = " ".join(upstream.base_url.removeprefix("http://") for upstream in upstreams)
        config += (f"\nhttp://127.0.0.1:{port} {{\n\treverse_proxy {targets} {{\n\t\tlb_policy round_robin\n"
                   "\t\tflush_interval -1\n" + trust + "\t}\n}\n")
    return config


@contextmanager
def caddy_sites(tmp_path: Path, sites: Mapping[int, Sequence[ServerProcess]], *,
                trust_loopback: bool = False) -> Iterator[dict[int, ServerProcess]]:
    """Caddy serving ``sites`` (see ``round_robin_config``); the running process per port."""
    caddy = caddy_binary()
    config = tmp_path / "Caddyfile"
    config.write_text(round_robin_config(sites, trust_loopback=trust_loopback))
    home = tmp_path / "caddy-home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config")}
    first = next(iter(sites))
    with run_server([caddy, "run", "--adapter", "caddyfile", "--config", str(config)], port=first, env=env,
                    log_path=tmp_path / "caddy.log", health_path="/health/live") as server:
        yield {port: ServerProcess(server.process, f"http://127.0.0.1:{port}", server.log_path) for port in sites}


@contextmanager
def caddy_round_robin(tmp_path: Path, upstreams: list[ServerProcess], port: int) -> Iterator[ServerProcess]:
    """Caddy on loopback ``port``, proxying to ``upstreams`` in turn (no sticky sessions)."""
    with caddy_sites(tmp_path, {port: upstreams}) as served:
        yield served[port]
