"""`brain-store rekey` on a bucket: archives and snapshots re-sealed under the new key."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import httpx

from tests.contract.harness import running_store
from tests.s3.archives import archive
from tests.s3.cli import run_cli
from tests.s3.servers import S3Service, wait_for_token
from tests.support.processes import console_script

# xdist groups (one per S3 service) are set in conftest.py

OLD, NEW = "33" * 32, "44" * 32


def _everything(url: str, token: str) -> dict[str, str]:
    """version name (or 'current') -> SHA-256 of the bytes served."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        brain = client.get("/api/brains").json()[0]["id"]
        out = {"current": hashlib.sha256(client.get(f"/api/brains/{brain}/sync").content).hexdigest()}
        for v in client.get(f"/api/brains/{brain}/versions").json()["versions"]:
            got = client.get(f"/api/brains/{brain}/sync", params={"version": v["version"]})
            assert got.status_code == 200, got.text
            out[v["version"]] = hashlib.sha256(got.content).hexdigest()
    return out


def _sealed_uploads(store_url: str, token: str, count: int) -> None:
    """``count`` versions of the user's first brain, uploaded to a store sealing under OLD."""
    wait_for_token(store_url, token)
    headers = {"Authorization": f"Bearer {token}"}
    brain = httpx.get(store_url + "/api/brains", headers=headers).json()[0]["id"]
    for n in range(count):
        httpx.put(f"{store_url}/api/brains/{brain}/sync", headers=headers,
                  files={"brain": ("b.tgz", archive({f"m{n}": b"x" * n}))}).raise_for_status()


def test_rekey_reseals_a_bucket(moto: S3Service, tmp_path: Path) -> None:
    env = {**moto.store_env(moto.new_bucket()), "STORE_ENCRYPTION_KEY": OLD}
    with running_store(tmp_path / "old", env=env, log_name="old.log") as store:
        token = store.add_user("gina")
        _sealed_uploads(store.url, token, 2)
        before = _everything(store.url, token)
    assert len(before) == 2
    # without the key the archives are sealed with: one line naming the archive, nothing changed
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, **env, "STORE_ENCRYPTION_KEY": ""}
    done = subprocess.run([console_script("brain-store"), "rekey", "--new-key", NEW], capture_output=True, text=True,
                          env=full, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "rekey stopped at" in done.stderr and "STORE_ENCRYPTION_KEY" in done.stderr, done.stderr
    assert "re-sealed 2 blob(s) in 1 brain(s)" in run_cli(env, "rekey", "--new-key", NEW)
    assert "re-sealed 0 blob(s) in 1 brain(s); 2 already current" in run_cli(env, "rekey", "--new-key", NEW)
    # a replica that only knows the new key serves everything unchanged
    with running_store(tmp_path / "new", env={**env, "STORE_ENCRYPTION_KEY": NEW}, log_name="new.log") as store:
        assert _everything(store.url, token) == before


def test_serve_refuses_a_bucket_sealed_under_another_key(moto: S3Service, tmp_path: Path) -> None:
    env = {**moto.store_env(moto.new_bucket()), "STORE_ENCRYPTION_KEY": OLD}
    with running_store(tmp_path / "old", env=env, log_name="old.log") as store:
        _sealed_uploads(store.url, store.add_user("hana"), 1)
    base = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, **env,
            "STORE_DATA_DIR": str(tmp_path / "spool")}
    for key in ("", NEW):  # no key, another key
        argv = [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", "0"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env={**base, "STORE_ENCRYPTION_KEY": key},
                                  timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("the store started on a bucket its key cannot open") from None
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if not line.startswith("INFO botocore")]
        assert len(errors) == 1 and errors[0].startswith("Error: ") and "STORE_ENCRYPTION_KEY" in errors[0], done.stderr


def test_rekey_refuses_a_prefix_without_a_store(moto: S3Service, tmp_path: Path) -> None:
    """A mistyped STORE_S3_PREFIX "re-sealed 0 blob(s)" and exited 0, the store itself untouched
    under its old key (a mistyped --data was already refused)."""
    env = moto.store_env(moto.new_bucket(), prefix="stor")
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, **env,
            "STORE_DATA_DIR": str(tmp_path / "spool"), "STORE_ENCRYPTION_KEY": OLD}
    done = subprocess.run([console_script("brain-store"), "rekey", "--new-key", NEW], capture_output=True, text=True,
                          env=full, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: s3://{env['STORE_S3_BUCKET']}/stor/: no users.json there; is it the store's bucket and prefix?"]
    assert moto.keys(env["STORE_S3_BUCKET"]) == []
