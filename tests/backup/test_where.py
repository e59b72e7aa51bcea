"""Where a backup is written and read from: an operator's slips are refused and change nothing."""

from __future__ import annotations

from pathlib import Path

from tests.backup.support import archive, cli, registry, sealed_brain, tree
from tests.s3.servers import S3Service

KEY = "33" * 32


def test_a_backup_is_not_written_inside_the_data_directory(tmp_path: Path) -> None:
    """`backup --to DATA/users.json` replaced the store's users file with the backup (and
    said `backup done`); any path in the data directory is refused, symbolic links followed."""
    data = tmp_path / "data"
    env = {"STORE_DATA_DIR": str(data), "STORE_ENCRYPTION_KEY": KEY}
    user, _ = registry(env).add("alice")
    sealed_brain(data, KEY, user.id, archive({"a.md": b"kept"}))
    (data / "backups").mkdir()
    (tmp_path / "link").symlink_to(data, target_is_directory=True)
    before = tree(data)
    for target in (data / "users.json", data / "backups" / "nightly.bak", tmp_path / "link" / "users.json"):
        done = cli(env, "backup", "--to", str(target), check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines() == [
            f"Error: {target} is inside the store's data directory {data}; write the backup elsewhere "
            "(it could overwrite the store's own files, and is lost with them)"], done.stderr
        assert tree(data) == before, target
    cli(env, "backup", "--to", str(tmp_path / "nightly.bak"))
    assert (tmp_path / "nightly.bak").is_file()


def test_a_bucket_prefix_without_a_store_is_not_backed_up_or_migrated(tmp_path: Path, moto: S3Service) -> None:
    """A mistyped STORE_S3_PREFIX (or s3:// URL) made an empty backup, or "migrated 0 user(s)",
    and said it was done (a data directory without users.json was already refused): a nightly
    backup could run for months holding nothing."""
    env = {**moto.store_env(moto.new_bucket(), prefix="store"), "STORE_DATA_DIR": str(tmp_path / "spool")}
    registry(env, moto).add("alice")
    typo = {**env, "STORE_S3_PREFIX": "stor"}
    where = f"s3://{env['STORE_S3_BUCKET']}/stor/"
    done = cli(typo, "backup", "--to", str(tmp_path / "nightly.bak"), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: {where}: no users.json there; is it the store's bucket and prefix?"], done.stderr
    assert not list(tmp_path.glob("nightly.bak*"))
    done = cli(env, "migrate", "--from", where, "--to", str(tmp_path / "moved"), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: {where}: no users.json there; is it the store's bucket and prefix?"], done.stderr
    assert not (tmp_path / "moved").exists()
    # the store's own prefix goes through
    assert "backup done: 1 user(s)" in cli(env, "backup", "--to", str(tmp_path / "nightly.bak")).stderr
    moved = cli(env, "migrate", "--from", f"s3://{env['STORE_S3_BUCKET']}/store", "--to", str(tmp_path / "moved"))
    assert "migrated 1 user(s)" in moved.stdout
