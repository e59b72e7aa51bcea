"""A backup whose users or sharing document was written by a newer release (a higher ``version``,
with fields this release does not know) is refused by `restore` before anything changes: restored
here, those fields would be dropped without a word (the store itself refuses such files when it
reads them, tests/store/test_newer_documents.py)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import zstandard

from tests.backup.support import cli, tree


def _as_newer_release(backup: Path, out: Path, name: str) -> None:
    """Copy ``backup`` with document ``name`` at version 2 plus a field of its own, its manifest
    entry and checksum made to match (a consistent backup a newer release could have written)."""
    data = zstandard.ZstdDecompressor().stream_reader(backup.read_bytes()).read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src:
        entries = [(info, src.extractfile(info).read()) for info in src.getmembers()]  # type: ignore[union-attr]
    bodies = {info.name: body for info, body in entries}
    doc = json.loads(bodies[name])
    bodies[name] = json.dumps({**doc, "version": 2, "future": {"kept": True}}).encode()
    manifest = json.loads(bodies["manifest.json"])
    for entry in manifest["entries"]:
        if entry["path"] == name:
            entry["size"], entry["sha256"] = len(bodies[name]), hashlib.sha256(bodies[name]).hexdigest()
    bodies["manifest.json"] = json.dumps(manifest).encode()
    bodies["manifest.sha256"] = hashlib.sha256(bodies["manifest.json"]).hexdigest().encode() + b"\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as dst:
        for info, _ in entries:
            info.size = len(bodies[info.name])
            dst.addfile(info, io.BytesIO(bodies[info.name]))
    out.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(buf.getvalue()))


def test_restore_refuses_documents_of_a_newer_release(tmp_path: Path) -> None:
    src = {"STORE_DATA_DIR": str(tmp_path / "src"), "HOME": str(tmp_path)}
    cli(src, "user", "add", "alice")
    cli(src, "user", "add", "bob")
    cli(src, "share", "default", "--user", "alice", "--with", "bob", "--role", "viewer")
    backup = tmp_path / "store.backup"
    cli(src, "backup", "--to", str(backup))
    cli(src, "restore", "--from", str(backup), "--force")  # as written by this release: fine

    for name, what in (("users.json", "users"), ("sharing.json", "sharing")):
        newer = tmp_path / f"newer-{name}.backup"
        _as_newer_release(backup, newer, name)
        before = tree(tmp_path / "src")
        done = cli(src, "restore", "--from", str(newer), "--force", check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"Error: restore refused: the backup's {what} document has version 2, newer than this " \
            "brain-store knows (up to 1): restore it with the release that made it" in done.stderr, done.stderr
        assert tree(tmp_path / "src") == before
        fresh = {"STORE_DATA_DIR": str(tmp_path / f"fresh-{what}"), "HOME": str(tmp_path)}
        assert cli(fresh, "restore", "--from", str(newer), check=False).returncode == 1
        assert not list((tmp_path / f"fresh-{what}").glob("*.json"))
