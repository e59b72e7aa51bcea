"""Where a backup is written and read from: an operator's slips are refused and change nothing."""

from __future__ import annotations

from pathlib import Path

from tests.backup.support import archive, cli, registry, sealed_brain, tree

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
