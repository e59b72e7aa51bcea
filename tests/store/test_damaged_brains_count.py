"""A brain whose metadata is damaged still holds its id and its archives, so it counts towards
``STORE_MAX_BRAINS`` on S3 as it does on local disk (on S3 it stopped counting once such a brain was
left out of listings: once its claim in the account was older than the grace given to a brain being
created, a user at the limit got another brain, and the damaged one's claim was dropped)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.backup.support import cli
from tests.s3.cli import backend_for
from tests.s3.servers import S3Service


def _damage(env: dict[str, str], moto: S3Service | None, tmp: Path, user_id: str, brain_id: str) -> bytes:
    """Cut the brain's metadata short (a file on disk, an object in the bucket); what it held."""
    original = swap_meta(env, moto, tmp, user_id, brain_id, lambda body: body[:40])
    if moto is not None:
        # the brains were made an hour ago: past the grace in which a new brain's claim counts on its own
        backend = backend_for(moto, env, tmp / "inspect")
        account = backend.account_key(user_id)
        s3 = moto.client()
        doc = json.loads(s3.get_object(Bucket=env["STORE_S3_BUCKET"], Key=account)["Body"].read())
        for claim in doc["brains"].values():
            claim["since"] = claim.get("since", 0) - 3600
        s3.put_object(Bucket=env["STORE_S3_BUCKET"], Key=account, Body=json.dumps(doc).encode())
    return original


def swap_meta(env: dict[str, str], moto: S3Service | None, tmp: Path, user_id: str, brain_id: str,
              change: Callable[[bytes], bytes]) -> bytes:
    """Replace the brain's metadata (file or object) by ``change`` of it, from outside the store;
    what it held (so a test can put it back: a repair)."""
    if moto is None:
        meta = Path(env["STORE_DATA_DIR"]) / "brains" / user_id / brain_id / "meta.json"
        body = meta.read_bytes()
        meta.write_bytes(change(body))
        return body
    key = backend_for(moto, env, tmp / "inspect").meta_key(user_id, brain_id)
    s3 = moto.client()
    body = s3.get_object(Bucket=env["STORE_S3_BUCKET"], Key=key)["Body"].read()
    s3.put_object(Bucket=env["STORE_S3_BUCKET"], Key=key, Body=change(body))
    return body


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_a_damaged_brain_counts_towards_the_limit(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = {"STORE_DATA_DIR": str(tmp_path / "store"), "HOME": str(tmp_path), "STORE_MAX_BRAINS": "2"}
    moto: S3Service | None = None
    if where == "s3":
        moto = request.getfixturevalue("moto")
        env.update(moto.store_env(moto.new_bucket()))
    cli(env, "user", "add", "alice")  # with her `default` brain
    notes = cli(env, "brain", "create", "notes", "--user", "alice").stdout.splitlines()[-1]
    alice = next(line.split()[0] for line in cli(env, "user", "list").stdout.splitlines() if "alice" in line)
    _damage(env, moto, tmp_path, alice, notes)

    done = cli(env, "brain", "create", "more", "--user", "alice", check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "Error: this account may not have more than 2 brains" in done.stderr, done.stderr
    listed = cli(env, "brain", "list", "--user", "alice").stdout
    assert "more" not in listed and "default" in listed

    # with `default` gone, one place is free: the damaged brain still holds the other
    default = next(b["id"] for b in json.loads(cli(env, "brain", "list", "--json").stdout) if b["name"] == "default")
    cli(env, "brain", "delete", default, "--yes")
    cli(env, "brain", "purge", default, "--yes")
    cli(env, "brain", "create", "again", "--user", "alice")
    if moto is not None:  # the damaged brain keeps its claim in the account
        account = backend_for(moto, env, tmp_path / "inspect").account_key(alice)
        doc = json.loads(moto.client().get_object(Bucket=env["STORE_S3_BUCKET"], Key=account)["Body"].read())
        assert notes in doc["brains"], doc
    done = cli(env, "brain", "create", "third", "--user", "alice", check=False)
    assert done.returncode == 1 and "may not have more than 2 brains" in done.stderr, done.stderr


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_a_damaged_brain_counts_towards_the_quota(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Its archives still take the space: `STORE_MAX_USER_MB` counts them (by the stored blobs, as
    its metadata cannot say), where they were left out and the user could store the quota again."""
    import os

    from tests.backup.support import archive, client, serve, upload

    env = {"STORE_DATA_DIR": str(tmp_path / "store"), "HOME": str(tmp_path), "STORE_MAX_USER_MB": "1"}
    moto: S3Service | None = None
    if where == "s3":
        moto = request.getfixturevalue("moto")
        env.update(moto.store_env(moto.new_bucket()))
    token = cli(env, "user", "add", "alice").stdout.splitlines()[-1]
    alice = next(line.split()[0] for line in cli(env, "user", "list").stdout.splitlines() if "alice" in line)
    with serve(env, tmp_path) as server, client(server, token) as c:
        big = c.post("/api/brains", json={"name": "big"}).json()["id"]
        other = c.post("/api/brains", json={"name": "other"}).json()["id"]
        upload(c, big, archive({"a.bin": os.urandom(600_000)}))  # random: the archive stays ~600 kB
    _damage(env, moto, tmp_path, alice, big)

    with serve(env, tmp_path) as server, client(server, token) as c:
        files = {"brain": ("brain.tar.gz", archive({"b.bin": os.urandom(600_000)}), "application/gzip")}
        refused = c.put(f"/api/brains/{other}/sync", files=files)
        assert refused.status_code == 413 and "quota" in refused.text, refused.text
        upload(c, other, archive({"c.bin": os.urandom(300_000)}))  # what is left of the quota still fits


def test_on_s3_the_quota_check_does_not_pay_per_damaged_brain(tmp_path: Path, moto: S3Service) -> None:
    """A quota-checked upload counts every damaged brain of the user by its blob objects: one
    listing of the user's blobs for all of them, where it listed each damaged brain's and read each
    damaged metadata object again (a LIST and a GET per damaged brain, every upload); the bytes are
    the same."""
    from tests.backup.support import brains_with_archives

    env = {"STORE_DATA_DIR": str(tmp_path / "store"), "HOME": str(tmp_path), **moto.store_env(moto.new_bucket())}
    token = cli(env, "user", "add", "alice").stdout.splitlines()[-1]
    alice = next(line.split()[0] for line in cli(env, "user", "list").stdout.splitlines() if "alice" in line)
    brains = brains_with_archives(env, tmp_path, token, ["a", "b", "c", "d"])
    for name in ("a", "b", "c"):
        _damage(env, moto, tmp_path, alice, brains[name])
    blobs: dict[str, int] = {}
    for page in moto.client().get_paginator("list_objects_v2").paginate(
            Bucket=env["STORE_S3_BUCKET"], Prefix=f"{env['STORE_S3_PREFIX']}/blobs/{alice}/"):
        for item in page["Contents"]:
            brain_id = item["Key"].split("/")[-2]
            blobs[brain_id] = blobs.get(brain_id, 0) + item["Size"]
    assert len(blobs) == 4 and all(blobs.values()), blobs

    backend = backend_for(moto, env, tmp_path / "quota")
    assert backend.usage(alice) == sum(blobs.values())  # a replica that has surveyed the user once
    calls: list[tuple[str, str]] = []
    backend.client.meta.events.register("before-call.s3", lambda params, model, **_: calls.append(
        (model.name, params["query_string"].get("prefix", "") if model.name == "ListObjectsV2" else params["url_path"])))
    with backend.transaction(alice, brains["d"], user_wide=True) as change:
        assert change.usage() == sum(blobs.values())  # d as it is read, a, b and c by their blob objects
    prefix = env["STORE_S3_PREFIX"]
    listed = [what for op, what in calls if op == "ListObjectsV2"]
    assert listed == [f"{prefix}/meta/{alice}/", f"{prefix}/blobs/{alice}/"], listed
    # the account and the brain being changed; no damaged metadata object again
    assert sorted(path.lstrip("/") for op, path in calls if op == "GetObject") == sorted(
        [backend.account_key(alice), backend.meta_key(alice, brains["d"])]), calls
