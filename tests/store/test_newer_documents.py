"""A users.json or sharing.json written by a newer release (a higher ``version``) is refused when it
is read, naming the file and both versions, and never rewritten: decoding drops the fields this
release does not know, so a command run after a downgrade (`user add`, `share`, ...) wrote the file
back without them. Files of this version or older read as before. On a directory and on S3."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.backup.support import cli
from tests.s3.servers import S3Service
from tests.support.processes import console_script, free_port


def _newer(path: Path) -> bytes:
    """Make the document at ``path`` one a future release wrote: version 2 and a field of its own."""
    doc = json.loads(path.read_bytes())
    doc["version"] = 2
    doc["future"] = {"kept": True}
    path.write_text(json.dumps(doc))
    return path.read_bytes()


def _refused(done: subprocess.CompletedProcess[str], what: str, path: object) -> None:
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert f"Error: {what} {path} has version 2, newer than this brain-store knows (up to 1)" in done.stderr, \
        done.stderr
    assert "run that release (or restore a backup made with this one); nothing was changed" in done.stderr


def _store(tmp_path: Path) -> tuple[dict[str, str], Path]:
    data = tmp_path / "store"
    env = {"STORE_DATA_DIR": str(data), "HOME": str(tmp_path)}
    cli(env, "user", "add", "alice")
    cli(env, "user", "add", "bob")
    cli(env, "brain", "create", "notes", "--user", "alice")
    cli(env, "share", "notes", "--user", "alice", "--with", "bob", "--role", "viewer")
    return env, data


def _files(data: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(data.iterdir()) if p.is_file()}


def test_a_newer_users_file_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    env, data = _store(tmp_path)
    _newer(data / "users.json")
    before = _files(data)
    for args in (("user", "add", "carol"), ("user", "rotate", "alice"), ("user", "remove", "bob"), ("user", "list"),
                 ("share", "notes", "--user", "alice", "--with", "bob", "--role", "editor"),
                 ("backup", "--to", str(tmp_path / "b.backup")),
                 ("migrate", "--from", str(data), "--to", str(tmp_path / "target"))):
        _refused(cli(env, *args, check=False), "users file", data / "users.json")
        assert _files(data) == before, args
    assert not (tmp_path / "b.backup").exists() and not (tmp_path / "target" / "users.json").exists()
    for workers in ("1", "2"):  # a server does not start on it either
        port = str(free_port())
        done = subprocess.run([console_script("brain-store"), "serve", "--port", port, "--workers", workers],
                              capture_output=True, text=True, timeout=60, env={**_env(env), "STORE_RATE_LIMITS": "0"})
        _refused(done, "users file", data / "users.json")
    assert _files(data) == before


def test_a_newer_sharing_file_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    env, data = _store(tmp_path)
    _newer(data / "sharing.json")
    before = _files(data)
    for args in (("share", "notes", "--user", "alice", "--with", "bob", "--role", "editor"),
                 ("unshare", "notes", "--user", "alice", "--with", "bob"),
                 ("key", "create", "--user", "alice", "--brain", "notes", "--scope", "read"), ("key", "list"),
                 ("user", "remove", "bob"), ("backup", "--to", str(tmp_path / "b.backup"))):
        _refused(cli(env, *args, check=False), "sharing file", data / "sharing.json")
        assert _files(data) == before, args


def test_files_of_this_version_or_older_read_as_before(tmp_path: Path) -> None:
    env, data = _store(tmp_path)
    for name in ("users.json", "sharing.json"):
        doc = json.loads((data / name).read_bytes())
        assert doc["version"] == 1
        del doc["version"]  # the oldest files had none: version 1 by default
        (data / name).write_text(json.dumps(doc))
    cli(env, "user", "add", "carol")
    cli(env, "share", "notes", "--user", "alice", "--with", "carol", "--role", "editor")
    assert "carol" in cli(env, "user", "list").stdout
    (data / "users.json").write_text(json.dumps({**json.loads((data / "users.json").read_bytes()), "version": 0}))
    cli(env, "user", "add", "dave")


def test_a_newer_users_object_in_a_bucket_is_refused(tmp_path: Path, moto: S3Service) -> None:
    bucket = moto.new_bucket()
    env = {**moto.store_env(bucket), "STORE_DATA_DIR": str(tmp_path / "spool"), "HOME": str(tmp_path)}
    cli(env, "user", "add", "alice")
    s3 = moto.client()
    doc = json.loads(s3.get_object(Bucket=bucket, Key="store/users.json")["Body"].read())
    s3.put_object(Bucket=bucket, Key="store/users.json", Body=json.dumps({**doc, "version": 3}).encode())
    before = {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in moto.keys(bucket)}
    done = cli(env, "user", "add", "bob", check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"users file s3://{bucket}/store/users.json has version 3, newer than this brain-store knows (up to 1)" \
        in done.stderr, done.stderr
    assert {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in moto.keys(bucket)} == before


def _env(env: dict[str, str]) -> dict[str, str]:
    import os

    return {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, "STORE_FSYNC": "0", **env}
