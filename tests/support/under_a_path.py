"""The connector under a path of a shared domain (``CONNECTOR_PUBLIC_URL=http://127.0.0.1:<port>/brain``),
behind a real Caddy on that port: as deploy/Caddyfile.path says (``/brain`` passed on, the root
well-known documents of ``/brain`` sent to the connector), or with Caddy stripping ``/brain``
(``handle_path``). Used by tests/ops/test_connector_under_a_path.py and by the node clients' tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.connector.conftest import RunningStore
from tests.connector.oauth.live import running_connector
from tests.support.caddy import caddy_binary, caddy_version, for_version, request_buffering, running_caddy
from tests.support.processes import REPO_ROOT, ServerProcess, free_port

PREFIX = "/brain"
GLOBAL_OPTIONS = "{\n\tadmin off\n\tauto_https off\n}\n"


def documented_config(site: str, upstream: str) -> str:
    """deploy/Caddyfile.path for a plain-HTTP loopback site and upstream (Caddy at hand's syntax)."""
    text = for_version((REPO_ROOT / "deploy" / "Caddyfile.path").read_text(), caddy_version(caddy_binary()))
    return GLOBAL_OPTIONS + text.replace("{$SITE_HOSTNAME}", site).replace("connector:8788", upstream)


def stripping_config(site: str, upstream: str) -> str:
    """A Caddy that takes ``/brain`` off before the connector sees it, the root well-known
    documents of ``/brain`` passed on as they are, and the rest of the domain answered by Caddy."""
    buffering = request_buffering(caddy_version(caddy_binary()))
    proxy = f"reverse_proxy {upstream} {{\n\t\t\tflush_interval -1\n{buffering}\t\t}}"
    return (GLOBAL_OPTIONS + f"{site} {{\n"
            f"\t@wellknown path /.well-known/oauth-protected-resource{PREFIX}/* /.well-known/oauth-authorization-server{PREFIX}\n"
            f"\thandle @wellknown {{\n\t\t{proxy}\n\t}}\n"
            f"\tredir {PREFIX} {PREFIX}/ 308\n"
            f"\thandle_path {PREFIX}/* {{\n\t\trespond /metrics 404\n\t\t{proxy}\n\t}}\n"
            "\thandle {\n\t\trespond \"the rest of the site\" 404\n\t}\n}\n")


@contextmanager
def connector_under_a_path(tmp_path: Path, store: RunningStore, *, strip: bool,
                           env: dict[str, str] | None = None) -> Iterator[tuple[str, ServerProcess]]:
    """The connector (``env`` added to its environment) and Caddy in front of it; the public URL
    (``http://127.0.0.1:<port>/brain``) and the connector itself (its own URL, its log)."""
    port = free_port()
    site = f"http://127.0.0.1:{port}"
    with ExitStack() as stack:
        connector = stack.enter_context(running_connector(
            tmp_path, store.url, state_dir=tmp_path / "state",
            extra_env={"CONNECTOR_PUBLIC_URL": site + PREFIX, "CONNECTOR_METRICS": "1", **(env or {})}))
        upstream = connector.base_url.removeprefix("http://")
        config = stripping_config(site, upstream) if strip else documented_config(site, upstream)
        stack.enter_context(running_caddy(tmp_path, config, port, health_path=PREFIX + "/health/live"))
        yield site + PREFIX, connector
