"""The start-up probe refuses an S3 endpoint that ignores conditional writes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.s3.servers import CREDENTIALS, S3Service
from tests.support.processes import REPO_ROOT, console_script, free_port

# xdist groups (one per S3 service) are set in conftest.py


class _CarelessS3(BaseHTTPRequestHandler):
    """Stores objects but ignores If-Match / If-None-Match entirely (like some S3 clones)."""

    objects: dict[str, bytes] = {}

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, status: int, body: bytes = b"", etag: str | None = None) -> None:
        self.send_response(status)
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def do_PUT(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.objects[self.path] = data
        self._reply(200, etag=f'"{hashlib.md5(data).hexdigest()}"')

    def do_HEAD(self) -> None:
        data = self.objects.get(self.path)
        if data is None:
            self._reply(404)
        else:
            self._reply(200, etag=f'"{hashlib.md5(data).hexdigest()}"')

    def do_GET(self) -> None:
        data = self.objects.get(self.path)
        self._reply(404) if data is None else self._reply(200, data, f'"{hashlib.md5(data).hexdigest()}"')

    def do_DELETE(self) -> None:
        self.objects.pop(self.path, None)
        self._reply(204)


@pytest.fixture()
def careless_s3() -> Iterator[str]:
    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _CarelessS3)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


def _env(endpoint: str, tmp_path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {**CREDENTIALS, "STORE_BACKEND": "s3", "STORE_S3_BUCKET": "brains", "STORE_S3_ENDPOINT_URL": endpoint,
            "STORE_DATA_DIR": str(tmp_path / "spool")}


def test_serve_refuses_an_s3_that_ignores_conditional_writes(careless_s3: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, **_env(careless_s3, tmp_path)}
    done = subprocess.run(
        [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", str(free_port())],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=60,
    )
    assert done.returncode != 0
    assert "does not honour conditional writes" in done.stderr
    assert "If-None-Match: * replaced an existing object" in done.stderr
    assert "If-Match with a wrong ETag replaced the object" in done.stderr
    assert "listening on" not in done.stdout


def test_probe_accepts_real_s3_services(s3: S3Service) -> None:
    from store.storage.s3client import Bucket
    from store.storage.s3probe import probe_conditional_writes

    bucket = s3.new_bucket()
    probe_conditional_writes(s3.client(), Bucket.of(bucket, "p"), s3.name)
    assert s3.keys(bucket) == []  # the probe cleans up after itself

