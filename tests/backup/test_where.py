"""Where a backup is written and read from: an operator's slips are refused and change nothing."""

from __future__ import annotations

import os
from pathlib import Path
from unittest.mock import ANY

from tests.backup.support import archive, cli, registry, sealed_brain, tree
from tests.s3.servers import S3Service

KEY = "33" * 32


def test_a_backup_overwrites_only_an_older_backup_and_none_of_the_store_s_files(tmp_path: Path) -> None:
    """The backup is renamed over FILE at the end: `backup --to DATA/users.json` replaced the
    store's users file with the backup (and said `backup done`), and any other file or device
    named went the same way. A new file directly in the data directory stays allowed: the
    compose recipe of docs/self-hosting.md writes /data/brain.bak."""
    data = tmp_path / "data"
    env = {"STORE_DATA_DIR": str(data), "STORE_ENCRYPTION_KEY": KEY}
    user, _ = registry(env).add("alice")
    sealed_brain(data, KEY, user.id, archive({"a.md": b"kept"}))
    (tmp_path / "link").symlink_to(data, target_is_directory=True)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    os.mkfifo(tmp_path / "pipe")
    before = tree(tmp_path)
    own = "is among the store's own files in {data}; write the backup elsewhere, or as a file of its own " \
          "directly in the data directory (like brain.bak)"
    refused = {
        data / "users.json": "exists and is not a backup; give the backup a file name of its own",
        tmp_path / "link" / "users.json": "exists and is not a backup; give the backup a file name of its own",
        notes: "exists and is not a backup; give the backup a file name of its own",
        tmp_path / "pipe": "exists and is not a regular file; give the backup a file name of its own",
        data / "sharing.json": own.format(data=data),
        data / "brains" / "nightly.bak": own.format(data=data),
    }
    for target, said in refused.items():
        done = cli(env, "backup", "--to", str(target), check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines() == [f"Error: {target} {said}"], done.stderr
        assert tree(tmp_path) == before, target
    for _ in range(2):  # the compose recipe; and again, over the older backup
        cli(env, "backup", "--to", str(data / "brain.bak"))
        assert {**before, "data/brain.bak": ANY} == tree(tmp_path)
    (tmp_path / "from-mktemp").write_bytes(b"")  # an empty file has nothing to lose
    cli(env, "backup", "--to", str(tmp_path / "from-mktemp"))


def test_a_target_that_cannot_be_looked_at_is_refused_in_one_line(tmp_path: Path) -> None:
    """A `--to` that is a symbolic link loop (or in a directory the operator may not read) ended
    the new check with a traceback."""
    data = tmp_path / "data"
    env = {"STORE_DATA_DIR": str(data)}
    registry(env).add("alice")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    before = tree(tmp_path)
    done = cli(env, "backup", "--to", str(loop), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"Error: cannot check {loop}: "), line
    assert tree(tmp_path) == before and loop.is_symlink()


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


def test_a_backup_is_not_written_where_the_store_keeps_a_folder_or_its_audit_log(tmp_path: Path) -> None:
    """`backup --to DATA/audit` was accepted while the audit log had not made its folder yet: the
    backup (token hashes included) stood as a file where the store makes its audit folder. The
    names of the store's other folders, and any place in a STORE_AUDIT_LOG folder elsewhere, are
    refused the same way, before anything is written."""
    data = tmp_path / "data"
    elsewhere = tmp_path / "audit-log"
    env = {"STORE_DATA_DIR": str(data), "STORE_AUDIT_LOG": str(elsewhere)}
    registry(env).add("alice")
    before = tree(tmp_path)
    own = "is among the store's own files in {data}; write the backup elsewhere, or as a file of its own " \
          "directly in the data directory (like brain.bak)"
    refused = {
        data / "audit": own.format(data=data),
        data / "spool": own.format(data=data),
        data / "sharing-audit": own.format(data=data),
        elsewhere / "nightly.bak": f"is in the store's audit log folder {elsewhere}; write the backup elsewhere",
    }
    for target, said in refused.items():
        done = cli(env, "backup", "--to", str(target), check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines() == [f"Error: {target} {said}"], done.stderr
        assert tree(tmp_path) == before, target
    cli({**env, "STORE_AUDIT_LOG": "on"}, "backup", "--to", str(data / "audit"), check=False)
    assert tree(tmp_path) == before
    cli(env, "backup", "--to", str(data / "audit.bak"))  # a name of its own directly there stays fine
    assert {**before, "data/audit.bak": ANY} == tree(tmp_path)


def test_slips_of_migrate_and_restore_are_refused_in_one_line_and_change_nothing(tmp_path: Path) -> None:
    """`migrate` onto its own source "migrated" nothing with status 0 and noted the store as migrated
    from itself; `restore --data` naming a file said `[Errno 17] File exists`, and `backup --to` into
    a directory that does not exist read the whole store first, then said `No such file or directory:
    '....partial'`."""
    data = tmp_path / "data"
    env = {"STORE_DATA_DIR": str(data)}
    registry(env).add("alice")
    cli(env, "backup", "--to", str(tmp_path / "nightly.bak"))
    (tmp_path / "link").symlink_to(data)
    (tmp_path / "a-file").write_text("not a store")
    before = tree(tmp_path)
    said = {
        ("migrate", "--from", str(data), "--to", f"{data}/"):
            f"--from and --to are the same store ({data.resolve()}); nothing migrated",
        ("migrate", "--from", str(tmp_path / "link"), "--to", str(data)):
            f"--from and --to are the same store ({data.resolve()}); nothing migrated",
        ("restore", "--from", str(tmp_path / "nightly.bak"), "--data", str(tmp_path / "a-file")):
            f"{tmp_path / 'a-file'} is not a directory; give --data the store's data directory (restore makes it "
            "when it does not exist)",
        ("backup", "--to", str(tmp_path / "nowhere" / "nightly.bak")):
            f"{tmp_path / 'nowhere'}: no such directory; make it first, or write the backup into an existing one",
    }
    for args, message in said.items():
        done = cli(env, *args, check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines() == [f"Error: {message}"], done.stderr
        assert tree(tmp_path) == before, args
