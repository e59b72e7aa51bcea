"""On S3 sharing is not available yet: its routes say so (501), agent keys are refused (401),
the CLI refuses cleanly, and /health does not advertise it; ordinary use is unchanged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from tests.contract.harness import running_store
from tests.s3.servers import S3Service, wait_for_token
from tests.support.processes import console_script


def test_sharing_refused_cleanly_on_s3(moto: S3Service, tmp_path: Path) -> None:
    env = moto.store_env(moto.new_bucket())
    with running_store(tmp_path / "spool", env=env) as store:
        token = store.add_user("solo")
        wait_for_token(store.url, token)
        auth = {"Authorization": f"Bearer {token}"}
        assert "sharing" not in httpx.get(store.url + "/health").json()["capabilities"]
        brain = httpx.get(store.url + "/api/brains", headers=auth).json()[0]
        assert "role" in brain and brain["role"] == "owner"
        r = httpx.get(f"{store.url}/api/brains/{brain['id']}/members", headers=auth)
        assert r.status_code == 501 and "local-disk" in r.json()["error"]
        assert httpx.post(store.url + "/api/keys", headers=auth, json={"brains": [brain["id"]],
                                                                       "scope": "read"}).status_code == 501
        fake_key = {"Authorization": "Bearer bsk_" + "A" * 43}
        assert httpx.get(store.url + "/api/brains", headers=fake_key).status_code == 401
        done = subprocess.run([console_script("brain-store"), "key", "list", "--data", str(tmp_path / "spool")],
                              capture_output=True, text=True, env=store.env, timeout=60)
        assert done.returncode == 1 and "local-disk" in done.stderr and "Traceback" not in done.stderr
