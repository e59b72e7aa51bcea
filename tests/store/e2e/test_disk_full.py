"""A full disk answers 507 and changes nothing (data directory on a small tmpfs; needs root)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contract.conformance.archives import make_archive
from tests.contract.harness import Store, running_store

pytestmark = pytest.mark.xdist_group("store-e2e-diskfull")

MIB = 1024 * 1024


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount_point)], capture_output=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)


def _noise(size: int, tag: str) -> bytes:
    return make_archive({"memory/noise.bin": os.urandom(size), f"memory/{tag}.md": tag.encode()})


def test_full_disk_gives_507_and_changes_nothing(small_fs: Path) -> None:
    with running_store(small_fs / "data", env={"STORE_RATE_LIMITS": "off", "STORE_SNAPSHOTS": "5"}) as store:
        _exercise(store)


def _exercise(store: Store) -> None:
    token = store.add_user("fills-disk")
    http = httpx.Client(base_url=store.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    with http:
        brain_id = http.get("/api/brains").json()[0]["id"]

        def put(archive: bytes) -> httpx.Response:
            return http.put(f"/api/brains/{brain_id}/sync", files={"brain": ("b.tar.gz", archive, "application/gzip")})

        first, second = _noise(1_200_000, "a"), _noise(1_200_000, "b")
        assert put(first).status_code == 200
        assert put(second).status_code == 200
        refused = put(_noise(1_900_000, "c"))
        assert refused.status_code == 507, refused.text
        assert isinstance(refused.json().get("error"), str)

        live = http.get(f"/api/brains/{brain_id}/sync")
        assert live.status_code == 200 and live.content == second
        assert live.headers["x-checksum"] == hashlib.sha256(second).hexdigest()
        versions = http.get(f"/api/brains/{brain_id}/versions").json()["versions"]
        assert len(versions) == 1
        assert http.get(f"/api/brains/{brain_id}/sync", params={"version": versions[0]["version"]}).content == first
        tmp = store.data_dir / "tmp"
        assert not tmp.exists() or list(tmp.iterdir()) == []

        # The space of the failed upload is given back: a small upload still works.
        small = make_archive({"memory/small.md": b"still alive"})
        assert put(small).status_code == 200
        assert http.get(f"/api/brains/{brain_id}/sync").content == small
