"""A brain whose archive is rotated out while the backup reads it is read again (in process, no servers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from store.backup.restore import verify_backup
from store.backup.writer import write_backup
from store.storage.base import BlobMissing
from store.storage.local import LocalBackend
from tests.backup.support import archive, registry


class _RacingBackend:
    """Wraps a backend; the first blob open fails as if a concurrent upload had just removed it."""

    def __init__(self, inner: LocalBackend) -> None:
        self._inner = inner
        self.failures = 1
        self.meta_reads = 0

    def read_meta(self, user_id: str, brain_id: str) -> Any:
        self.meta_reads += 1
        return self._inner.read_meta(user_id, brain_id)

    def open_blob(self, user_id: str, brain_id: str, checksum: str) -> Any:
        if self.failures:
            self.failures -= 1
            raise BlobMissing(checksum)
        return self._inner.open_blob(user_id, brain_id, checksum)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_vanished_blob_rereads_the_brain(tmp_path: Path) -> None:
    from tests.backup.support import sealed_brain  # a sealed brain needs no server to set up

    env = {"STORE_DATA_DIR": str(tmp_path / "s")}
    users = registry(env)
    user, _ = users.add("alice")
    sealed_brain(tmp_path / "s", "11" * 32, user.id, archive({"a.md": b"x"}))
    backend = _RacingBackend(LocalBackend(tmp_path / "s", fsync=False))
    lines: list[str] = []
    manifest = write_backup(backend, users, tmp_path / "b", source="test", now="2026-01-01T00:00:00Z",
                            progress=lines.append)
    assert backend.meta_reads == 2 and manifest.archives == 1 and manifest.sealed_archives == 1
    assert any("backup done" in line for line in lines)
    verified = verify_backup(tmp_path / "b")
    assert len(verified.metas) == 1


def test_archives_pass_through_the_backup_s_directory_not_tmp(tmp_path: Path, monkeypatch: Any) -> None:
    """The scratch copies sit next to the backup file, where the operator made room: in the
    container /tmp is a 64 MiB tmpfs, and one brain with its snapshots can be larger."""
    import tempfile

    from tests.backup.support import sealed_brain

    users = registry({"STORE_DATA_DIR": str(tmp_path / "s")})
    user, _ = users.add("alice")
    sealed_brain(tmp_path / "s", "11" * 32, user.id, archive({"a.md": b"x"}))
    unusable = tmp_path / "tmp-is-full"
    unusable.write_text("")  # anything made under it fails, as on a full tmpfs
    monkeypatch.setattr(tempfile, "tempdir", str(unusable))
    (tmp_path / "out").mkdir()
    manifest = write_backup(LocalBackend(tmp_path / "s", fsync=False), users, tmp_path / "out" / "b",
                            source="test", now="2026-01-01T00:00:00Z")
    assert manifest.archives == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["b"]


def test_a_users_file_read_as_nothing_is_not_backed_up(tmp_path: Path) -> None:
    """users.json damaged and no last good copy: the backup held 0 users (exit 0), and its
    restore would have removed every user. With the last good copy it is that copy."""
    import pytest

    from store.auth.users import UserRegistry
    from store.backup.format import BackupError

    data = tmp_path / "s"
    registry({"STORE_DATA_DIR": str(data)}).add("alice")
    (data / "users.json").write_text("{broken")
    manifest = write_backup(LocalBackend(data, fsync=False), UserRegistry(data, fsync=False), tmp_path / "b1",
                            source="test", now="2026-01-01T00:00:00Z")
    assert manifest.users == 1  # served from users.json.last-good
    (data / "users.json.last-good").unlink()
    with pytest.raises(BackupError, match="no readable last good copy"):
        write_backup(LocalBackend(data, fsync=False), UserRegistry(data, fsync=False), tmp_path / "b2",
                     source="test", now="2026-01-01T00:00:00Z")
    assert not (tmp_path / "b2").exists() and not (tmp_path / "b2.partial").exists()


def test_migrate_refuses_a_users_file_read_as_nothing(tmp_path: Path) -> None:
    """The same for `migrate`: the target got 0 users (and the brains as orphans)."""
    from tests.backup.support import cli

    data = tmp_path / "s"
    registry({"STORE_DATA_DIR": str(data)}).add("alice")
    (data / "users.json").write_text("{broken")
    (data / "users.json.last-good").unlink()
    done = cli({}, "migrate", "--from", str(data), "--to", str(tmp_path / "t"), check=False)
    assert done.returncode == 1 and "no readable last good copy" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "t").exists()


def test_migrate_refuses_a_sharing_file_read_as_nothing(tmp_path: Path) -> None:
    """`migrate` copies the shares and agent keys too: a sharing.json damaged without a last good
    copy stops it before anything is written, instead of leaving every share behind."""
    from tests.backup.support import cli

    data = tmp_path / "s"
    registry({"STORE_DATA_DIR": str(data)}).add("alice")
    (data / "sharing.json").write_text("{broken")
    done = cli({}, "migrate", "--from", str(data), "--to", str(tmp_path / "t"), check=False)
    assert done.returncode == 1 and "no readable last good copy" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "t").exists()
