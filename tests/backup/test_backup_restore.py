"""Backup -> wipe -> restore gives the same store (archives byte-identical, tokens working), on disk and S3."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.backup.support import KEY, OTHER_KEY, archive, cli, contents, fill, registry, sealed_brain, serve
from tests.s3.servers import S3Service


def _location(kind: str, tmp: Path, moto: S3Service | None, name: str, key: str | None) -> dict[str, str]:
    env = {"STORE_ENCRYPTION_KEY": key} if key else {}
    if kind == "local":
        return {**env, "STORE_DATA_DIR": str(tmp / name)}
    assert moto is not None
    return {**env, **moto.store_env(moto.new_bucket()), "STORE_DATA_DIR": str(tmp / f"{name}-spool")}


@pytest.mark.parametrize(
    ("source", "target", "key"),
    [("local", "local", None), ("local", "s3", KEY), ("s3", "local", KEY)],
)
def test_backup_wipe_restore_is_identical(
    tmp_path: Path, request: pytest.FixtureRequest, source: str, target: str, key: str | None
) -> None:
    moto = request.getfixturevalue("moto") if "s3" in (source, target) else None
    src = _location(source, tmp_path, moto, "src", key)
    tokens, before = fill(src, tmp_path, moto)
    backup = tmp_path / "store.backup"
    done = cli(src, "backup", "--to", str(backup))
    assert "backup done: 2 user(s), 3 brain(s), 5 archive(s)" in done.stderr
    assert backup.stat().st_mode & 0o077 == 0

    # wipe: a local store loses its directory; an S3 target is a fresh, empty bucket
    if source == "local":
        shutil.rmtree(src["STORE_DATA_DIR"])
    dst = src if (source, target) == ("local", "local") else _location(target, tmp_path, moto, "dst", key)
    done = cli(dst, "restore", "--from", str(backup))
    assert "restore done: 2 user(s), 3 brain(s), 5 archive(s)" in done.stderr
    with serve(dst, tmp_path) as server:
        after = contents(server, tokens)
    assert after == before
    alice = after["alice"][1]  # type: ignore[index]
    assert len(alice[0][2]) == 2  # the first brain kept its two snapshots


def test_sealed_backup_needs_the_same_key(tmp_path: Path) -> None:
    src = {"STORE_DATA_DIR": str(tmp_path / "src"), "STORE_ENCRYPTION_KEY": KEY}
    user, _ = registry(src).add("alice")
    sealed_brain(tmp_path / "src", KEY, user.id, archive({"a.md": b"secret"}))
    backup = tmp_path / "b"
    cli(src, "backup", "--to", str(backup))
    for env in ({"STORE_DATA_DIR": str(tmp_path / "nokey")},
                {"STORE_DATA_DIR": str(tmp_path / "wrong"), "STORE_ENCRYPTION_KEY": OTHER_KEY}):
        done = cli(env, "restore", "--from", str(backup), check=False)
        assert done.returncode != 0
        assert "master key" in done.stderr or "STORE_ENCRYPTION_KEY" in done.stderr
        assert not Path(env["STORE_DATA_DIR"], "users.json").exists()
    # the old key as a previous key is enough
    env = {"STORE_DATA_DIR": str(tmp_path / "rotated"), "STORE_ENCRYPTION_KEY": OTHER_KEY,
           "STORE_ENCRYPTION_PREVIOUS_KEYS": KEY}
    cli(env, "restore", "--from", str(backup))
