"""The deploy files: compose services hardened and configured with settings that exist and parse,
the Caddyfile valid (caddy validate), systemd units sandboxed, the image build context complete,
and deploy/env.example documenting every setting of both servers."""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from connector.settings import ConnectorSettings
from store.settings import StoreSettings
from tests.support.caddy import run_caddy_on_deploy
from tests.support.processes import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
# Variables compose uses for itself (interpolation into the Caddy service), not server settings.
COMPOSE_ONLY = {"STORE_HOSTNAME", "CONNECTOR_HOSTNAME"}
# Read by libraries in their usual ways (boto3), documented in env.example for completeness.
LIBRARY_ENV = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
EXAMPLE_VALUES = {"CONNECTOR_HOSTNAME": "brain.example.org", "STORE_HOSTNAME": "store.example.org"}


def settings_env_names(module_file: Path) -> set[str]:
    """Every environment variable name a settings module reads (quoted ALL-CAPS names)."""
    text = module_file.read_text()
    return set(re.findall(r'"((?:STORE|CONNECTOR|OIDC|BRAIN|PROMETHEUS)_[A-Z0-9_]+)"', text))


STORE_ENV = settings_env_names(REPO_ROOT / "store" / "settings.py")
CONNECTOR_ENV = settings_env_names(REPO_ROOT / "connector" / "settings.py")


def interpolate(value: str, examples: dict[str, str] = EXAMPLE_VALUES) -> str:
    """Compose's ``${NAME}`` / ``${NAME:?message}`` with the example values."""
    return re.sub(r"\$\{([A-Z0-9_]+)(?::[?-][^}]*)?\}", lambda m: examples[m.group(1)], value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # PyYAML's safe loader resolves the anchors and the << merge keys of x-hardened.
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def assert_hardened(name: str, service: dict[str, Any], *, one_shot: bool = False) -> None:
    """A compose service runs read-only, without capabilities or new privileges, restarted
    (unless it is a ``one_shot`` job), health-checked, with a private /tmp."""
    assert service.get("read_only") is True, f"{name}: root filesystem must be read-only"
    assert service.get("cap_drop") == ["ALL"], f"{name}: must drop every capability"
    assert "no-new-privileges:true" in service.get("security_opt", []), name
    assert service.get("restart") in (("no",) if one_shot else ("unless-stopped", "always")), name
    health = service.get("healthcheck") or {}
    assert health.get("test") and health.get("interval"), f"{name}: needs a health check"
    assert any(str(t).startswith("/tmp") for t in service.get("tmpfs", [])), f"{name}: needs a /tmp tmpfs"
    assert not set(service.get("cap_add", [])) - {"NET_BIND_SERVICE"}, name


def test_every_compose_service_is_hardened(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= {"store", "connector", "caddy"}
    for name, service in services.items():
        assert_hardened(name, service)
    # Only Caddy is reachable from outside; the servers stay on the compose network.
    assert "ports" not in services["store"] and "ports" not in services["connector"]


def _environment(service: dict[str, Any], examples: dict[str, str] = EXAMPLE_VALUES) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: interpolate(str(value), examples) for key, value in env.items()}


def _mounts(service: dict[str, Any]) -> set[str]:
    return {str(volume).split(":")[1] for volume in service.get("volumes", [])}


def test_compose_servers_use_settings_that_exist_and_parse(compose: dict[str, Any]) -> None:
    store, connector = compose["services"]["store"], compose["services"]["connector"]
    store_env, connector_env = _environment(store), _environment(connector)
    assert set(store_env) <= STORE_ENV, set(store_env) - STORE_ENV
    assert set(connector_env) <= CONNECTOR_ENV, set(connector_env) - CONNECTOR_ENV
    store_settings = StoreSettings.from_env(store_env)
    connector_settings = ConnectorSettings.load({**connector_env, "CONNECTOR_IDP": "static"})
    assert connector_settings.public_url == "https://brain.example.org"
    # The only writable places are volumes (and /tmp): the data and state directories must be ones.
    assert str(store_settings.data_dir) in _mounts(store)
    assert str(connector_settings.state_dir) in _mounts(connector)
    assert set(_environment(compose["services"]["caddy"])) <= COMPOSE_ONLY
    # Health checks ask the ports the commands listen on.
    for service, port in ((store, "8787"), (connector, "8788")):
        assert service["command"][service["command"].index("--port") + 1] == port
        assert f"127.0.0.1:{port}/health" in " ".join(service["healthcheck"]["test"])


def test_compose_commands_are_our_console_scripts(compose: dict[str, Any]) -> None:
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name in ("store", "connector"):
        assert compose["services"][name]["command"][0] in scripts


def test_caddyfile_validates(tmp_path: Path) -> None:
    done = run_caddy_on_deploy("validate", "Caddyfile", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    text = (DEPLOY / "Caddyfile").read_text()
    assert text.count("respond /metrics 404") == 2, "metrics must not be served to the internet"


def reverse_proxies(config: Any) -> list[dict[str, Any]]:
    """Every reverse_proxy handler in an adapted (JSON) Caddy config."""
    if isinstance(config, dict):
        found = [config] if config.get("handler") == "reverse_proxy" else []
        return found + [proxy for value in config.values() for proxy in reverse_proxies(value)]
    if isinstance(config, list):
        return [proxy for value in config for proxy in reverse_proxies(value)]
    return []


@pytest.mark.parametrize("name", ["Caddyfile", "Caddyfile.replicas", "Caddyfile.cluster", "Caddyfile.path"])
def test_caddy_drops_idle_upstream_connections_before_the_servers_do(name: str, tmp_path: Path) -> None:
    # Caddy keeps idle upstream connections 2 minutes by default, the servers 20 s: a request
    # Caddy sends on a connection the server is just closing is answered 502.
    from cli.serving import KEEP_ALIVE_SECONDS

    done = run_caddy_on_deploy("adapt", name, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    proxies = reverse_proxies(json.loads(done.stdout))
    assert proxies
    for proxy in proxies:
        idle_ns = proxy.get("transport", {}).get("keep_alive", {}).get("idle_timeout")
        assert isinstance(idle_ns, int) and 0 < idle_ns <= (KEEP_ALIVE_SECONDS - 1) * 10**9, (name, proxy)


@pytest.mark.parametrize("name", ["Caddyfile", "Caddyfile.replicas", "Caddyfile.cluster", "Caddyfile.path"])
def test_caddy_reads_every_mcp_request_whole_before_passing_it_to_a_connector(name: str) -> None:
    # A request body streamed upstream can make Caddy cut the connector's answer mid-body
    # (tests/ops/test_caddy_request_bodies.py); buffered, it cannot. Caddy streams a body of the
    # buffer's size or more, so the buffer is larger than the largest MCP request.
    from connector.mcp.server import MAX_REQUEST_BYTES

    text = (DEPLOY / name).read_text()
    blocks = re.findall(r"reverse_proxy ([^{\n]*:8788[^{\n]*)\{(.*?)\n\t\}", text, flags=re.DOTALL)
    assert blocks, name
    for upstreams, block in blocks:
        size = re.search(r"^\s*request_buffers (\d+)MiB$", block, flags=re.MULTILINE)
        assert size and int(size.group(1)) * 1024 * 1024 > MAX_REQUEST_BYTES, (name, upstreams)


SANDBOXING = ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
              "ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectControlGroups=yes",
              "RestrictAddressFamilies=", "RestrictNamespaces=yes", "RestrictSUIDSGID=yes", "LockPersonality=yes",
              "SystemCallFilter=", "CapabilityBoundingSet=", "UMask=0077", "StateDirectory=", "DynamicUser=yes")


@pytest.mark.parametrize(("unit", "known", "state_var"), [
    ("brain-store.service", STORE_ENV, "STORE_DATA_DIR"),
    ("brain-connector.service", CONNECTOR_ENV, "CONNECTOR_STATE_DIR"),
])
def test_systemd_units_are_sandboxed(unit: str, known: set[str], state_var: str) -> None:
    lines = [line.strip() for line in (DEPLOY / "systemd" / unit).read_text().splitlines()]
    for directive in SANDBOXING:
        assert any(line.startswith(directive) for line in lines), f"{unit}: missing {directive}"
    env = dict(line.removeprefix("Environment=").split("=", 1) for line in lines if line.startswith("Environment="))
    assert set(env) <= known, set(env) - known
    state = next(line.split("=", 1)[1] for line in lines if line.startswith("StateDirectory="))
    assert env[state_var] == f"/var/lib/{state}", "the state/data directory must be the StateDirectory"
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert Path(exec_start.split("=", 1)[1].split()[0]).name in ("brain-store", "brain-connector")


def _dockerignore() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def _ignored(relative: str, patterns: list[str]) -> bool:
    """Docker's rule, enough for our patterns: a path is out when it or a parent matches."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        bare = pattern.lstrip("!")
        matched = any(fnmatch.fnmatch(p, bare) or (bare.startswith("**/") and fnmatch.fnmatch(p.split("/")[-1],
                      bare[3:])) for p in prefixes)
        if matched:
            ignored = not negate
    return ignored


def test_image_build_context_holds_what_the_image_needs() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    patterns = _dockerignore()
    copies = [line.split()[1:] for line in dockerfile.splitlines() if line.startswith("COPY ") and "--from" not in line]
    sources = [src for args in copies for src in args[:-1]]
    assert sources, "no COPY lines found"
    for src in sources:
        assert (REPO_ROOT / src).exists(), f"COPY source {src} does not exist"
        assert not _ignored(src, patterns), f"COPY source {src} is excluded by .dockerignore"
    # pip install . needs the packages and the files pyproject names.
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    copied = {Path(s).name for s in sources}
    assert project["project"]["readme"] in copied and "pyproject.toml" in copied
    assert "requirements.lock" in copied
    for package in ("store", "connector", "cli", "contract"):
        assert package in copied, f"{package} is not copied into the image"
    assert not _ignored("contract/openapi.yaml", patterns)
    # The console scripts exist and so does every command module they load lazily.
    for target in project["project"]["scripts"].values():
        module, attr = target.split(":")
        assert callable(getattr(importlib.import_module(module), attr))
        commands = getattr(importlib.import_module(module), "COMMANDS", {})
        for command_target in commands.values():
            command_module = command_target.split(":")[0]
            assert (REPO_ROOT / (command_module.replace(".", "/") + ".py")).is_file(), command_target
    assert re.search(r"^USER\s+(?!root)\S+", dockerfile, re.M), "the image must not run as root"
    assert 'CMD ["brain-store", "serve"]' in dockerfile


def test_image_makes_every_volume_mount_point_for_its_user(compose: dict[str, Any]) -> None:
    """A named volume takes the owner of the image's directory: each one compose mounts must exist
    in the image and belong to the unprivileged user (else the connector cannot write its state key)."""
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    final = dockerfile.split("\nFROM ")[-1]
    made = set(re.findall(r"mkdir -p ([^&\n]+)", final)[0].split())
    owned = set(re.findall(r"chown brain:brain ([^&\n]+)", final)[0].split())
    mounted = {volume.split(":")[1] for service in compose["services"].values()
               for volume in service.get("volumes", []) if not volume.split(":")[0].startswith((".", "/"))
               and service.get("image") == "brain-store:latest"}
    assert mounted == {"/data", "/state"}
    assert mounted <= made and mounted <= owned
    # the base image is a build argument whose default users get unchanged
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", dockerfile, re.M)
    assert dockerfile.count("FROM ${BASE_IMAGE}") == 2


def _documented() -> set[str]:
    text = (DEPLOY / "env.example").read_text()
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", text, re.M))


# Settings fields whose variable is not the mechanical STORE_/CONNECTOR_ + FIELD name.
STORE_FIELD_ENV = {
    "max_upload_bytes": "STORE_MAX_UPLOAD_MB", "max_user_bytes": "STORE_MAX_USER_MB",
    "previous_keys": "STORE_ENCRYPTION_PREVIOUS_KEYS", "inspect_max_inflated": "STORE_INSPECT_MAX_INFLATED_MB",
    "inspect_max_header": "STORE_INSPECT_MAX_HEADER_KB",
}
CONNECTOR_FIELD_ENV = {"store_url": "CONNECTOR_STORE_URL"}
# Connector fields only a caller (tests, the CLI) can set: no environment variable exists for them.
CONNECTOR_NOT_FROM_ENV = {"store_timeout_s"}


def test_env_example_documents_every_setting() -> None:
    documented = _documented()
    assert STORE_ENV <= documented, f"undocumented store settings: {sorted(STORE_ENV - documented)}"
    assert CONNECTOR_ENV <= documented, f"undocumented connector settings: {sorted(CONNECTOR_ENV - documented)}"
    stray = documented - STORE_ENV - CONNECTOR_ENV - COMPOSE_ONLY - LIBRARY_ENV
    assert not stray, f"env.example names settings nobody reads: {sorted(stray)}"
    for field in dataclasses.fields(StoreSettings):
        name = STORE_FIELD_ENV.get(field.name, "STORE_" + field.name.upper())
        assert name in documented, f"StoreSettings.{field.name}: {name} not in env.example"
    for field in dataclasses.fields(ConnectorSettings):
        if field.name in CONNECTOR_NOT_FROM_ENV:
            continue
        name = CONNECTOR_FIELD_ENV.get(field.name) or (
            field.name.upper() if field.name.startswith("oidc_") else "CONNECTOR_" + field.name.upper())
        assert name in documented, f"ConnectorSettings.{field.name}: {name} not in env.example"


# Commented lines of env.example that show an example value, not the default (no default, or none to show).
ENV_EXAMPLE_VALUES = {
    "STORE_OIDC_ISSUER", "STORE_OIDC_AUDIENCE", "STORE_OIDC_ALLOWED_DOMAINS", "STORE_OIDC_ALLOWED_EMAILS",
    "STORE_S3_ENDPOINT_URL", "CONNECTOR_PUBLIC_URL", "CONNECTOR_ALLOWED_HOSTS", "CONNECTOR_STATE_DIR",
    "CONNECTOR_STATE_URL", "CONNECTOR_S3_ENDPOINT_URL", "CONNECTOR_S3_REGION", "CONNECTOR_INDEX_CACHE_DIR",
    "CONNECTOR_MODEL_URL", "CONNECTOR_MODEL", "OIDC_ISSUER", "OIDC_ALLOWED_DOMAINS",
}


def test_env_example_shows_the_settings_defaults() -> None:
    """A commented ``# NAME=value`` line shows the default ("can stay commented"): uncommented, it
    changes nothing, unless it is one of the marked example values."""
    store_url = {"CONNECTOR_STORE_URL": "http://127.0.0.1:8787"}
    store_default, connector_default = StoreSettings.from_env({}), ConnectorSettings.load(store_url)
    lines = re.findall(r"^# ([A-Z][A-Z0-9_]+)=(\S*)$", (DEPLOY / "env.example").read_text(), re.M)
    assert len(lines) > 50
    for name, value in lines:
        if name in ENV_EXAMPLE_VALUES or name in LIBRARY_ENV:
            continue
        if name.startswith("STORE_"):
            assert StoreSettings.from_env({name: value}) == store_default, f"env.example: {name}={value} is not the default"
        else:
            changed = ConnectorSettings.load({**store_url, name: value})
            assert changed == connector_default, f"env.example: {name}={value} is not the default"


# --- the cluster (compose.cluster.yml, issue 27) -----------------------------------------------

CLUSTER_EXAMPLES = {**EXAMPLE_VALUES, "STORE_S3_BUCKET": "brain", "CONNECTOR_STATE_KEY": "ab" * 32,
                    "AWS_ACCESS_KEY_ID": "example-key", "AWS_SECRET_ACCESS_KEY": "example-secret"}


@pytest.fixture(scope="module")
def cluster_compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.cluster.yml").read_text())


def _replicas(compose: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: service for name, service in compose["services"].items() if name.startswith(kind + "-")}


def test_the_cluster_has_its_replicas_hardened_and_only_caddy_outside(cluster_compose: dict[str, Any]) -> None:
    services = cluster_compose["services"]
    assert len(_replicas(cluster_compose, "store")) == 2 and len(_replicas(cluster_compose, "connector")) == 3
    assert {"seaweedfs", "bucket", "caddy"} <= set(services)
    for name, service in services.items():
        assert_hardened(name, service, one_shot=name == "bucket")
    assert [name for name, service in services.items() if "ports" in service] == ["caddy"]
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, service in {**_replicas(cluster_compose, "store"), **_replicas(cluster_compose, "connector")}.items():
        assert service["command"][0] in scripts, name
        port = service["command"][service["command"].index("--port") + 1]
        assert f"127.0.0.1:{port}/health" in " ".join(service["healthcheck"]["test"]), name


def test_the_cluster_shares_no_volume(cluster_compose: dict[str, Any]) -> None:
    """No shared directory at all: the replicas mount nothing; every named volume has one user."""
    users: dict[str, list[str]] = {}
    for name, service in cluster_compose["services"].items():
        for volume in service.get("volumes", []):
            source = str(volume).split(":")[0]
            if not source.startswith((".", "/")):
                users.setdefault(source, []).append(name)
    assert all(len(names) == 1 for names in users.values()), users
    for name in {**_replicas(cluster_compose, "store"), **_replicas(cluster_compose, "connector")}:
        assert not cluster_compose["services"][name].get("volumes"), f"{name} must keep nothing on a volume"


def test_the_cluster_replicas_use_settings_that_exist_and_parse(cluster_compose: dict[str, Any]) -> None:
    stores, connectors = _replicas(cluster_compose, "store"), _replicas(cluster_compose, "connector")
    store_envs = [_environment(service, CLUSTER_EXAMPLES) for service in stores.values()]
    assert all(env == store_envs[0] for env in store_envs), "store replicas must be configured alike"
    assert set(store_envs[0]) <= STORE_ENV, set(store_envs[0]) - STORE_ENV
    settings = StoreSettings.from_env(store_envs[0])
    assert settings.backend == "s3" and settings.s3_bucket == "brain" and settings.s3_prefix == "store"
    connector_envs = [_environment(service, CLUSTER_EXAMPLES) for service in connectors.values()]
    assert all(env == connector_envs[0] for env in connector_envs), "connector replicas must be configured alike"
    env = connector_envs[0]
    # The connectors' state: the same bucket, another prefix; their stores: Caddy's internal listener.
    assert env["CONNECTOR_STATE_URL"] == "s3://brain/connector" and env["CONNECTOR_STATE_DIR"] == ""
    assert env["CONNECTOR_STORE_URL"] == "http://caddy:8787"
    assert set(env) <= CONNECTOR_ENV, set(env) - CONNECTOR_ENV
    connector = ConnectorSettings.load({**env, "CONNECTOR_IDP": "static"})
    assert connector.state_dir is None and connector.state_url == "s3://brain/connector"
    assert connector.public_url == "https://brain.example.org"


def test_the_cluster_caddyfile_balances_every_replica(cluster_compose: dict[str, Any], tmp_path: Path) -> None:
    mounted = [volume for volume in cluster_compose["services"]["caddy"]["volumes"] if volume.startswith("./")]
    assert mounted == ["./Caddyfile.cluster:/etc/caddy/Caddyfile:ro"]
    done = run_caddy_on_deploy("adapt", "Caddyfile.cluster", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    proxies = reverse_proxies(json.loads(done.stdout))
    upstreams = [sorted(u["dial"] for u in proxy["upstreams"]) for proxy in proxies]
    stores = sorted(f"{name}:8787" for name in _replicas(cluster_compose, "store"))
    connectors = sorted(f"{name}:8788" for name in _replicas(cluster_compose, "connector"))
    # The public store and connector sites, and the connectors' internal way to the stores.
    assert sorted(upstreams) == sorted([stores, stores, connectors])
    for proxy in proxies:
        assert proxy["load_balancing"]["selection_policy"]["policy"] == "round_robin"  # never sticky
    # Only the internal listener passes the connector's X-Forwarded-For on to the stores.
    assert sum("trusted_proxies" in proxy for proxy in proxies) == 1
    assert (DEPLOY / "Caddyfile.cluster").read_text().count("respond /metrics 404") == 2
