"""Helpers for the backup tests: run CLI commands, fill a store through a real server, read it back."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.processes import REPO_ROOT, ServerProcess, console_script, free_port, run_server

KEY = "11" * 32
OTHER_KEY = "22" * 32


def cli(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``brain-store ARGS`` with ``env`` (no STORE_* inherited)."""
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, "STORE_FSYNC": "0", **env}
    done = subprocess.run([console_script("brain-store"), *args], capture_output=True, text=True, env=full,
                          cwd=REPO_ROOT, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"brain-store {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def archive(files: dict[str, bytes]) -> bytes:
    """A gzip-compressed tar of ``files``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sha(data: bytes) -> str:
    """Lowercase hex SHA-256."""
    return hashlib.sha256(data).hexdigest()


@contextmanager
def serve(env: dict[str, str], tmp: Path) -> Iterator[ServerProcess]:
    """A real `brain-store serve` on a free loopback port with ``env``."""
    port = free_port()
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, "STORE_FSYNC": "0",
            "STORE_RATE_LIMITS": "0", **env}
    argv = [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    with run_server(argv, port=port, log_path=tmp / f"serve-{port}.log", env=full) as server:
        yield server


def client(server: ServerProcess, token: str) -> httpx.Client:
    """An HTTP client authenticated with ``token``."""
    return httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def upload(c: httpx.Client, brain_id: str, data: bytes) -> None:
    """Upload an archive unconditionally."""
    r = c.put(f"/api/brains/{brain_id}/sync", files={"brain": ("brain.tar.gz", data, "application/gzip")})
    assert r.status_code == 200, r.text


def fill(env: dict[str, str], tmp: Path) -> dict[str, str]:
    """Two users; alice has a brain with 3 versions and a second brain; returns name -> token."""
    tokens = {name: cli(env, "user", "add", name, "--email", f"{name}@example.org").stdout.strip().splitlines()[-1]
              for name in ("alice", "bob")}
    with serve(env, tmp) as server:
        with client(server, tokens["alice"]) as c:
            brain = c.get("/api/brains").json()[0]["id"]
            for i in range(3):
                upload(c, brain, archive({"counter.txt": str(i).encode(), "notes/a.md": os.urandom(2000)}))
            second = c.post("/api/brains", json={"name": "work"}).json()["id"]
            upload(c, second, archive({"w.md": b"work"}))
        with client(server, tokens["bob"]) as c:
            upload(c, c.get("/api/brains").json()[0]["id"], archive({"b.md": b"bob"}))
    return tokens


def contents(server: ServerProcess, tokens: dict[str, str]) -> dict[str, object]:
    """Everything a client can see: per user, each brain's record, current sha256 and every snapshot's sha256."""
    seen: dict[str, object] = {}
    for name, token in sorted(tokens.items()):
        with client(server, token) as c:
            me = c.get("/auth/me")
            assert me.status_code == 200, me.text
            brains = []
            for record in c.get("/api/brains").json():
                bid = record["id"]
                current = c.get(f"/api/brains/{bid}/sync")
                assert current.status_code == 200
                assert sha(current.content) == record["checksum"] == current.headers["x-checksum"]
                versions = []
                for v in c.get(f"/api/brains/{bid}/versions").json()["versions"]:
                    got = c.get(f"/api/brains/{bid}/sync", params={"version": v["version"]})
                    assert got.status_code == 200, got.text
                    versions.append((v["version"], v["date"], sha(got.content)))
                brains.append((record, sha(current.content), versions))
            seen[name] = (me.json(), brains)
    return seen
