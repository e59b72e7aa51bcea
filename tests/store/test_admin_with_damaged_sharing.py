"""The operator commands that change a user's or brain's access (`user remove`, `user purge`, `user
adopt`, `brain purge`, also with `--damaged`) check every state file they must change before changing
anything. With a damaged `sharing.json` (served from its last good copy, or with no readable copy at
all) `user remove` removed the user, then failed with a traceback when it came to their agent keys
and memberships, which stayed in place and unlogged; `user purge` and `brain purge` deleted the
brains and left their members. Now each refuses with one line naming the file and what to do, and
changes nothing; once the file is put back, the same command works. On a directory and on S3."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.backup.support import cli, tree
from tests.s3.servers import S3Service


def _id(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout.strip().splitlines()[-1]


def _store(env: dict[str, str]) -> dict[str, str]:
    """alice shares notes with bob (who has a key for it); carol, removed, left plans shared with
    alice; alice deleted old, shared with bob. Returns the ids."""
    for name in ("alice", "bob", "carol"):
        cli(env, "user", "add", name)
    ids = {"notes": _id(cli(env, "brain", "create", "notes", "--user", "alice")),
           "plans": _id(cli(env, "brain", "create", "plans", "--user", "carol")),
           "old": _id(cli(env, "brain", "create", "old", "--user", "alice"))}
    cli(env, "share", "notes", "--user", "alice", "--with", "bob", "--role", "viewer")
    cli(env, "share", "plans", "--user", "carol", "--with", "alice", "--role", "editor")
    cli(env, "share", "old", "--user", "alice", "--with", "bob", "--role", "viewer")
    cli(env, "key", "create", "--user", "bob", "--brain", "notes", "--scope", "read")
    cli(env, "brain", "delete", "old", "--user", "alice", "--yes")
    users = json.loads(cli(env, "user", "list", "--json").stdout)
    ids.update({u["name"]: u["id"] for u in users})
    cli(env, "user", "remove", "carol")
    return ids


def _refused(done: subprocess.CompletedProcess[str], command: str, location: str) -> None:
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"Error: sharing file {location} is unreadable or corrupt ("), errors[0]
    assert f"`brain-store {command}` must change it, so nothing was changed: put a good sharing.json back " \
           "(its last good copy sharing.json.last-good, or `brain-store restore` from a backup) and run it again" \
           in errors[0], errors[0]


class _Place:
    """The store's files: a data directory, or the objects of a bucket."""

    def __init__(self, env: dict[str, str], moto: S3Service | None) -> None:
        self.env, self.moto = env, moto
        self.data = Path(env["STORE_DATA_DIR"])
        self.bucket = env.get("STORE_S3_BUCKET", "")

    def location(self, name: str) -> str:
        return f"s3://{self.bucket}/store/{name}" if self.moto else str(self.data / name)

    def read(self, name: str) -> bytes:
        if self.moto:
            return self.moto.client().get_object(Bucket=self.bucket, Key=f"store/{name}")["Body"].read()
        return (self.data / name).read_bytes()

    def write(self, name: str, body: bytes) -> None:
        if self.moto:
            self.moto.client().put_object(Bucket=self.bucket, Key=f"store/{name}", Body=body)
        else:
            (self.data / name).write_bytes(body)

    def snapshot(self) -> dict[str, object]:
        if self.moto:
            s3 = self.moto.client()
            return {key: s3.get_object(Bucket=self.bucket, Key=key)["Body"].read() for key in self.moto.keys(self.bucket)}
        return dict(tree(self.data))


@pytest.mark.parametrize("where", ["directory", "s3"])
@pytest.mark.parametrize("damage", ["served from its last good copy", "no readable copy"])
def test_access_changing_commands_refuse_a_damaged_sharing_file_and_change_nothing(
        where: str, damage: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = {"STORE_DATA_DIR": str(tmp_path / "store"), "HOME": str(tmp_path)}
    moto: S3Service | None = None
    if where == "s3":
        moto = request.getfixturevalue("moto")
        env.update(moto.store_env(moto.new_bucket()))
    from tests.store.test_damaged_brains_count import _damage

    place = _Place(env, moto)
    ids = _store(env)
    _damage(env, moto, tmp_path, ids["alice"], ids["notes"])  # for `brain purge --damaged`
    good = place.read("sharing.json")
    place.write("sharing.json", good[: len(good) // 2])  # truncated, as a full disk leaves it
    if damage == "no readable copy":
        place.write("sharing.json.last-good", b"{")
    before = place.snapshot()

    for command, args in (("user remove", ("user", "remove", "bob")),
                          ("user remove", ("user", "remove", "bob", "--purge")),
                          ("user purge", ("user", "purge", ids["carol"])),
                          ("user adopt", ("user", "adopt", ids["carol"], "dave")),
                          ("brain purge", ("brain", "purge", ids["old"], "--yes")),
                          ("brain purge", ("brain", "purge", ids["notes"], "--damaged", "--yes"))):
        _refused(cli(env, *args, check=False), command, place.location("sharing.json"))
        assert place.snapshot() == before, args

    # put back as the message says: the same commands work, and take bob's key and membership away
    place.write("sharing.json", good)
    place.write("sharing.json.last-good", good)
    cli(env, "user", "remove", "bob")
    cli(env, "user", "adopt", ids["carol"], "dave")
    cli(env, "brain", "purge", ids["old"], "--yes")
    cli(env, "brain", "purge", ids["notes"], "--damaged", "--yes")
    doc = json.loads(place.read("sharing.json"))
    assert doc["keys"] == []
    assert [(s["brain_id"], s["members"]) for s in doc["shares"]] == [(ids["plans"], {ids["alice"]: "editor"})]


def test_adopt_refuses_a_damaged_users_file_or_a_taken_name_before_dropping_any_key(tmp_path: Path) -> None:
    """`adopt` changes both files: it dropped the removed user's keys and memberships, then the new
    user was refused (a damaged users.json, a name in use)."""
    env = {"STORE_DATA_DIR": str(tmp_path / "store"), "HOME": str(tmp_path)}
    data = Path(env["STORE_DATA_DIR"])
    ids = _store(env)
    # keys and memberships of a user removed by an older release, which left them in place
    sharing = json.loads((data / "sharing.json").read_bytes())
    for key in sharing["keys"]:
        key["user_id"] = ids["carol"]
    sharing["shares"][0]["members"] = {ids["carol"]: "viewer"}
    (data / "sharing.json").write_text(json.dumps(sharing))
    (data / "sharing.json.last-good").write_text(json.dumps(sharing))
    before = tree(data)

    taken = cli(env, "user", "adopt", ids["carol"], "alice", check=False)
    assert taken.returncode == 1 and "Traceback" not in taken.stderr, taken.stderr
    assert "Error: a user named 'alice' already exists" in taken.stderr, taken.stderr
    assert tree(data) == before

    users = (data / "users.json").read_bytes()
    (data / "users.json").write_bytes(users[: len(users) // 2])
    before = tree(data)
    damaged = cli(env, "user", "adopt", ids["carol"], "dave", check=False)
    assert damaged.returncode == 1 and "Traceback" not in damaged.stderr, damaged.stderr
    assert f"Error: users file {data / 'users.json'} is unreadable or corrupt (" in damaged.stderr, damaged.stderr
    assert "`brain-store user adopt` must change it, so nothing was changed: put a good users.json back" \
           in damaged.stderr, damaged.stderr
    assert tree(data) == before
