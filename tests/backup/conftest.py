"""A moto S3 server (`moto_server` process on a free loopback port) for the backup tests."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.s3.servers import S3Service
from tests.support.processes import VENV_BIN, free_port


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    port = free_port()
    binary = VENV_BIN / "moto_server"
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("ab") as out:
        process = subprocess.Popen([str(binary) if binary.exists() else "moto_server", "-H", "127.0.0.1",
                                    "-p", str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"moto_server exited:\n{log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("moto_server did not start within 60 s") from None
                time.sleep(0.1)
        yield S3Service("moto", f"http://127.0.0.1:{port}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 15)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait(timeout=10)
