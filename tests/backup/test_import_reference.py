"""`brain-store import-reference` on data directories written by the reference store itself.

The fixtures (tests/fixtures/reference-store-data, a copy of ../shared/fixtures/reference-store-data)
hold a plain and a sealed data directory with the tokens, checksums and snapshot names an import must
keep (their README). Each test copies them to a temporary directory first.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tests.backup.support import KEY, archive, cli, client, serve, sha, upload
from tests.support.fixtures import fixture_dir

# Dates inside: tests/test_clock_ahead.py runs this module again with the clock a year ahead.
pytestmark = pytest.mark.clock

REF = fixture_dir("reference-store-data")
REF_KEY = "5f1c8a0e9b7d4c3a2f1e0d9c8b7a6f5e4d3c2b1a09f8e7d6c5b4a39281706f5e"


@dataclass(frozen=True)
class Person:
    """One row of the fixture README: what must keep working after the import."""

    name: str
    token: str
    brain: str
    etag: str
    snapshots: tuple[str, ...]  # newest first


def _people(kind: str) -> list[Person]:
    """The README's table for ``kind`` (plain or sealed)."""
    text = (REF / "README.md").read_text()
    section = text.split(f"## {kind}/", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\w+) \| `(bst_[\w-]+)` \| `([0-9a-f-]{36})` \| `\"([0-9a-f]{64})\"` \| \d+: ?(.*?) \|$",
                      section, re.M)
    assert len(rows) == 2, section
    return [Person(n, t, b, e, tuple(re.findall(r"`([^`]+)`", s))) for n, t, b, e, s in rows]


def _copy(kind: str, tmp: Path) -> Path:
    """A writable copy of one fixture directory (the originals are read-only)."""
    target = tmp / f"ref-{kind}"
    shutil.copytree(REF / kind, target, copy_function=shutil.copyfile)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    return target


def _ref_seal(user_id: str, data: bytes) -> bytes:
    """Seal ``data`` the way the reference does (spec store.md C), independently of the importer."""
    key = HKDF(hashes.SHA256(), 32, b"", f"brain-store:{user_id}".encode()).derive(bytes.fromhex(REF_KEY))
    nonce = os.urandom(12)
    return b"BSTORE1\x00" + nonce + AESGCM(key).encrypt(nonce, data, None)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def check_served(env: dict[str, str], tmp: Path, people: list[Person], *, restore: bool = True) -> None:
    """Every token works, every current archive and snapshot downloads with its checksum under its
    reference name, and (``restore``) the oldest snapshot restores; then a new upload still works."""
    with serve(env, tmp) as server:
        for who in people:
            with client(server, who.token) as c:
                me = c.get("/auth/me")
                assert me.status_code == 200, me.text
                assert me.json()["user"]["name"] == who.name
                [record] = c.get("/api/brains").json()
                assert record["id"] == who.brain and record["checksum"] == who.etag
                got = c.get(f"/api/brains/{who.brain}/sync")
                assert got.status_code == 200
                assert sha(got.content) == who.etag and got.headers["etag"] == f'"{who.etag}"'
                listing = c.get(f"/api/brains/{who.brain}/versions").json()
                assert tuple(v["version"] for v in listing["versions"]) == who.snapshots
                for v in listing["versions"]:
                    snap = c.get(f"/api/brains/{who.brain}/sync", params={"version": v["version"]})
                    assert snap.status_code == 200, snap.text
                    assert sha(snap.content) == v["checksum"] == snap.headers["x-checksum"]
                    assert v["date"].startswith(
                        f"{v['version'][:4]}-{v['version'][4:6]}-{v['version'][6:8]}T")
                if restore and who.snapshots:
                    oldest = listing["versions"][-1]
                    done = c.post(f"/api/brains/{who.brain}/versions/{oldest['version']}/restore")
                    assert done.status_code == 200, done.text
                    assert done.json()["checksum"] == oldest["checksum"]
                    now = c.get(f"/api/brains/{who.brain}/sync")
                    assert sha(now.content) == oldest["checksum"]
                    # the archive it replaced became a snapshot, named after every reference name
                    names = [v["version"] for v in c.get(f"/api/brains/{who.brain}/versions").json()["versions"]]
                    assert names[0] not in who.snapshots and names[0] > who.snapshots[0]
                    assert names[1:len(who.snapshots) + 1] == list(who.snapshots)
                if restore:
                    upload(c, who.brain, archive({"after-import.md": who.name.encode()}))
        assert client(server, "bst_" + "x" * 43).get("/auth/me").status_code == 401


CASES = [
    ("local", "plain", False),
    ("local", "sealed", False),
    ("local", "sealed", True),
    ("s3", "plain", True),
    ("s3", "sealed", False),
    ("s3", "sealed", True),
]


@pytest.mark.parametrize(("where", "kind", "ours"), CASES, ids=[f"{w}-{k}-{'sealed' if o else 'plain'}-here"
                                                                  for w, k, o in CASES])
def test_import_reference_data(where: str, kind: str, ours: bool, tmp_path: Path, request: Any) -> None:
    ref = _copy(kind, tmp_path)
    if where == "s3":
        moto = request.getfixturevalue("moto")
        env = moto.store_env(moto.new_bucket())
    else:
        env = {"STORE_DATA_DIR": str(tmp_path / "ours")}
    if ours:
        env["STORE_ENCRYPTION_KEY"] = KEY
    if kind == "sealed":
        env["REFERENCE_ENCRYPTION_KEY"] = REF_KEY  # the key from the environment, as documented
    out = cli(env, "import-reference", str(ref)).stdout
    sealed_files = 5 if kind == "sealed" else 0
    assert "imported 2 user(s) (0 already here), 2 brain(s) (0 already here), 5 archive(s) stored " \
           f"({sealed_files} reference file(s) were sealed); 0 warning(s)" in out
    if where == "local":
        blobs = list((tmp_path / "ours").rglob("blobs/*"))
        assert len(blobs) == 5
        assert all(b.read_bytes().startswith(b"BSTSEAL\x00" if ours else b"\x1f\x8b") for b in blobs)
    again = cli(env, "import-reference", str(ref))
    assert "imported 0 user(s) (2 already here), 0 brain(s) (2 already here), 0 archive(s)" in again.stdout
    check_served(env, tmp_path, _people(kind))


def test_rerun_changes_nothing(tmp_path: Path) -> None:
    ref = _copy("plain", tmp_path)
    env = {"STORE_DATA_DIR": str(tmp_path / "ours")}
    cli(env, "import-reference", str(ref))
    before = _tree(tmp_path / "ours")
    cli(env, "import-reference", str(ref))
    assert _tree(tmp_path / "ours") == before


def test_directory_mixing_plain_and_sealed_files(tmp_path: Path) -> None:
    """Files written before the reference got its key stay plain: older snapshots plain, newer sealed."""
    ref = _copy("plain", tmp_path)
    alice = next(p for p in (ref / "brains").glob("*/*") if (p / "versions").is_dir())
    user_id = alice.parent.name
    newest = sorted((alice / "versions").iterdir())[-1]
    for path in (alice / "current.bin", newest):
        path.write_bytes(_ref_seal(user_id, path.read_bytes()))
    env = {"STORE_DATA_DIR": str(tmp_path / "ours")}
    out = cli(env, "import-reference", str(ref), "--key", REF_KEY).stdout
    assert "(2 reference file(s) were sealed)" in out
    check_served(env, tmp_path, _people("plain"), restore=False)


@pytest.mark.parametrize("damage", ["wrong-key", "no-key", "flipped-byte"])
def test_bad_sealed_file_names_it_and_changes_nothing(damage: str, tmp_path: Path) -> None:
    ref = _copy("sealed", tmp_path)
    first = sorted((ref / "brains").rglob("*.bin"))[0]  # the survey's order: user dirs, then files
    damaged = None
    args = ["import-reference", str(ref), "--key", REF_KEY]
    if damage == "wrong-key":
        args[-1] = "ab" * 32
    elif damage == "no-key":
        args = args[:2]
    else:
        damaged = sorted((ref / "brains").rglob("versions/*.tar.gz"))[1]
        data = bytearray(damaged.read_bytes())
        data[40] ^= 0x01
        damaged.write_bytes(bytes(data))
    # an existing store with a user of its own: it must come out unchanged
    ours = tmp_path / "ours"
    cli({"STORE_DATA_DIR": str(ours)}, "user", "add", "carol")
    before = _tree(ours)
    done = cli({"STORE_DATA_DIR": str(ours)}, *args, check=False)
    assert done.returncode == 1
    named = (damaged or first).relative_to(ref).as_posix()
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"Error: {named} ")
    assert ("--key" in error) if damage == "no-key" else ("cannot be decrypted" in error)
    assert "Traceback" not in done.stderr
    assert _tree(ours) == before
    # a new data directory is not even created
    fresh = cli({"STORE_DATA_DIR": str(tmp_path / "fresh")}, *args, check=False)
    assert fresh.returncode == 1 and not (tmp_path / "fresh").exists()


def test_user_name_taken_here_refuses_everything(tmp_path: Path) -> None:
    ref = _copy("plain", tmp_path)
    ours = tmp_path / "ours"
    cli({"STORE_DATA_DIR": str(ours)}, "user", "add", "bob")
    before = _tree(ours)
    done = cli({"STORE_DATA_DIR": str(ours)}, "import-reference", str(ref), check=False)
    assert done.returncode == 1 and "already has a different user named 'bob'" in done.stderr
    assert _tree(ours) == before


def test_brain_of_a_user_removed_at_the_reference_is_kept_for_the_operator(tmp_path: Path) -> None:
    ref = _copy("plain", tmp_path)
    users = json.loads((ref / "users.json").read_text())
    bob = users["users"].pop()
    (ref / "users.json").write_text(json.dumps(users))
    env = {"STORE_DATA_DIR": str(tmp_path / "ours")}
    out = cli(env, "import-reference", str(ref)).stdout
    assert f"warning: brain {bob['id']}/" in out and "imported 1 user(s)" in out
    assert (tmp_path / "ours" / "brains" / bob["id"]).is_dir()


def test_interrupted_import_is_completed_by_a_rerun(tmp_path: Path) -> None:
    """A brain left half-built (placeholder snapshots, or created empty) is rebuilt, not skipped."""
    from store.archive.inspect import InspectLimits
    from store.backup.apply import BrainBuilder, is_partial
    from store.backup.reference import import_reference, survey
    from store.storage.local import LocalBackend
    from tests.backup.support import registry

    ref = _copy("plain", tmp_path)
    plan = survey(ref, None, InspectLimits(), [])
    alice, bob = sorted(plan.brains, key=lambda b: len(b.snapshots), reverse=True)
    backend = LocalBackend(tmp_path / "ours", fsync=False)
    half = BrainBuilder(backend, alice.meta(sealed=False))
    first = alice.snapshots[0][2]
    half.add(first.checksum, lambda out: out.write(first.path.read_bytes()))
    BrainBuilder(backend, bob.meta(sealed=False))  # created, no archive yet
    assert is_partial(backend.read_meta(alice.user_id, alice.brain_id))  # type: ignore[arg-type]

    report = import_reference(ref, registry({"STORE_DATA_DIR": str(tmp_path / "ours")}), lambda: backend,
                              ref_key=None, sealer=None, limits=InspectLimits())
    assert len(report.brains_added) == 2 and not report.warnings
    for brain in (alice, bob):
        meta = backend.read_meta(brain.user_id, brain.brain_id)
        want = brain.meta(sealed=False)
        assert meta is not None and not is_partial(meta)
        assert (meta.current, meta.snapshots) == (want.current, want.snapshots)
    check_served({"STORE_DATA_DIR": str(tmp_path / "ours")}, tmp_path, _people("plain"), restore=False)


def test_fixture_copy_matches_shared() -> None:
    """The copy in tests/fixtures is the reference's own output: equal to ../shared when that is there."""
    shared = fixture_dir("reference-store-data", prefer_shared=True)
    if shared == REF:
        pytest.skip("../shared/fixtures is not beside the repository")
    assert _tree(shared) == _tree(REF)


def test_reference_key_derivation_opens_the_fixture() -> None:
    """The importer's decryption against the reference's own sealed files (no store involved)."""
    from store.backup.reference import plaintext

    people = {p.brain: p for p in _people("sealed")}
    for current in (REF / "sealed" / "brains").glob("*/*/current.bin"):
        sealed, chunks = plaintext(current, current.parent.parent.name, bytes.fromhex(REF_KEY), "x")
        assert sealed and hashlib.sha256(b"".join(chunks)).hexdigest() == people[current.parent.name].etag


def test_new_snapshot_names_sort_after_reference_names() -> None:
    """Even when the clock is behind a reference snapshot's time, the next name sorts after it."""
    from datetime import UTC, datetime

    from store.service import next_version_name, valid_version_name
    from store.storage.base import ArchiveRef, BrainMeta, Snapshot

    ref = ArchiveRef(checksum="0" * 64, size=1, file_count=1, synced_at="2030-01-01T00:00:00.000000Z")
    meta = BrainMeta(id="b" * 8, user_id="u" * 8, name="n", created_at=ref.synced_at,
                     snapshots=(Snapshot(name="20300101T000000.000000999.tar.gz", date=ref.synced_at, archive=ref),))
    earlier = next_version_name(meta, datetime(2029, 1, 1, tzinfo=UTC))
    same = next_version_name(meta, datetime(2030, 1, 1, tzinfo=UTC))
    assert earlier == "20300101T000000.000001Z" and same == "20300101T000000.000000Z"
    assert earlier > meta.snapshots[0].name and same > meta.snapshots[0].name
    assert valid_version_name("20300101T000000.000000999.tar.gz") and valid_version_name(earlier)
    assert not valid_version_name("20300101T000000.000000999.tar") and not valid_version_name("../x")


@pytest.mark.parametrize("damage", ["users-not-utf8", "users-not-json", "meta-not-json", "archive-not-gzip"])
def test_damaged_reference_files_are_named_without_a_traceback(damage: str, tmp_path: Path) -> None:
    ref = _copy("plain", tmp_path)
    if damage == "users-not-utf8":
        (ref / "users.json").write_bytes(b"\xff\xfe{")
        named = "users.json"
    elif damage == "users-not-json":
        (ref / "users.json").write_text("{ nope")
        named = "users.json"
    else:
        brain = sorted((ref / "brains").glob("*/*"))[0]
        target = brain / ("meta.json" if damage == "meta-not-json" else "current.bin")
        target.write_bytes(b"{ nope" if damage == "meta-not-json" else b"plain text, not gzip")
        named = target.relative_to(ref).as_posix()
    done = cli({"STORE_DATA_DIR": str(tmp_path / "ours")}, "import-reference", str(ref), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"Error: {named} ")
    assert not (tmp_path / "ours").exists()


# -- issue 24, item 8: an import never takes over or slips into another account ---------


def _brain_dir(ref: Path, user: str) -> Path:
    users = {u["name"]: u["id"] for u in json.loads((ref / "users.json").read_text())["users"]}
    return next((ref / "brains" / users[user]).iterdir())


def _ours_with_carol(tmp: Path) -> tuple[Path, dict[str, str]]:
    """Our store, holding one user (carol), to import into: its directory and environment."""
    ours = tmp / "ours"
    env = {"STORE_DATA_DIR": str(ours)}
    cli(env, "user", "add", "carol")
    return ours, env


def _refused(env: dict[str, str], ref: Path, ours: Path, *extra: str) -> str:
    """Run an import that must be refused: one clear line, no traceback, the store unchanged."""
    before = _tree(ours)
    done = cli(env, "import-reference", str(ref), *extra, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert _tree(ours) == before
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: ") and line.endswith("nothing imported"), done.stderr
    return line


def test_brain_id_of_another_user_is_refused(tmp_path: Path) -> None:
    ref = _copy("plain", tmp_path)
    ours, env = _ours_with_carol(tmp_path)
    carols = next(next((ours / "brains").iterdir()).iterdir()).name
    # bob's reference brain claims carol's brain id
    bob = _brain_dir(ref, "bob")
    meta = json.loads((bob / "meta.json").read_text())
    meta["id"] = carols
    (bob / "meta.json").write_text(json.dumps(meta))
    bob.rename(bob.parent / carols)
    line = _refused(env, ref, ours)
    assert f"already has a brain with id {carols} belonging to another user" in line


def test_brains_are_not_added_to_an_existing_account_without_the_flag(tmp_path: Path) -> None:
    ref = _copy("plain", tmp_path)
    ours = tmp_path / "ours"
    env = {"STORE_DATA_DIR": str(ours)}
    cli(env, "import-reference", str(ref))
    alice = _brain_dir(ref, "alice")
    new_id = "0b5e7c1a-1111-4222-8333-944455556666"
    shutil.copytree(alice, alice.parent / new_id, copy_function=shutil.copyfile)
    meta = json.loads((alice.parent / new_id / "meta.json").read_text())
    meta["id"] = new_id
    (alice.parent / new_id / "meta.json").write_text(json.dumps(meta))
    line = _refused(env, ref, ours)
    assert "user 'alice' already has an account here" in line and "--into-existing" in line
    out = cli(env, "import-reference", str(ref), "--into-existing").stdout
    assert "1 brain(s) (2 already here)" in out
    assert (ours / "brains" / alice.parent.name / new_id).is_dir()


@pytest.mark.parametrize("name", ["bob\nalice    admin", "bob\u2028x", "bob\u202e", "alice@example.org"])
def test_unusable_user_names_are_refused(name: str, tmp_path: Path) -> None:
    """Newlines forge lines in `user list`; a name that is another user's e-mail passes for them."""
    ref = _copy("plain", tmp_path)
    users = json.loads((ref / "users.json").read_text())
    users["users"][1]["name"] = name  # bob
    (ref / "users.json").write_text(json.dumps(users))
    ours, env = _ours_with_carol(tmp_path)
    line = _refused(env, ref, ours)
    assert "e-mail address of another user" in line if "@" in name else "a user name is 1-128" in line


def test_deeply_nested_reference_json_is_one_line(tmp_path: Path) -> None:
    ref = _copy("plain", tmp_path)
    ours, env = _ours_with_carol(tmp_path)
    meta = _brain_dir(ref, "bob") / "meta.json"
    meta.write_text("[" * 100_000 + "]" * 100_000)
    assert "meta.json is nested too deeply" in _refused(env, ref, ours)
    (ref / "users.json").write_text('{"users": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "users.json is nested too deeply" in _refused(env, ref, ours)


def test_a_brain_store_data_directory_is_not_imported_as_a_reference(tmp_path: Path) -> None:
    """This store's own data directory keeps archives in blobs/, which the import never reads:
    its users came over with working tokens and every brain empty, with no warning."""
    theirs = {"STORE_DATA_DIR": str(tmp_path / "theirs")}
    token = cli(theirs, "user", "add", "dora").stdout.strip().splitlines()[-1]
    with serve(theirs, tmp_path) as server, client(server, token) as c:
        upload(c, c.get("/api/brains").json()[0]["id"], archive({"a.md": b"kept"}))
    done = cli({"STORE_DATA_DIR": str(tmp_path / "ours")}, "import-reference", str(tmp_path / "theirs"), check=False)
    assert done.returncode == 1 and "brain-store data directory" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "ours").exists()


@pytest.mark.parametrize(("email", "ours_has", "said"), [
    # printed on the user's line in `user list` like the name
    ("bob@example.org\nalice    admin", None, "an e-mail address is"),
    # an address a user here has (ignoring case)
    ("Carol@Example.org", "carol@example.org", "another user has the e-mail address 'Carol@Example.org'"),
])
def test_an_imported_e_mail_address_is_refused(tmp_path: Path, email: str, ours_has: str | None, said: str) -> None:
    """An imported account's e-mail must be one `user list` can print and no user here has."""
    ref = _copy("plain", tmp_path)
    users = json.loads((ref / "users.json").read_text())
    users["users"][1]["email"] = email
    (ref / "users.json").write_text(json.dumps(users))
    ours = tmp_path / "ours"
    env = {"STORE_DATA_DIR": str(ours)}
    cli(env, "user", "add", "carol", *(("--email", ours_has) if ours_has else ()))
    assert said in _refused(env, ref, ours)


@pytest.mark.parametrize("last_good", [True, False])
def test_a_damaged_users_file_here_imports_nothing(last_good: bool, tmp_path: Path) -> None:
    """The users are written last by an edit a damaged file refuses: the brains went in, then a
    UsersFileError traceback, contrary to "nothing changes unless everything can be imported"."""
    ref = _copy("plain", tmp_path)
    ours, env = _ours_with_carol(tmp_path)
    (ours / "users.json").write_text("{broken")
    if not last_good:
        (ours / "users.json.last-good").unlink()
    assert "fix or restore it first" in _refused(env, ref, ours)


# -- files of the reference directory that are not its own -----------------------------------


def _swap(path: Path, kind: str, outside: Path) -> None:
    """Put a named pipe, or a symbolic link to a file or folder ``outside``, where ``path`` was."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    if kind == "pipe":
        os.mkfifo(path)
    else:
        path.symlink_to(outside)


@pytest.mark.parametrize(("where", "kind"), [
    ("users.json", "pipe"), ("users.json", "link"),
    ("meta.json", "pipe"), ("current.bin", "pipe"), ("current.bin", "link"), ("snapshot", "pipe"),
    ("snapshot", "link"), ("brain folder", "link"), ("versions folder", "link"),
])
def test_a_named_pipe_or_link_in_the_reference_is_refused_at_once(where: str, kind: str, tmp_path: Path) -> None:
    """The import checked each file with is_file() and then open()ed it: a named pipe hung it (users.json,
    or one swapped in after the check), one in place of current.bin or meta.json was taken for none
    (the brain came over without its archive, or renamed 'default'), and a symbolic link was followed
    out of the directory (a file of the operator's imported into a user's brain). Now each is refused
    at once, naming it, and nothing is imported."""
    import time

    ref = _copy("plain", tmp_path)
    outside = tmp_path / "elsewhere"
    shutil.copytree(_brain_dir(ref, "alice"), outside, copy_function=shutil.copyfile)  # valid, but not the ref's
    brain = _brain_dir(ref, "alice")
    path = {"users.json": ref / "users.json", "meta.json": brain / "meta.json", "current.bin": brain / "current.bin",
            "snapshot": sorted((brain / "versions").iterdir())[0], "brain folder": brain,
            "versions folder": brain / "versions"}[where]
    mirror = outside if path == brain else outside / path.relative_to(brain) if path.is_relative_to(brain) \
        else outside / "meta.json"
    _swap(path, kind, mirror)
    ours, env = _ours_with_carol(tmp_path)
    started = time.monotonic()
    line = _refused(env, ref, ours)  # the helper's timeout: 120 s
    assert time.monotonic() - started < 30
    named = path.relative_to(ref).as_posix()
    said = "is a named pipe, not a regular file" if kind == "pipe" else \
        "is a symbolic link (the reference store makes none" if where.endswith("folder") else \
        "is a symbolic link, not a regular file"
    assert line.startswith(f"Error: {named} {said}"), line


def test_an_oversized_reference_record_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    ref = _copy("plain", tmp_path)
    ours, env = _ours_with_carol(tmp_path)
    meta = _brain_dir(ref, "bob") / "meta.json"
    with meta.open("r+b") as f:
        f.truncate(2 * 1024 * 1024)  # sparse: JSON followed by zero bytes
    line = _refused(env, ref, ours)
    assert line.startswith(f"Error: {meta.relative_to(ref).as_posix()} is larger than 1 MiB"), line
