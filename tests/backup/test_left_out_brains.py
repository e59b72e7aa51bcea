"""A backup written while leaving out brains whose metadata was damaged (`backup` names them and
exits 1) records them in its manifest (`left_out`), and `restore --force` keeps the target's brain
of each such id as it is, saying so, instead of removing it as a brain gone at the source: restoring
last night's backup after repairing the brain deleted it. Restored into a store without it, the
brain is named as not restored. A backup made before the record (no `left_out`) restores as
before. On a directory and on S3."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import zstandard

from tests.backup.support import archive, brains_with_archives, cli, sha, tree
from tests.s3.cli import backend_for
from tests.s3.servers import S3Service


def _store(env: dict[str, str], tmp: Path) -> tuple[str, dict[str, str]]:
    """alice with brains fine and broken, each with an archive; returns her id and the brain ids."""
    token = cli(env, "user", "add", "alice").stdout.splitlines()[-1]
    brains = brains_with_archives(env, tmp, token, ("fine", "broken"))
    alice_id = json.loads(cli(env, "user", "list", "--json").stdout)[0]["id"]
    return alice_id, brains


def _without_record(backup: Path, older: Path) -> None:
    """``backup`` as a release before the record wrote it: the manifest without ``left_out``."""
    members: list[tuple[tarfile.TarInfo, bytes]] = []
    with open(backup, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zst, \
            tarfile.open(fileobj=zst, mode="r|") as tar:
        for info in tar:
            members.append((info, tar.extractfile(info).read()))  # type: ignore[union-attr]
    manifest = json.loads(dict((i.name, d) for i, d in members)["manifest.json"])
    assert manifest.pop("left_out")
    body = json.dumps(manifest).encode()
    replaced = {"manifest.json": body, "manifest.sha256": sha(body).encode() + b"\n"}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            data = replaced.get(info.name, data)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    older.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(out.getvalue()))


def test_restore_keeps_the_brains_a_backup_left_out(tmp_path: Path) -> None:
    data = tmp_path / "store"
    env = {"STORE_DATA_DIR": str(data), "HOME": str(tmp_path)}
    alice, brains = _store(env, tmp_path)
    broken_dir = data / "brains" / alice / brains["broken"]
    intact = (broken_dir / "meta.json").read_bytes()
    (broken_dir / "meta.json").write_bytes(intact[:40])
    backup = tmp_path / "store.backup"
    done = cli(env, "backup", "--to", str(backup), check=False)
    assert done.returncode == 1 and f"without 1 brain(s) whose metadata is damaged: {alice}/{brains['broken']}" \
        in done.stderr, done.stderr

    # still damaged at the target: left exactly as it is
    untouched = tree(broken_dir)
    done = cli(env, "restore", "--from", str(backup), "--force")
    assert f"brain {alice}/{brains['broken']} (metadata {broken_dir / 'meta.json'}: " in done.stderr, done.stderr
    assert "left out of the backup, its metadata was damaged when it was made; kept as it is here, still damaged" \
        in done.stderr, done.stderr
    assert "; 1 brain(s) left out of the backup kept as they were" in done.stderr, done.stderr
    assert tree(broken_dir) == untouched

    # repaired since: kept, archives and all (it was removed as "not in the backup")
    (broken_dir / "meta.json").write_bytes(intact)
    untouched = tree(broken_dir)
    done = cli(env, "restore", "--from", str(backup), "--force")
    assert f"brain {alice}/{brains['broken']} (broken): left out of the backup, its metadata was damaged when it " \
           "was made; kept as it is here" in done.stderr, done.stderr
    assert "not in the backup; removed" not in done.stderr, done.stderr
    assert tree(broken_dir) == untouched
    listed = {b["name"] for b in json.loads(cli(env, "brain", "list", "--json").stdout)}
    assert {"fine", "broken"} <= listed

    # into a store that never had it: everything else is restored, and the brain is named as missing
    other = {"STORE_DATA_DIR": str(tmp_path / "other"), "HOME": str(tmp_path)}
    done = cli(other, "restore", "--from", str(backup))
    assert f"brain {alice}/{brains['broken']}: left out of the backup ({alice}/{brains['broken']} (metadata " \
        in done.stderr and "and not in this store; NOT restored" in done.stderr, done.stderr
    assert "; 1 brain(s) left out of the backup NOT restored" in done.stderr, done.stderr
    assert {b["name"] for b in json.loads(cli(other, "brain", "list", "--json").stdout)} == listed - {"broken"}

    # a backup from before the record restores as it did: the brain it lacks is removed
    older = tmp_path / "older.backup"
    _without_record(backup, older)
    done = cli(env, "restore", "--from", str(older), "--force")
    assert f"brain {alice}/{brains['broken']} (broken): not in the backup; removed" in done.stderr, done.stderr
    assert not broken_dir.exists()


def test_a_manifest_naming_a_held_brain_as_left_out_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "store"
    env = {"STORE_DATA_DIR": str(data), "HOME": str(tmp_path)}
    alice, brains = _store(env, tmp_path)
    (data / "brains" / alice / brains["broken"] / "meta.json").write_bytes(b"{")
    backup = tmp_path / "store.backup"
    cli(env, "backup", "--to", str(backup), check=False)
    # the manifest edited (with its checksum) to call a held brain left out
    members: list[tuple[tarfile.TarInfo, bytes]] = []
    with open(backup, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zst, \
            tarfile.open(fileobj=zst, mode="r|") as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar]  # type: ignore[union-attr]
    manifest = json.loads(dict((i.name, d) for i, d in members)["manifest.json"])
    manifest["left_out"].append({"user_id": alice, "brain_id": brains["fine"], "reason": "x"})
    body = json.dumps(manifest).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, content in members:
            content = {"manifest.json": body, "manifest.sha256": sha(body).encode() + b"\n"}.get(info.name, content)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    backup.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(out.getvalue()))
    before = tree(data)
    done = cli(env, "restore", "--from", str(backup), "--force", check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"restore refused: the manifest lists brain {alice}/{brains['fine']} as left out, but the backup holds " \
           "it; the backup is corrupt" in done.stderr, done.stderr
    assert tree(data) == before


def test_on_s3_restore_keeps_a_brain_the_backup_left_out(tmp_path: Path, moto: S3Service) -> None:
    bucket = moto.new_bucket()
    env = {**moto.store_env(bucket), "STORE_DATA_DIR": str(tmp_path / "spool"), "HOME": str(tmp_path)}
    alice, brains = _store(env, tmp_path)
    key = backend_for(moto, env, tmp_path / "inspect").meta_key(alice, brains["broken"])
    s3 = moto.client()
    intact = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=intact[:40])
    backup = tmp_path / "s3.backup"
    assert cli(env, "backup", "--to", str(backup), check=False).returncode == 1

    s3.put_object(Bucket=bucket, Key=key, Body=intact)  # repaired since
    mine = [k for k in moto.keys(bucket) if brains["broken"] in k]
    before = {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in mine}
    assert len(before) >= 2  # its metadata and its archive
    done = cli(env, "restore", "--from", str(backup), "--force")
    assert f"brain {alice}/{brains['broken']} (broken): left out of the backup, its metadata was damaged when it " \
           "was made; kept as it is here" in done.stderr, done.stderr
    assert {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read()
            for k in moto.keys(bucket) if brains["broken"] in k} == before
