"""`brain-store import-reference`: a reference data directory (plain and sealed) keeps users, tokens and history."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import uuid
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.backup.support import KEY, archive, cli, client, serve, sha

REF_KEY = bytes(range(32))


def _token() -> str:
    return "bst_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()


def _seal(data: bytes, tag_last: bool) -> bytes:
    iv = os.urandom(12)
    sealed = AESGCM(REF_KEY).encrypt(iv, data, None)  # ciphertext | tag
    return iv + sealed if tag_last else iv + sealed[-16:] + sealed[:-16]


def _reference(root: Path, *, sealed: bool, users_as_object: bool) -> dict[str, dict]:
    """A reference store's data directory; returns per user name: token, brain id, archives by role."""
    people: dict[str, dict] = {}
    users = []
    for n, name in enumerate(("alice", "bob")):
        token, user_id, brain_id = _token(), str(uuid.uuid4()), str(uuid.uuid4())
        users.append({"id": user_id, "name": name, "email": f"{name}@example.org",
                      "token_hash": hashlib.sha256(token.encode()).hexdigest(), "created_at": "2025-06-01T08:00:00Z"})
        versions = [archive({"n.md": f"{name} v{i}".encode(), "x.md": os.urandom(500)}) for i in range(3)]
        current = archive({"n.md": f"{name} now".encode()})
        brain = root / "brains" / user_id / brain_id
        (brain / "versions").mkdir(parents=True)
        for i, data in enumerate(versions):
            body = _seal(data, tag_last=(n == 0)) if sealed else data
            (brain / "versions" / f"2025-07-0{i + 1}T10-00-00-000Z.bin").write_bytes(body)
        (brain / "current.bin").write_bytes(_seal(current, tag_last=(n == 0)) if sealed else current)
        (brain / "meta.json").write_text(json.dumps({
            "id": brain_id, "name": "default", "created_at": "2025-06-01T08:00:00Z", "checksum": sha(current),
            "size_bytes": len(current), "file_count": 1, "last_synced_at": "2025-07-04T10:00:00Z"}))
        people[name] = {"token": token, "id": user_id, "brain": brain_id, "current": current, "versions": versions}
    doc: object = {u["id"]: {k: v for k, v in u.items() if k != "id"} for u in users} if users_as_object else users
    (root / "users.json").write_text(json.dumps(doc))
    return people


def _check_served(env: dict[str, str], tmp: Path, people: dict[str, dict]) -> None:
    with serve(env, tmp) as server:
        for name, who in people.items():
            with client(server, who["token"]) as c:
                me = c.get("/auth/me")
                assert me.status_code == 200, me.text
                assert me.json()["user"]["id"] == who["id"]
                assert me.json()["user"]["email"] == f"{name}@example.org"
                [record] = c.get("/api/brains").json()
                assert record["id"] == who["brain"] and record["checksum"] == sha(who["current"])
                assert record["file_count"] == 1
                got = c.get(f"/api/brains/{who['brain']}/sync")
                assert got.content == who["current"] and got.headers["x-checksum"] == sha(who["current"])
                listing = c.get(f"/api/brains/{who['brain']}/versions").json()
                assert listing["total"] == 3
                assert [v["date"][:10] for v in listing["versions"]] == ["2025-07-03", "2025-07-02", "2025-07-01"]
                for v, want in zip(listing["versions"], reversed(who["versions"]), strict=True):
                    snap = c.get(f"/api/brains/{who['brain']}/sync", params={"version": v["version"]})
                    assert snap.status_code == 200 and snap.content == want
                    assert snap.headers["x-checksum"] == sha(want)
            bad = client(server, _token()).get("/auth/me")
            assert bad.status_code == 401


def test_import_plain_reference(tmp_path: Path) -> None:
    people = _reference(tmp_path / "ref", sealed=False, users_as_object=False)
    env = {"STORE_DATA_DIR": str(tmp_path / "ours")}
    out = cli(env, "import-reference", str(tmp_path / "ref")).stdout
    assert "imported 2 user(s) (0 already present), 2 brain(s) (0 already present), 8 archive(s)" in out
    assert "user alice: imported" in out
    _check_served(env, tmp_path, people)
    # running it again duplicates nothing
    again = cli(env, "import-reference", str(tmp_path / "ref")).stdout
    assert "imported 0 user(s) (2 already present), 0 brain(s) (2 already present), 0 archive(s)" in again


def test_import_sealed_reference_resealed_with_our_key(tmp_path: Path) -> None:
    people = _reference(tmp_path / "ref", sealed=True, users_as_object=True)
    env = {"STORE_DATA_DIR": str(tmp_path / "ours"), "STORE_ENCRYPTION_KEY": KEY}
    missing_key = cli(env, "import-reference", str(tmp_path / "ref"), check=False)
    assert missing_key.returncode != 0 and "--key" in missing_key.stdout
    # users came in; the brains did not (each refused whole), so a rerun with the key completes the import
    out = cli(env, "import-reference", str(tmp_path / "ref"), "--key", REF_KEY.hex()).stdout
    assert "2 brain(s) (0 already present), 8 archive(s)" in out
    assert "re-sealed with this store's key" in out
    blobs = list((tmp_path / "ours").rglob("blobs/*"))
    assert len(blobs) == 8 and all(b.read_bytes()[:8] == b"BSTSEAL\x00" for b in blobs)
    _check_served(env, tmp_path, people)


def test_wrong_reference_key_imports_no_brain(tmp_path: Path) -> None:
    _reference(tmp_path / "ref", sealed=True, users_as_object=False)
    env = {"STORE_DATA_DIR": str(tmp_path / "ours")}
    done = cli(env, "import-reference", str(tmp_path / "ref"), "--key", "ab" * 32, check=False)
    assert done.returncode != 0 and "cannot be decrypted" in done.stdout
    assert not list((tmp_path / "ours").rglob("meta.json"))


def test_interrupted_import_is_completed_by_a_rerun(tmp_path: Path) -> None:
    """A brain left half-built (placeholder snapshots) is rebuilt, not skipped, on the next run."""
    from store.archive.inspect import InspectLimits
    from store.backup.apply import BrainBuilder, is_partial
    from store.backup.reference import import_reference
    from store.storage.base import ArchiveRef, BrainMeta
    from store.storage.local import LocalBackend
    from tests.backup.support import registry

    people = _reference(tmp_path / "ref", sealed=False, users_as_object=False)
    alice = people["alice"]
    backend = LocalBackend(tmp_path / "ours", fsync=False)
    refs = [ArchiveRef(checksum=sha(d), size=len(d), file_count=2, synced_at="2025-07-01T10:00:00.000000Z")
            for d in alice["versions"][:2]]
    half = BrainBuilder(backend, BrainMeta(id=alice["brain"], user_id=alice["id"], name="default",
                                           created_at="2025-06-01T08:00:00.000000Z", current=refs[1]))
    for data, ref in zip(alice["versions"][:2], refs, strict=True):
        half.add(ref.checksum, lambda out, data=data: out.write(data), ref)
    assert is_partial(backend.read_meta(alice["id"], alice["brain"]))  # type: ignore[arg-type]

    lines: list[str] = []
    report = import_reference(tmp_path / "ref", backend, registry({"STORE_DATA_DIR": str(tmp_path / "ours")}),
                              ref_key=None, sealer=None, limits=InspectLimits(), progress=lines.append)
    assert len(report.brains_added) == 2 and not report.warnings
    meta = backend.read_meta(alice["id"], alice["brain"])
    assert meta is not None and not is_partial(meta)
    assert meta.current is not None and meta.current.checksum == sha(alice["current"])
    assert [s.archive.checksum for s in meta.snapshots] == [sha(d) for d in alice["versions"]]
