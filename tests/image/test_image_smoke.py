"""The image as built: store and connector containers, a user added with `docker exec`, an MCP
client that signs in and recalls through the connector, and everything still there after a restart.

Heavy and root-only, so it runs only when asked: `make image-test` (BRAIN_STORE_IMAGE_TEST=1).
It starts its own `dockerd` (Debian's docker.io) with its own socket and data root under a
temporary directory, with `--bridge=none --iptables=false`: every container uses the host's
network on loopback, never a bridge. No image can be pulled, so the base image is built from
Debian packages (`debootstrap` with python3 and python3-venv, then `docker import`) and passed
to the Dockerfile as BASE_IMAGE, with the host's CA bundle (so a TLS-intercepting proxy in
front of PyPI is trusted as the host trusts it); the root file system is cached as a tarball
in the temporary directory between runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import pytest

from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from tests.connector.oauth.live import MemoryStorage
from tests.connector.oauth.test_e2e_mcp_client import oauth_provider
from tests.support.processes import REPO_ROOT, free_port
from tests.support.trust import HOST_CA_BUNDLE

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(os.environ.get("BRAIN_STORE_IMAGE_TEST") != "1",
                       reason="the image smoke test runs with `make image-test` (root, docker.io, debootstrap)"),
]

BASE = "brain-store-base:bookworm"
IMAGE = "brain-store:smoke"
CACHE = Path(tempfile.gettempdir()) / "brain-store-image-cache"
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Debian's client, next to its dockerd (another `docker` earlier on PATH may not be).
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"


@dataclass
class Docker:
    """A private dockerd: run ``docker`` against its socket."""

    host: str
    log: Path

    def __call__(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([DOCKER, "-H", self.host, *args], capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done


@pytest.fixture(scope="module")
def docker() -> Iterator[Docker]:
    for tool in ("dockerd", DOCKER, "debootstrap"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: apt-get install docker.io debootstrap")
    work = Path(tempfile.mkdtemp(prefix="brain-store-dockerd-"))
    host = f"unix://{work}/docker.sock"
    log = work / "dockerd.log"
    with log.open("ab") as out:
        daemon = subprocess.Popen(
            ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false", "-H", host,
             "--data-root", str(work / "root"), "--exec-root", str(work / "exec"), "--pidfile", str(work / "pid")],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    client = Docker(host, log)
    try:
        deadline = time.monotonic() + 60
        while client("info", check=False, timeout=30).returncode != 0:
            assert daemon.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield client
    finally:
        for name in ("smoke-store", "smoke-connector"):
            client("rm", "-f", name, check=False)
        daemon.terminate()
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=30)
        # dockerd leaves its network namespace mounted under the exec root
        for line in reversed(Path("/proc/mounts").read_text().splitlines()):
            mount_point = line.split()[1]
            if mount_point.startswith(str(work)):
                subprocess.run(["umount", "-l", mount_point], check=False, timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def _base_image(docker: Docker) -> None:
    """Import the Debian base (debootstrap'ed once, then taken from the cache)."""
    tarball = CACHE / "bookworm-python3.tar"
    if not tarball.is_file():
        CACHE.mkdir(parents=True, exist_ok=True, mode=0o700)
        rootfs = Path(tempfile.mkdtemp(prefix="brain-store-rootfs-"))
        try:
            subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
                            "bookworm", str(rootfs), MIRROR], check=True, capture_output=True, timeout=1800)
            partial = tarball.with_suffix(".partial")
            subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True, timeout=600)
            partial.rename(tarball)
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)
    # The host's CA bundle too: where TLS to PyPI passes an intercepting proxy, the host trusts
    # its certificate and the build must as well (elsewhere it is the usual Debian bundle).
    docker("import", str(tarball), BASE + "-rootfs")
    context = Path(tempfile.mkdtemp(prefix="brain-store-base-"))
    try:
        shutil.copyfile(HOST_CA_BUNDLE, context / "ca-certificates.crt")
        (context / "Dockerfile").write_text(
            f"FROM {BASE}-rootfs\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n"
            "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n")
        docker("build", "-t", BASE, str(context))
    finally:
        shutil.rmtree(context, ignore_errors=True)


def _hardened(name: str, volume: str, mount: str) -> list[str]:
    """`docker run` options as docker-compose.yml sets them, on the host's network."""
    return ["run", "-d", "--name", name, "--network", "host", "--read-only", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges:true", "--tmpfs", "/tmp", "-v", f"{volume}:{mount}"]


def _ready(url: str, docker: Docker, name: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} not ready; logs:\n{docker('logs', name, check=False).stderr[-3000:]}")
        time.sleep(0.5)


async def _memorize_and_recall(mcp_url: str, provider: object, memorize: str | None, query: str) -> str:
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60)) as http:  # type: ignore[arg-type]
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
            if memorize:
                saved = await client.call_tool("brain_memorize", {"content": memorize, "tags": ["deploy"]})
                assert not saved.is_error, saved
            found = await client.call_tool("brain_recall", {"query": query})
            assert not found.is_error, found
            return str(found.structured_content or found.content)


async def test_image_runs_store_and_connector_and_keeps_data_across_restarts(docker: Docker) -> None:
    started = time.monotonic()
    _base_image(docker)
    base_done = time.monotonic()
    docker("build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE}", "-t", IMAGE, str(REPO_ROOT),
           timeout=3000)
    build_done = time.monotonic()
    store_port, connector_port = free_port(), free_port()
    store_url, base_url = f"http://127.0.0.1:{store_port}", f"http://127.0.0.1:{connector_port}"
    docker(*_hardened("smoke-store", "smoke-data", "/data"), IMAGE,
           "brain-store", "serve", "--host", "127.0.0.1", "--port", str(store_port))
    docker(*_hardened("smoke-connector", "smoke-state", "/state"), "-e", f"CONNECTOR_STORE_URL={store_url}",
           "-e", "CONNECTOR_IDP=static", IMAGE, "brain-connector", "serve", "--host", "127.0.0.1",
           "--port", str(connector_port))
    _ready(store_url + "/health/ready", docker, "smoke-store")
    _ready(base_url + "/health/ready", docker, "smoke-connector")
    # the unprivileged user owns both volumes: the connector wrote its state key
    assert docker("exec", "smoke-connector", "id", "-u").stdout.strip() == "10001"
    assert docker("exec", "smoke-connector", "ls", "/state").stdout.strip()

    added = docker("exec", "smoke-store", "brain-store", "user", "add", "alice").stdout
    assert "created user alice" in added and "in /data" in added
    token = added.strip().splitlines()[-1]
    mcp_url = base_url + "/mcp"
    storage, attempts = MemoryStorage(), []
    provider = oauth_provider(mcp_url, token, storage, attempts)
    fact = "The smoke test deploys the image with blue-green releases."
    assert "blue-green" in await _memorize_and_recall(mcp_url, provider, fact, "image deploys releases")
    assert len(attempts) == 1

    docker("restart", "smoke-store", "smoke-connector", timeout=180)
    _ready(store_url + "/health/ready", docker, "smoke-store")
    _ready(base_url + "/health/ready", docker, "smoke-connector")
    # the memory is in the store's volume and the sign-in in the connector's: no new sign-in
    assert "blue-green" in await _memorize_and_recall(mcp_url, provider, None, "blue-green releases")
    assert len(attempts) == 1, "the sign-in did not survive the restart"
    print(f"\nimage smoke: base {base_done - started:.0f}s, build {build_done - base_done:.0f}s, "
          f"run and checks {time.monotonic() - build_done:.0f}s")
