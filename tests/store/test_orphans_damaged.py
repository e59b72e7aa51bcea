"""Operators' commands and brains whose metadata is damaged, on a directory and on S3.

Brains of a removed user: `user orphans` lists them (naming the damage), `user list` counts them,
`user purge` deletes them and `user adopt` hands them over as they are. A user whose brains were all
damaged was invisible to the three commands (`none`, `no brains of a removed user`), and nothing
could find or delete what was left on disk or in the bucket. A command given the id of a damaged
brain names the damage (it said `no brain`, `no deleted brain`).
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.backup.support import brains_with_archives, cli, client, serve
from tests.s3.servers import S3Service
from tests.store.test_damaged_brains_count import _damage, swap_meta


def _store(where: str, tmp: Path, request: pytest.FixtureRequest) -> tuple[dict[str, str], S3Service | None]:
    env = {"STORE_DATA_DIR": str(tmp / "store"), "HOME": str(tmp)}
    if where == "directory":
        return env, None
    moto: S3Service = request.getfixturevalue("moto")
    env.update(moto.store_env(moto.new_bucket()))
    return env, moto


def _ids(env: dict[str, str]) -> dict[str, str]:
    return {u["name"]: u["id"] for u in json.loads(cli(env, "user", "list", "--json").stdout)}


class _Brains(NamedTuple):
    """A user made for a test and the ids of their `default` and `notes` brains."""

    user_id: str
    default: str
    notes: str


def _user_with_notes(env: dict[str, str], tmp: Path, name: str) -> _Brains:
    """A new user ``name`` with a brain `notes` holding an archive beside their `default` one."""
    token = cli(env, "user", "add", name).stdout.splitlines()[-1]
    user_id = _ids(env)[name]
    notes = brains_with_archives(env, tmp, token, ["notes"])["notes"]
    default = next(b["id"] for b in json.loads(cli(env, "brain", "list", "--user", name, "--json").stdout)
                   if b["name"] == "default")
    return _Brains(user_id, default, notes)


def _leftovers(env: dict[str, str], moto: S3Service | None, user_id: str) -> list[str]:
    """What the store still holds for ``user_id``: its directory and the files under it, or its objects."""
    if moto is None:
        home = Path(env["STORE_DATA_DIR"]) / "brains" / user_id
        return [str(p) for p in home.rglob("*")] + ([str(home)] if home.exists() else [])
    prefix = env["STORE_S3_PREFIX"]
    return [key for part in ("meta", "blobs", "accounts")
            for key in moto.keys(env["STORE_S3_BUCKET"], f"{prefix}/{part}/{user_id}")]


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_a_removed_user_whose_brains_are_all_damaged_is_listed_and_purged(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env, moto = _store(where, tmp_path, request)
    alice, default, notes = _user_with_notes(env, tmp_path, "alice")
    cli(env, "user", "add", "bob")
    bob = _ids(env)["bob"]
    cli(env, "share", notes, "--with", "bob", "--role", "viewer")
    for brain in (default, notes):
        _damage(env, moto, tmp_path, alice, brain)
    cli(env, "user", "remove", "alice")

    listed = cli(env, "user", "orphans").stdout
    lines = listed.splitlines()
    for brain in (default, notes):
        row = next(line for line in lines if line.startswith(alice) and brain in line)
        assert "metadata damaged: " in row, listed
        assert ("meta.json" if moto is None else f"s3://{env['STORE_S3_BUCKET']}/") in row, listed
    # the members sharing.json keeps for a damaged brain are shown, as for a readable one (they were not)
    after = {brain: lines[lines.index(next(line for line in lines if brain in line)) + 1] for brain in (default, notes)}
    assert after[notes] == (f"  shared with bob (viewer): they keep their roles; `brain-store share|unshare {notes}` "
                            "manages them once its metadata is repaired"), listed
    assert "shared with" not in after[default], listed
    assert "`user purge` deletes it with the others" in listed, listed
    assert "2 brain(s) of 1 removed user(s) are still kept" in cli(env, "user", "list").stdout
    assert _leftovers(env, moto, alice)

    done = cli(env, "user", "purge", alice)
    assert f"deleted 2 brain(s) of removed user {alice}" in done.stdout, done.stdout
    assert "2 of them with damaged metadata: " in done.stdout, done.stdout
    assert all(f"{alice}/{brain} (metadata " in done.stdout for brain in (default, notes)), done.stdout
    assert _leftovers(env, moto, alice) == []
    assert cli(env, "user", "orphans").stdout.splitlines()[-1] == "none"
    assert "removed user" not in cli(env, "user", "list").stdout
    # bob's brain is not touched
    assert [b["name"] for b in json.loads(cli(env, "brain", "list", "--user", bob, "--json").stdout)] == ["default"]


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_adopt_hands_damaged_brains_over_as_they_are_and_a_repair_gives_them_back(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env, moto = _store(where, tmp_path, request)
    carol, default, notes = _user_with_notes(env, tmp_path, "carol")
    good_meta = _damage(env, moto, tmp_path, carol, notes)
    _damage(env, moto, tmp_path, carol, default)
    cli(env, "user", "remove", "carol")
    before = _leftovers(env, moto, carol)

    done = cli(env, "user", "adopt", carol, "dave")
    assert f"created user dave ({carol})" in done.stdout and "with the 2 brain(s) of the removed user" in done.stdout
    assert "2 of them have damaged metadata and stay unavailable until it is repaired" in done.stdout, done.stdout
    assert f"{carol}/{notes} (metadata " in done.stdout and f"{carol}/{default} (metadata " in done.stdout
    dave = done.stdout.splitlines()[-1]  # the token, last as always
    assert _leftovers(env, moto, carol) == before  # nothing dropped
    assert "removed user" not in cli(env, "user", "list").stdout

    with serve(env, tmp_path) as server, client(server, dave) as c:
        listed = c.get("/api/brains")
        assert listed.status_code == 200 and listed.json() == [], listed.text
    swap_meta(env, moto, tmp_path, carol, notes, lambda _: good_meta)  # the operator repairs it
    with serve(env, tmp_path) as server, client(server, dave) as c:
        assert [(b["id"], b["name"]) for b in c.get("/api/brains").json()] == [(notes, "notes")]
        got = c.get(f"/api/brains/{notes}/sync")
        assert got.status_code == 200, got.text
        with tarfile.open(fileobj=io.BytesIO(got.content), mode="r:gz") as tar:
            member = tar.extractfile("a.md")
            assert member is not None and member.read() == b"notes"


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_commands_given_a_damaged_brain_name_the_damage_and_change_nothing(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env, moto = _store(where, tmp_path, request)
    cli(env, "user", "add", "alice")
    bob_token = cli(env, "user", "add", "bob").stdout.splitlines()[-1]
    alice = _ids(env)["alice"]
    notes = cli(env, "brain", "create", "notes", "--user", "alice").stdout.splitlines()[-1]
    cli(env, "share", notes, "--with", "bob", "--role", "viewer")
    _damage(env, moto, tmp_path, alice, notes)
    damaged = swap_meta(env, moto, tmp_path, alice, notes, lambda body: body)

    # bob's brains are listed without the damaged one he was given (a traceback, and a 500 from the
    # store, for every listing of his)
    for command in (["brain", "list", "--user", "bob", "--json"], ["audit", "default", "--user", "bob"],
                    ["key", "create", "--user", "bob", "--brain", "default", "--scope", "read"]):
        done = cli(env, *command, check=False)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (command, done.stderr)
    assert [b["name"] for b in json.loads(cli(env, "brain", "list", "--user", "bob", "--json").stdout)] == ["default"]
    with serve(env, tmp_path) as server, client(server, bob_token) as c:
        listed = c.get("/api/brains")
        assert listed.status_code == 200 and [b["name"] for b in listed.json()] == ["default"], listed.text
        damaged_one = c.get(f"/api/brains/{notes}")  # named as damaged, as before
        assert damaged_one.status_code == 500 and "metadata is damaged" in damaged_one.text, damaged_one.text

    for command in (["brain", "delete", notes, "--yes"], ["brain", "purge", notes, "--yes"],
                    ["brain", "undelete", notes], ["brain", "rename", notes, "work"],
                    ["share", notes.upper(), "--with", "bob", "--role", "editor"], ["unshare", notes, "--with", "bob"],
                    ["key", "create", "--user", "alice", "--brain", notes, "--scope", "read"]):
        done = cli(env, *command, check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, (command, done.stderr)
        assert f"Error: brain {alice}/{notes} (metadata " in done.stderr, (command, done.stderr)
        assert "cannot be used until its metadata is repaired" in done.stderr, (command, done.stderr)
    assert swap_meta(env, moto, tmp_path, alice, notes, lambda body: body) == damaged
    assert notes not in cli(env, "key", "list").stdout  # bob's key above is for his default brain only
    # an id nobody has is still "no brain"
    done = cli(env, "brain", "delete", "00000000-0000-4000-8000-000000000000", "--yes", check=False)
    assert done.returncode == 1 and "Error: no brain '00000000-0000-4000-8000-000000000000'" in done.stderr

    # removing the user with --purge deletes it and names it, as `user purge` does
    done = cli(env, "user", "remove", "alice", "--purge")
    assert "and deleted their 2 brain(s), 1 of them with damaged metadata: " \
        f"{alice}/{notes} (metadata " in done.stdout, done.stdout
    assert _leftovers(env, moto, alice) == []


def _mentions(env: dict[str, str], moto: S3Service | None, text: str) -> list[str]:
    """The store's files (or objects) whose name or content mention ``text`` (not lock files: a purge
    leaves them, as every delete does; they carry no data)."""
    if moto is None:
        return [str(p) for p in Path(env["STORE_DATA_DIR"]).rglob("*") if not p.name.endswith(".lock")
                and (text in str(p) or (p.is_file() and text.encode() in p.read_bytes()))]
    s3, bucket = moto.client(), env["STORE_S3_BUCKET"]
    return [key for key in moto.keys(bucket)
            if text in key or text.encode() in s3.get_object(Bucket=bucket, Key=key)["Body"].read()]


def _archive_bytes(env: dict[str, str], moto: S3Service | None, user_id: str, brain_id: str) -> int:
    """What the brain's archives take: its blob files, or its blob objects as the bucket lists them."""
    if moto is None:
        return sum(p.stat().st_size for p in (Path(env["STORE_DATA_DIR"]) / "brains" / user_id / brain_id).glob("blobs/*"))
    prefix = f"{env['STORE_S3_PREFIX']}/blobs/{user_id}/{brain_id}/"
    pages = moto.client().get_paginator("list_objects_v2").paginate(Bucket=env["STORE_S3_BUCKET"], Prefix=prefix)
    return sum(item["Size"] for page in pages for item in page.get("Contents", []))


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_brain_purge_damaged_removes_one_damaged_brain_of_a_current_user(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Such a brain could be removed only by hand or with the whole user (`user remove --purge`):
    `brain purge ID --damaged` removes it with its archives, members and audit log, naming them, and
    is refused (nothing changed) without the flag, without --yes off a terminal, and for a readable
    brain."""
    from tests.store.test_admin_with_damaged_sharing import _Place

    env, moto = _store(where, tmp_path, request)
    token = cli(env, "user", "add", "alice").stdout.splitlines()[-1]
    cli(env, "user", "add", "bob")
    alice = _ids(env)["alice"]
    brains = brains_with_archives(env, tmp_path, token, ["notes", "work"])
    notes = brains["notes"]
    cli(env, "share", notes, "--with", "bob", "--role", "viewer")  # a member, and an event in its audit log
    _damage(env, moto, tmp_path, alice, notes)
    stored = _archive_bytes(env, moto, alice, notes)
    assert stored > 0 and _mentions(env, moto, notes)
    place = _Place(env, moto)
    before = place.snapshot()

    for args, expected in (
            ((notes,), f"`brain-store brain purge {notes} --damaged` removes it for good"),  # says how
            ((notes, "--damaged"), "run it in a terminal to confirm, or add --yes"),
            ((brains["work"], "--damaged", "--yes"),
             f"brain work ({brains['work']}) of alice has no damaged metadata, so --damaged does not remove it: "
             f"`brain-store brain delete {brains['work']}` then `brain-store brain purge {brains['work']}` does; "
             "nothing was removed"),
            (("00000000-0000-4000-8000-000000000000", "--damaged", "--yes"),
             "no brain with damaged metadata has the id '00000000-0000-4000-8000-000000000000'")):
        done = cli(env, "brain", "purge", *args, check=False)
        assert done.returncode == 1 and "Traceback" not in done.stderr, (args, done.stderr)
        assert expected in done.stderr, (args, done.stderr)
        assert place.snapshot() == before, args

    done = cli(env, "brain", "purge", notes.upper(), "--damaged", "--yes")
    assert done.stdout.startswith(f"purged brain {alice}/{notes} (metadata "), done.stdout
    assert done.stdout.rstrip().endswith(
        f" of alice: its archives ({stored} bytes), its members bob (viewer) and its audit log"), done.stdout
    assert _mentions(env, moto, notes) == []  # metadata, blobs, share, audit log: nothing names it
    assert sorted(b["name"] for b in json.loads(cli(env, "brain", "list", "--user", "alice", "--json").stdout)) \
        == ["default", "work"]
    again = cli(env, "brain", "purge", notes, "--damaged", "--yes", check=False)
    assert again.returncode == 1 and f"no brain with damaged metadata has the id {notes!r}" in again.stderr


@pytest.mark.parametrize("owner", ["current", "removed"])
def test_brain_purge_damaged_of_a_deleted_brain_says_brain_purge(
        owner: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A readable brain deleted already (a current user's, or kept for a removed user) given to
    `brain purge ID --damaged` was told to go through `brain delete ID` then `brain purge ID`: the
    refusal (nothing changed) says `brain purge ID`, and that removes it."""
    from tests.store.test_admin_with_damaged_sharing import _Place

    env, moto = _store("directory", tmp_path, request)
    alice, _, notes = _user_with_notes(env, tmp_path, "alice")
    cli(env, "brain", "delete", notes, "--yes")
    whose = "alice"
    if owner == "removed":
        cli(env, "user", "remove", "alice")
        whose = f"removed user {alice}"
    place = _Place(env, moto)
    before = place.snapshot()

    refused = cli(env, "brain", "purge", notes, "--damaged", "--yes", check=False)
    assert refused.returncode == 1 and refused.stderr.strip() == (
        f"Error: brain notes ({notes}) of {whose} has no damaged metadata, so --damaged does not remove it: it is "
        f"deleted already, `brain-store brain purge {notes}` removes it; nothing was removed"), refused.stderr
    assert place.snapshot() == before
    done = cli(env, "brain", "purge", notes, "--yes")
    assert done.stdout.startswith(f"purged brain notes ({notes}) of {whose}"), done.stdout


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_user_list_and_storage_used_count_what_the_quota_counts(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """`user list`'s BRAINS and WITH SNAPSHOTS and the API's storage_used left out a brain whose
    metadata is damaged (and `user list` a deleted one kept) while the quota and the brain limit count
    them: they count them now, and `user list` says how many of each, naming the damaged ones."""
    env, moto = _store(where, tmp_path, request)
    token = cli(env, "user", "add", "alice").stdout.splitlines()[-1]
    cli(env, "user", "add", "bob")
    alice = _ids(env)["alice"]
    brains = brains_with_archives(env, tmp_path, token, ["notes", "old"])
    old_bytes = next(b["stored_bytes"] for b in json.loads(cli(env, "brain", "list", "--json").stdout)
                     if b["id"] == brains["old"])
    cli(env, "brain", "delete", brains["old"], "--yes")  # kept until purged
    _damage(env, moto, tmp_path, alice, brains["notes"])
    expected = old_bytes + _archive_bytes(env, moto, alice, brains["notes"])  # default's archive is empty
    assert old_bytes > 0 and expected > old_bytes

    listed = {u["name"]: u for u in json.loads(cli(env, "user", "list", "--json").stdout)}
    assert {k: listed["alice"][k] for k in ("brains", "deleted_brains", "damaged_brains", "stored_bytes")} == \
        {"brains": 3, "deleted_brains": 1, "damaged_brains": 1, "stored_bytes": expected}, listed
    assert {k: listed["bob"][k] for k in ("brains", "deleted_brains", "damaged_brains", "stored_bytes")} == \
        {"brains": 1, "deleted_brains": 0, "damaged_brains": 0, "stored_bytes": 0}, listed
    table = cli(env, "user", "list").stdout.splitlines()
    row = next(line for line in table if line.startswith(alice)).split()
    assert (int(row[-3]), int(row[-2])) == (3, expected), table
    notes = [line for line in table if "brain(s) include" in line]
    assert len(notes) == 1 and notes[0].startswith("alice's 3 brain(s) include 1 deleted, kept until purged "), table
    assert f"and 1 with damaged metadata, counted by the archives they keep: {alice}/{brains['notes']} (metadata " \
        in notes[0] and notes[0].endswith("or removed with `brain-store brain purge ID --damaged`"), notes
    with serve(env, tmp_path) as server, client(server, token) as c:
        me = c.get("/auth/me")
        assert me.status_code == 200 and me.json()["storage_used"] == expected, me.text

    cli(env, "brain", "purge", brains["notes"], "--damaged", "--yes")
    cli(env, "brain", "purge", brains["old"], "--yes")
    listed = {u["name"]: u for u in json.loads(cli(env, "user", "list", "--json").stdout)}
    assert (listed["alice"]["brains"], listed["alice"]["stored_bytes"]) == (1, 0), listed
    assert "brain(s) include" not in cli(env, "user", "list").stdout


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_brain_purge_damaged_of_a_removed_users_last_brain_leaves_nothing_of_them(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """`brain purge ID --damaged` of a removed user's brain left, after their last one, an empty
    directory (or the account object) that no command listed: it goes as with `user purge`, and only
    then. Their readable brain is refused naming `user purge` (it said "no brain with damaged
    metadata", pointing at `brain list`, which does not show it)."""
    env, moto = _store(where, tmp_path, request)
    alice, default, notes = _user_with_notes(env, tmp_path, "alice")
    _damage(env, moto, tmp_path, alice, notes)
    cli(env, "user", "remove", "alice")
    before = _leftovers(env, moto, alice)

    refused = cli(env, "brain", "purge", default, "--damaged", "--yes", check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert (f"Error: brain default ({default}) of removed user {alice} has no damaged metadata, so --damaged does "
            f"not remove it: `brain-store user purge {alice}` does, with that user's 1 other brain(s) "
            "(`brain-store user orphans` lists them); nothing was removed") in refused.stderr, refused.stderr
    assert _leftovers(env, moto, alice) == before

    # another brain of theirs remains: what holds it stays
    done = cli(env, "brain", "purge", notes, "--damaged", "--yes")
    assert done.stdout.startswith(f"purged brain {alice}/{notes} (metadata ") and "last brain" not in done.stdout
    assert f"of removed user {alice}: its archives (" in done.stdout, done.stdout
    assert _leftovers(env, moto, alice) and all(notes not in item for item in _leftovers(env, moto, alice))
    orphans = cli(env, "user", "orphans").stdout
    assert f"{alice}  {default}" in orphans and notes not in orphans, orphans
    refused = cli(env, "brain", "purge", default, "--damaged", "--yes", check=False)
    assert f"`brain-store user purge {alice}` does (it is that user's only brain); nothing was removed" \
        in refused.stderr, refused.stderr

    _damage(env, moto, tmp_path, alice, default)  # now their last brain is damaged too
    done = cli(env, "brain", "purge", default, "--damaged", "--yes")
    assert _leftovers(env, moto, alice) == []  # the directory, or the account object, too
    assert done.stdout.splitlines()[-1] == \
        f"it was the last brain of removed user {alice}: nothing of theirs is kept any more", done.stdout
    assert cli(env, "user", "orphans").stdout.splitlines()[-1] == "none"
    assert "removed user" not in cli(env, "user", "list").stdout
