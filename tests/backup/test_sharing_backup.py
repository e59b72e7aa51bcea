"""Backup -> wipe -> restore keeps shared brains' members, agent keys and the sharing audit log."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import msgspec
import zstandard

from store.backup.format import MANIFEST, MANIFEST_SUM, SHARING, Entry, Manifest

from tests.backup.support import archive, cli, client, registry, serve, upload
from tests.s3.servers import S3Service


def test_round_trip_keeps_members_keys_and_audit(tmp_path: Path, moto: S3Service) -> None:
    """Disk -> backup -> wiped disk, and the same backup -> an empty bucket (moto)."""
    local = {"STORE_DATA_DIR": str(tmp_path / "local")}
    users = registry(local)
    tokens = {name: users.add(name, f"{name}@example.org")[1] for name in ("alice", "bob", "otto")}
    with serve(local, tmp_path) as server:
        with client(server, tokens["alice"]) as alice:
            brain = alice.post("/api/brains", json={"name": "shared"}).json()["id"]
            upload(alice, brain, archive({"memories/a.md": b"shared"}))
            assert alice.put(f"/api/brains/{brain}/members", json={"user": "bob", "role": "editor"}).status_code == 200
            for scope in ("read", "write"):
                made = alice.post("/api/keys", json={"brains": [brain], "scope": scope})
                assert made.status_code == 201
                tokens[f"key-{scope}"] = made.json()["key"]
            revoked = alice.post("/api/keys", json={"brains": [brain], "scope": "write"}).json()["key"]
            assert alice.delete(f"/api/keys/{revoked[:12]}").status_code == 204
            tokens["key-revoked"] = revoked
            before = alice.get(f"/api/brains/{brain}/audit").json()["events"]
    # (uploads are logged once a brain is shared)
    assert [e["action"] for e in before] == ["member_set", "key_created", "key_created", "key_created",
                                             "key_revoked"]

    backup = tmp_path / "store.backup"
    done = cli(local, "backup", "--to", str(backup))
    assert "sharing: 1 shared brain(s), 2 agent key(s)" in done.stderr
    shutil.rmtree(local["STORE_DATA_DIR"])
    done = cli(local, "restore", "--from", str(backup))
    assert "sharing: 1 shared brain(s), 2 agent key(s) restored" in done.stderr
    data = Path(local["STORE_DATA_DIR"])
    for path in (data / "sharing.json", data / "sharing-audit" / f"{brain}.jsonl"):
        assert path.stat().st_mode & 0o077 == 0
        assert revoked not in path.read_text() and tokens["key-write"] not in path.read_text()

    expected = {"alice": (200, 200), "bob": (200, 200), "otto": (404, 404), "key-read": (200, 403),
                "key-write": (200, 200), "key-revoked": (401, 401)}
    with serve(local, tmp_path) as server:
        got = {}
        for who in expected:
            with client(server, tokens[who]) as c:
                down = c.get(f"/api/brains/{brain}/sync").status_code
                up = c.put(f"/api/brains/{brain}/sync",
                           files={"brain": ("b.tar.gz", archive({"memories/a.md": who.encode()}))}).status_code
                got[who] = (down, up)
        assert got == expected
        with client(server, tokens["bob"]) as bob:
            listed = {b["id"]: (b["role"], b["owner"]) for b in bob.get("/api/brains").json()}
            assert listed[brain] == ("editor", "alice")
        with client(server, tokens["alice"]) as alice:
            after = alice.get(f"/api/brains/{brain}/audit").json()["events"]
    assert after[:len(before)] == before  # the restored log, then the uploads just made
    assert [e["action"] for e in after[len(before):]] == ["upload"] * 3  # alice, bob, key-write
    # --force over the changed store: the log and the members are the backed-up ones again
    assert cli(local, "restore", "--from", str(backup), "--force").returncode == 0
    with serve(local, tmp_path) as server, client(server, tokens["alice"]) as alice:
        assert alice.get(f"/api/brains/{brain}/audit").json()["events"] == before

    bucket = {**moto.store_env(moto.new_bucket()), "STORE_DATA_DIR": str(tmp_path / "s3-spool")}
    cli(bucket, "restore", "--from", str(backup))
    with serve(bucket, tmp_path) as server:
        got = {}
        for who in ("bob", "otto", "key-read", "key-revoked"):
            with client(server, tokens[who]) as c:
                got[who] = c.get(f"/api/brains/{brain}/sync").status_code
        assert got == {"bob": 200, "otto": 404, "key-read": 200, "key-revoked": 401}
        with client(server, tokens["alice"]) as alice:
            assert alice.get(f"/api/brains/{brain}/audit").json()["events"] == before


def test_backup_with_a_corrupt_sharing_document_is_refused(tmp_path: Path) -> None:
    """A restore refuses a backup whose sharing document does not decode, and changes nothing."""
    local = {"STORE_DATA_DIR": str(tmp_path / "local")}
    users = registry(local)
    token = users.add("alice", "alice@example.org")[1]
    with serve(local, tmp_path) as server, client(server, token) as alice:
        brain = alice.post("/api/brains", json={"name": "shared"}).json()["id"]
        upload(alice, brain, archive({"memories/a.md": b"x"}))
        assert alice.post("/api/keys", json={"brains": [brain], "scope": "read"}).status_code == 201
    backup = tmp_path / "store.backup"
    cli(local, "backup", "--to", str(backup))
    # rewrite the backup with a damaged sharing.json and a manifest that matches it
    members: dict[str, bytes] = {}
    with open(backup, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as zst, \
            tarfile.open(fileobj=zst, mode="r|") as tar:
        for info in tar:
            f = tar.extractfile(info)
            assert f is not None
            members[info.name] = f.read()
    assert SHARING in members
    members[SHARING] = b'{"version": 1, "shares": "nope"}'
    manifest = msgspec.json.decode(members[MANIFEST], type=Manifest)
    manifest.entries = [Entry(e.path, len(members[e.path]), hashlib.sha256(members[e.path]).hexdigest())
                        for e in manifest.entries]
    members[MANIFEST] = msgspec.json.encode(manifest)
    members[MANIFEST_SUM] = hashlib.sha256(members[MANIFEST]).hexdigest().encode() + b"\n"
    bad = tmp_path / "bad.backup"
    with open(bad, "wb") as raw, zstandard.ZstdCompressor(write_checksum=True).stream_writer(raw) as zst, \
            tarfile.open(fileobj=zst, mode="w|") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    target = {"STORE_DATA_DIR": str(tmp_path / "target")}
    done = cli(target, "restore", "--from", str(bad), check=False)
    assert done.returncode != 0 and "the sharing document is unreadable" in done.stderr
    assert not Path(target["STORE_DATA_DIR"]).exists()


def test_the_help_of_backup_and_restore_names_shares_and_agent_keys() -> None:
    """What docs/backup.md says a backup holds and a forced restore replaces: `backup --help`
    named only users, brains, archives and snapshots."""
    from click.testing import CliRunner

    from cli.store import main

    for command in ("backup", "restore"):
        said = " ".join(CliRunner().invoke(main, [command, "--help"]).output.split())
        assert "shares and agent keys" in said, (command, said)
