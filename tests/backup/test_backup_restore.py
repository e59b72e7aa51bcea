"""Backup -> wipe -> restore gives the same store (archives byte-identical, tokens working), on disk and S3."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from tests.backup.support import KEY, OTHER_KEY, archive, cli, client, contents, fill, registry, sealed_brain, serve, upload
from tests.s3.servers import S3Service


def _s3(moto: S3Service, tmp: Path, name: str) -> dict[str, str]:
    return {"STORE_ENCRYPTION_KEY": KEY, **moto.store_env(moto.new_bucket()), "STORE_DATA_DIR": str(tmp / name)}


def test_backup_wipe_restore_disk_to_disk_and_s3(tmp_path: Path, moto: S3Service) -> None:
    """An encrypted store on disk -> backup -> wiped disk, and the same backup -> an empty bucket."""
    local = {"STORE_DATA_DIR": str(tmp_path / "local"), "STORE_ENCRYPTION_KEY": KEY}
    tokens, before = fill(local, tmp_path)
    backup = tmp_path / "store.backup"
    done = cli(local, "backup", "--to", str(backup))
    assert "backup done: 2 user(s), 3 brain(s), 5 archive(s) (5 sealed)" in done.stderr
    assert backup.stat().st_mode & 0o077 == 0
    assert len(before["alice"][1][0][2]) == 2  # type: ignore[index]  # the first brain has two snapshots

    shutil.rmtree(local["STORE_DATA_DIR"])
    done = cli(local, "restore", "--from", str(backup))
    assert "restore done: 2 user(s), 3 brain(s), 5 archive(s)" in done.stderr
    with serve(local, tmp_path) as server:
        assert contents(server, tokens) == before

    bucket = _s3(moto, tmp_path, "s3-spool")
    cli(bucket, "restore", "--from", str(backup))
    with serve(bucket, tmp_path) as server:
        assert contents(server, tokens) == before


def test_backup_s3_restore_to_disk(tmp_path: Path, moto: S3Service) -> None:
    """An encrypted store on S3 -> backup -> a fresh data directory."""
    bucket = _s3(moto, tmp_path, "s3-spool")
    tokens, before = fill(bucket, tmp_path, moto)
    backup = tmp_path / "from-s3.backup"
    done = cli(bucket, "backup", "--to", str(backup))
    assert "backup done: 2 user(s), 3 brain(s), 5 archive(s) (5 sealed)" in done.stderr
    local = {"STORE_DATA_DIR": str(tmp_path / "local"), "STORE_ENCRYPTION_KEY": KEY}
    cli(local, "restore", "--from", str(backup))
    with serve(local, tmp_path) as server:
        assert contents(server, tokens) == before


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "brains" in p.parts or p.name == "users.json"}


def test_plain_store_round_trip_is_byte_identical(tmp_path: Path) -> None:
    """Without encryption: users file, metadata and archives come back byte for byte."""
    src = {"STORE_DATA_DIR": str(tmp_path / "src")}
    users = registry(src)
    for name in ("alice", "bob"):
        user, _ = users.add(name)
        for i in range(2):
            _plain_brain(tmp_path / "src", user.id, archive({"a.md": f"{name}{i}".encode()}))
    from store.auth.users import DeniedIdentity

    users.edit(lambda doc: doc.denied.append(DeniedIdentity("https://idp.example", "sub-1", "2026-01-01T00:00:00Z")))
    cli(src, "backup", "--to", str(tmp_path / "b"))
    dst = {"STORE_DATA_DIR": str(tmp_path / "dst")}
    cli(dst, "restore", "--from", str(tmp_path / "b"))
    original, restored = _files(tmp_path / "src"), _files(tmp_path / "dst")
    assert len([k for k in original if "/blobs/" in k]) == 4
    assert restored == original
    assert registry(dst).denied()[0].subject == "sub-1"


def _plain_brain(data_dir: Path, user_id: str, data: bytes) -> None:
    import uuid

    from store.backup.apply import BrainBuilder
    from store.storage.base import ArchiveRef, BrainMeta
    from store.storage.local import LocalBackend

    ref = ArchiveRef(checksum=hashlib.sha256(data).hexdigest(), size=len(data), file_count=1,
                     synced_at="2026-01-01T00:00:00.000000Z")
    meta = BrainMeta(id=str(uuid.uuid4()), user_id=user_id, name="default", created_at=ref.synced_at, current=ref,
                     generation=3)
    builder = BrainBuilder(LocalBackend(data_dir, fsync=False), meta)
    builder.add(ref.checksum, lambda out: out.write(data))
    builder.finish()


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


def test_a_plain_backup_restored_into_a_store_with_a_key_is_served(tmp_path: Path) -> None:
    """A store with STORE_ENCRYPTION_KEY serves sealed archives only: a backup made before
    encryption was on has its archives sealed on the way in, not kept plain (then every
    download was refused with 500)."""
    src = {"STORE_DATA_DIR": str(tmp_path / "src")}
    user, token = registry(src).add("alice")
    data = archive({"a.md": b"plain before encryption"})
    _plain_brain(tmp_path / "src", user.id, data)
    cli(src, "backup", "--to", str(tmp_path / "b"))
    dst = {"STORE_DATA_DIR": str(tmp_path / "dst"), "STORE_ENCRYPTION_KEY": KEY}
    cli(dst, "restore", "--from", str(tmp_path / "b"))
    blobs = list((tmp_path / "dst" / "brains").rglob("blobs/*"))
    assert blobs and all(b.read_bytes()[:8] == b"BSTSEAL\x00" for b in blobs)
    with serve(dst, tmp_path) as server, client(server, token) as c:
        brain = c.get("/api/brains").json()[0]["id"]
        got = c.get(f"/api/brains/{brain}/sync")
        assert got.status_code == 200 and got.content == data, got.text


def test_restore_force_repairs_a_damaged_users_file(tmp_path: Path) -> None:
    """A restore is how an operator repairs a store: it refused to write over the damaged
    users.json (and sharing.json) with a UsersFileError traceback, after --force had already
    removed the brains the backup does not hold."""
    src = {"STORE_DATA_DIR": str(tmp_path / "src")}
    user, token = registry(src).add("alice")
    data = archive({"a.md": b"kept"})
    _plain_brain(tmp_path / "src", user.id, data)
    cli(src, "backup", "--to", str(tmp_path / "b"))
    for name in ("users.json", "sharing.json"):
        (tmp_path / "src" / name).write_text("{broken")
    (tmp_path / "src" / "users.json.last-good").unlink()
    done = cli(src, "restore", "--from", str(tmp_path / "b"), "--force", check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert [u.name for u in registry(src).users()] == ["alice"]
    with serve(src, tmp_path) as server, client(server, token) as c:
        brain = c.get("/api/brains").json()[0]["id"]
        assert c.get(f"/api/brains/{brain}/sync").content == data


def test_a_forced_restore_names_the_newer_versions_and_brains_it_replaces(tmp_path: Path) -> None:
    """--force makes the store equal to the backup, as asked; but it replaced newer versions
    without a word and said only how many brains it removed, not which."""
    env = {"STORE_DATA_DIR": str(tmp_path / "s")}
    user, token = registry(env).add("alice")
    old = archive({"a.md": b"old"})
    _plain_brain(tmp_path / "s", user.id, old)
    cli(env, "backup", "--to", str(tmp_path / "b"))
    with serve(env, tmp_path) as server, client(server, token) as c:
        brain = c.get("/api/brains").json()[0]["id"]
        upload(c, brain, archive({"a.md": b"newer"}))
        newer_at = c.get("/api/brains").json()[0]["last_synced_at"]
        later = c.post("/api/brains", json={"name": "later"}).json()["id"]
    done = cli(env, "restore", "--from", str(tmp_path / "b"), "--force")
    assert (f"brain {user.id}/{brain} (default): the store's version of {newer_at} is newer than the backup's "
            "(2026-01-01T00:00:00.000000Z); replaced by it") in done.stderr.splitlines(), done.stderr
    assert f"brain {user.id}/{later} (later): not in the backup; removed" in done.stderr.splitlines(), done.stderr
    with serve(env, tmp_path) as server, client(server, token) as c:
        assert c.get(f"/api/brains/{brain}/sync").content == old
    # restoring it once more replaces nothing newer: nothing said
    assert "newer" not in cli(env, "restore", "--from", str(tmp_path / "b"), "--force").stderr
