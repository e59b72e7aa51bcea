"""Helpers for the backup tests: run CLI commands, fill a store through a real server, read it back."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.s3.archives import archive  # noqa: F401 - re-exported for the backup tests
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


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its sha256 (lock files excluded: they carry no data)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".lock")}


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


def brains_with_archives(env: dict[str, str], tmp: Path, token: str, names: Sequence[str]) -> dict[str, str]:
    """Brains named ``names`` made through a real server for ``token``'s user, each given an
    archive holding its name; their ids by name."""
    brains = {}
    with serve(env, tmp) as server, client(server, token) as c:
        for name in names:
            brains[name] = c.post("/api/brains", json={"name": name}).json()["id"]
            upload(c, brains[name], archive({"a.md": name.encode()}))
    return brains


def registry(env: dict[str, str], moto: Any = None) -> Any:
    """The users registry of the store ``env`` describes (in this process, no CLI start-up)."""
    from store.auth.users import UserRegistry

    if env.get("STORE_BACKEND") == "s3":
        from common.docstore.s3 import S3Store

        return UserRegistry(S3Store(moto.client(), env["STORE_S3_BUCKET"], env["STORE_S3_PREFIX"]), poll_seconds=1.0)
    Path(env["STORE_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
    return UserRegistry(Path(env["STORE_DATA_DIR"]), fsync=False)


def fill(env: dict[str, str], tmp: Path, moto: Any = None) -> tuple[dict[str, str], dict[str, object]]:
    """Two users; alice has a brain with 3 versions and a second brain; bob one brain.

    Returns name -> token and what a client sees (``contents``), read from the same server.
    """
    users = registry(env, moto)
    tokens = {name: users.add(name, f"{name}@example.org")[1] for name in ("alice", "bob")}
    with serve(env, tmp) as server:
        with client(server, tokens["alice"]) as c:
            brain = c.post("/api/brains", json={"name": "default"}).json()["id"]
            for i in range(3):
                upload(c, brain, archive({"counter.txt": str(i).encode(), "notes/a.md": os.urandom(2000)}))
            second = c.post("/api/brains", json={"name": "work"}).json()["id"]
            upload(c, second, archive({"w.md": b"work"}))
        with client(server, tokens["bob"]) as c:
            upload(c, c.post("/api/brains", json={}).json()["id"], archive({"b.md": b"bob"}))
        return tokens, contents(server, tokens)


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


def sealed_brain(data_dir: Path, key_hex: str, user_id: str, data: bytes) -> str:
    """Put one brain holding ``data`` sealed with ``key_hex`` into a local store (in process)."""
    import uuid

    from store.backup.apply import BrainBuilder
    from store.storage.base import ArchiveRef, BrainMeta
    from store.storage.local import LocalBackend
    from store.storage.sealing import SealWriter, derive_user_key

    brain_id = str(uuid.uuid4())
    ref = ArchiveRef(checksum=sha(data), size=len(data), file_count=1, synced_at="2026-01-01T00:00:00.000000Z",
                     sealed=True)
    meta = BrainMeta(id=brain_id, user_id=user_id, name="default", created_at=ref.synced_at, current=ref)
    builder = BrainBuilder(LocalBackend(data_dir, fsync=False), meta)

    def write(out: Any) -> None:
        writer = SealWriter(out, derive_user_key(bytes.fromhex(key_hex), user_id), user_id, brain_id)
        writer.write(data)
        writer.close(ref.checksum)

    builder.add(ref.checksum, write)
    builder.finish()
    return brain_id
