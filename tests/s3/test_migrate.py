"""`brain-store migrate` from a data directory to a bucket and back: users, brains, snapshots intact."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from tests.contract.harness import running_store
from tests.s3.archives import archive
from tests.s3.cli import run_cli
from tests.s3.servers import S3Service

# xdist groups (one per S3 service) are set in conftest.py


def _snapshot_state(url: str, token: str) -> dict[str, object]:
    """Everything a client can see: brains, archives and every snapshot's bytes."""
    headers = {"Authorization": f"Bearer {token}"}
    state: dict[str, object] = {}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for brain in client.get("/api/brains").json():
            versions = client.get(f"/api/brains/{brain['id']}/versions").json()["versions"]
            blobs = {}
            for v in versions:
                got = client.get(f"/api/brains/{brain['id']}/sync", params={"version": v["version"]})
                blobs[v["version"]] = hashlib.sha256(got.content).hexdigest()
            current = client.get(f"/api/brains/{brain['id']}/sync")
            record = {k: brain[k] for k in ("id", "name", "checksum", "size_bytes", "file_count", "created_at")}
            state[brain["id"]] = (record, hashlib.sha256(current.content).hexdigest() if current.status_code == 200
                                  else None, blobs)
    return state


def test_migrate_directory_to_s3_and_back(moto: S3Service, tmp_path: Path) -> None:
    source = tmp_path / "disk" / "data"
    with running_store(source, env={"STORE_ENCRYPTION_KEY": "22" * 32}, log_name="disk.log") as store:
        tokens = [store.add_user("dora"), store.add_user("eve")]
        headers = {"Authorization": f"Bearer {tokens[0]}"}
        brain = httpx.get(store.url + "/api/brains", headers=headers).json()[0]["id"]
        for n in range(3):
            httpx.put(f"{store.url}/api/brains/{brain}/sync", headers=headers,
                      files={"brain": ("b.tgz", archive({f"m{n}.md": f"memory {n}".encode()}))}).raise_for_status()
        httpx.post(store.url + "/api/brains", headers=headers, json={"name": "empty"}).raise_for_status()
        before = [_snapshot_state(store.url, t) for t in tokens]
    assert len(before[0]) == 2 and any(len(b[2]) == 2 for b in before[0].values())

    env = moto.store_env(moto.new_bucket(), prefix="moved")
    env["STORE_ENCRYPTION_KEY"] = "22" * 32
    url = f"s3://{env['STORE_S3_BUCKET']}/moved"
    # The run stages in a private directory of its own, gone afterwards: nothing fixed and
    # shared under the temporary directory (it was /tmp/brain-store-migrate-spool, world-readable).
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = run_cli({**env, "TMPDIR": str(temp)}, "migrate", "--from", str(source), "--to", url)
    assert "migrated 2 user(s), 3 brain(s)" in out
    assert list(temp.iterdir()) == []
    with running_store(tmp_path / "s3spool", env=env, log_name="s3.log") as store:
        assert [_snapshot_state(store.url, t) for t in tokens] == before
    # again: nothing is duplicated
    assert "0 user(s), 0 brain(s)" in run_cli(env, "migrate", "--from", str(source), "--to", url)

    back = tmp_path / "back" / "data"
    run_cli(env, "migrate", "--from", url, "--to", str(back))
    with running_store(back, env={"STORE_ENCRYPTION_KEY": "22" * 32}, log_name="back.log") as store:
        assert [_snapshot_state(store.url, t) for t in tokens] == before
    # every directory of the migrated store is 0700, as the store makes them
    directories = [p for p in back.rglob("*") if p.is_dir()]
    assert directories and all(p.stat().st_mode & 0o077 == 0 for p in directories), \
        [str(p) for p in directories if p.stat().st_mode & 0o077]
    # a user removed at the source since goes from the bucket too on the next pass (noted there)
    assert "removed user eve" in run_cli({"STORE_DATA_DIR": str(source)}, "user", "remove", "eve")
    assert ", 1 user(s) removed (gone from the source), " in run_cli(env, "migrate", "--from", str(source),
                                                                      "--to", url)
    with running_store(tmp_path / "s3spool", env=env, log_name="s3-again.log") as store:
        assert [httpx.get(store.url + "/auth/me", headers={"Authorization": f"Bearer {t}"}).status_code
                for t in tokens] == [200, 401]


def _sharing_state(url: str, owner: str, member: str, key: str, brain: str) -> dict[str, object]:
    """What sharing gives each party: the member's view of the brain, the key's reach, the owner's
    member list, key list and the brain's audit actions."""
    with httpx.Client(base_url=url, timeout=30) as client:
        def get(path: str, token: str) -> httpx.Response:
            return client.get(path, headers={"Authorization": f"Bearer {token}"})

        seen = {b["id"]: b["role"] for b in get("/api/brains", member).json()}
        return {
            "member_role": seen.get(brain),
            "key_status": get(f"/api/brains/{brain}/sync", key).status_code,
            "members": get(f"/api/brains/{brain}/members", owner).json(),
            "keys": [k["prefix"] for k in get("/api/keys", owner).json()["keys"]],
            "audit": [event["action"] for event in get(f"/api/brains/{brain}/audit", owner).json()["events"]],
        }


def test_migrate_carries_shares_agent_keys_and_the_audit_log(moto: S3Service, tmp_path: Path) -> None:
    """Members and roles, agent keys and a shared brain's audit log arrive too: they were left behind,
    so after moving to a bucket every share was gone and every agent key answered 401."""
    source = tmp_path / "disk" / "data"
    with running_store(source, log_name="disk.log") as store:
        dora, eve = store.add_user("dora"), store.add_user("eve")
        headers = {"Authorization": f"Bearer {dora}"}
        brain = httpx.get(store.url + "/api/brains", headers=headers).json()[0]["id"]
        httpx.put(f"{store.url}/api/brains/{brain}/sync", headers=headers,
                  files={"brain": ("b.tgz", archive({"m.md": b"memory"}))}).raise_for_status()
        httpx.put(f"{store.url}/api/brains/{brain}/members", headers=headers,
                  json={"user": "eve", "role": "editor"}).raise_for_status()
        made = httpx.post(f"{store.url}/api/keys", headers=headers, json={"brains": [brain], "scope": "read"})
        key = made.json()["key"]
        before = _sharing_state(store.url, dora, eve, key, brain)
    assert before["member_role"] == "editor" and before["key_status"] == 200
    assert {"member_set", "key_created"} <= set(before["audit"])  # type: ignore[arg-type]

    env = moto.store_env(moto.new_bucket(), prefix="moved")
    url = f"s3://{env['STORE_S3_BUCKET']}/moved"
    out = run_cli(env, "migrate", "--from", str(source), "--to", url)
    assert "1 shared brain(s), 1 agent key(s)" in out, out
    with running_store(tmp_path / "s3spool", env=env, log_name="s3.log") as store:
        assert _sharing_state(store.url, dora, eve, key, brain) == before
    # again: nothing is added twice
    assert "0 shared brain(s), 0 agent key(s)" in run_cli(env, "migrate", "--from", str(source), "--to", url)

    back = tmp_path / "back" / "data"
    run_cli(env, "migrate", "--from", url, "--to", str(back))
    with running_store(back, log_name="back.log") as store:
        assert _sharing_state(store.url, dora, eve, key, brain) == before


def test_migrating_a_plain_store_into_one_with_a_key_seals_its_archives(moto: S3Service, tmp_path: Path) -> None:
    """Run with the replicas' environment (docs/store-s3.md), STORE_ENCRYPTION_KEY included, a
    migration copied a plain store's archives plain into the bucket; replicas with the key
    serve sealed archives only, so every download answered 500. Restore already sealed them."""
    source = tmp_path / "disk" / "data"
    with running_store(source, log_name="disk.log") as store:
        token = store.add_user("dora")
        headers = {"Authorization": f"Bearer {token}"}
        brain = httpx.get(store.url + "/api/brains", headers=headers).json()[0]["id"]
        for n in range(2):
            httpx.put(f"{store.url}/api/brains/{brain}/sync", headers=headers,
                      files={"brain": ("b.tgz", archive({f"m{n}.md": f"memory {n}".encode()}))}).raise_for_status()
        before = _snapshot_state(store.url, token)
    env = {**moto.store_env(moto.new_bucket(), prefix="moved"), "STORE_ENCRYPTION_KEY": "22" * 32}
    url = f"s3://{env['STORE_S3_BUCKET']}/moved"
    out = run_cli(env, "migrate", "--from", str(source), "--to", url)
    assert "; 2 plain archive(s) sealed with STORE_ENCRYPTION_KEY" in out, out
    blobs = [key for key in moto.keys(env["STORE_S3_BUCKET"], "moved/blobs/")]
    assert len(blobs) == 2
    assert all(moto.client().get_object(Bucket=env["STORE_S3_BUCKET"], Key=key)["Body"].read(8) == b"BSTSEAL\x00"
               for key in blobs)
    with running_store(tmp_path / "s3spool", env=env, log_name="s3.log") as store:
        assert _snapshot_state(store.url, token) == before
    # and back to a directory with the same key: sealed already, copied as they are
    back = tmp_path / "back" / "data"
    assert "sealed with" not in run_cli(env, "migrate", "--from", url, "--to", str(back))
    with running_store(back, env={"STORE_ENCRYPTION_KEY": "22" * 32}, log_name="back.log") as store:
        assert _snapshot_state(store.url, token) == before
