"""A target store whose only brains have damaged metadata is not empty: `restore` without --force
refuses it and changes nothing (such brains were not counted, so the store passed for empty and the
restore went ahead over them). On a directory and on S3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.backup.support import cli, tree
from tests.s3.servers import S3Service
from tests.store.test_damaged_brains_count import _damage


def _contents(env: dict[str, str], moto: S3Service | None) -> dict[str, str]:
    """Every file of the data directory, or every object of the bucket, with its checksum."""
    if moto is None:
        return tree(Path(env["STORE_DATA_DIR"]))
    listed = moto.client().list_objects_v2(Bucket=env["STORE_S3_BUCKET"]).get("Contents", [])
    return {item["Key"]: item["ETag"] for item in listed}


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_a_store_of_damaged_brains_is_not_empty(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    other = {"STORE_DATA_DIR": str(tmp_path / "other"), "HOME": str(tmp_path)}
    cli(other, "user", "add", "carol")
    backup = tmp_path / "other.backup"
    cli(other, "backup", "--to", str(backup))

    env = {"STORE_DATA_DIR": str(tmp_path / "store"), "HOME": str(tmp_path)}
    moto: S3Service | None = None
    if where == "s3":
        moto = request.getfixturevalue("moto")
        env.update(moto.store_env(moto.new_bucket()))
    cli(env, "user", "add", "alice")  # with her `default` brain
    alice = next(line.split()[0] for line in cli(env, "user", "list").stdout.splitlines() if "alice" in line)
    brain = next(b["id"] for b in json.loads(cli(env, "brain", "list", "--json").stdout) if b["name"] == "default")
    cli(env, "user", "remove", "alice")  # her brain is kept: the store's only content
    _damage(env, moto, tmp_path, alice, brain)
    before = _contents(env, moto)

    done = cli(env, "restore", "--from", str(backup), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the target store is not empty; use --force" in done.stderr, done.stderr
    assert _contents(env, moto) == before
