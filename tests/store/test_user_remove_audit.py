"""`brain-store user remove` notes in each brain's sharing audit log the memberships and agent keys
it takes away with the user (actor ``operator``, named ``operator (user remove)``), as `unshare` and
`key revoke` note theirs: the log of a brain no longer said how a member or a key went. On a
directory and on S3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.backup.support import cli
from tests.s3.servers import S3Service


def _audit(env: dict[str, str], brain: str, owner: str) -> list[dict[str, str]]:
    out = cli(env, "audit", brain, "--user", owner).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_user_remove_notes_the_memberships_and_keys_it_takes_away(where: str, tmp_path: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    env = {"STORE_DATA_DIR": str(tmp_path / "store"), "HOME": str(tmp_path)}
    if where == "s3":
        moto: S3Service = request.getfixturevalue("moto")
        env.update(moto.store_env(moto.new_bucket()))
    for name in ("alice", "bob", "carol"):
        cli(env, "user", "add", name)
    cli(env, "brain", "create", "notes", "--user", "alice")
    cli(env, "brain", "create", "plans", "--user", "carol")
    cli(env, "share", "notes", "--user", "alice", "--with", "bob", "--role", "editor")
    cli(env, "share", "plans", "--user", "carol", "--with", "bob", "--role", "viewer")
    cli(env, "share", "plans", "--user", "carol", "--with", "alice", "--role", "viewer")
    key = cli(env, "key", "create", "--user", "bob", "--brain", "notes", "--brain", "plans",
              "--scope", "read").stdout.splitlines()[-1]
    bob_id = next(json.loads(line)["member"] for line in cli(env, "audit", "notes", "--user", "alice").stdout
                  .splitlines() if json.loads(line)["action"] == "member_set")
    before = {"notes": _audit(env, "notes", "alice"), "plans": _audit(env, "plans", "carol")}

    cli(env, "user", "remove", "bob")

    for brain, owner, role in (("notes", "alice", "editor"), ("plans", "carol", "viewer")):
        events = _audit(env, brain, owner)
        assert events[:len(before[brain])] == before[brain]
        added = [{k: v for k, v in e.items() if k != "ts"} for e in events[len(before[brain]):]]
        assert sorted(added, key=lambda e: e["action"]) == [
            {"action": "key_revoked", "actor": "operator", "actor_name": "operator (user remove)",
             "brain": added[0]["brain"], "key": key[:12], "member": bob_id},
            {"action": "member_removed", "actor": "operator", "actor_name": "operator (user remove)",
             "brain": added[0]["brain"], "member": bob_id, "member_name": "bob", "role": role},
        ], added
    # alice's membership of plans stays, and nothing is noted for it
    assert not [e for e in _audit(env, "plans", "carol")[len(before["plans"]):] if e.get("member") != bob_id]


def test_user_remove_purge_takes_the_members_and_audit_logs_of_the_brains_it_deletes(tmp_path: Path) -> None:
    """As `user purge` does: `user remove --purge` kept the deleted brains' shares in sharing.json
    and their audit logs (member names and all) in sharing-audit/."""
    data = tmp_path / "store"
    env = {"STORE_DATA_DIR": str(data), "HOME": str(tmp_path)}
    for name in ("alice", "bob"):
        cli(env, "user", "add", name)
    notes = cli(env, "brain", "create", "notes", "--user", "alice").stdout.splitlines()[-1]
    plans = cli(env, "brain", "create", "plans", "--user", "bob").stdout.splitlines()[-1]
    cli(env, "share", "notes", "--user", "alice", "--with", "bob", "--role", "editor")
    cli(env, "share", "plans", "--user", "bob", "--with", "alice", "--role", "viewer")
    assert (data / "sharing-audit" / f"{notes}.jsonl").exists()

    cli(env, "user", "remove", "alice", "--purge")

    assert json.loads((data / "sharing.json").read_bytes())["shares"] == []
    assert not (data / "sharing-audit" / f"{notes}.jsonl").exists()
    # bob's brain keeps its log, which notes alice's membership going
    assert [e["action"] for e in _audit(env, plans, "bob")][-1] == "member_removed"


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_purging_a_user_takes_the_shares_of_their_damaged_brains(where: str, tmp_path: Path,
                                                                 request: pytest.FixtureRequest) -> None:
    """`user remove --purge` and `user purge` delete a user's brains whose metadata is damaged as
    well; their shares stayed in sharing.json (only the readable brains' were dropped)."""
    from tests.s3.cli import backend_for
    from tests.store.test_damaged_brains_count import _damage

    env = {"STORE_DATA_DIR": str(tmp_path / "store"), "HOME": str(tmp_path)}
    moto: S3Service | None = None
    if where == "s3":
        moto = request.getfixturevalue("moto")
        env.update(moto.store_env(moto.new_bucket()))

    def shared() -> set[str]:
        if moto is None:
            doc = json.loads((tmp_path / "store" / "sharing.json").read_bytes())
        else:
            key = backend_for(moto, env, tmp_path / "inspect").bucket.key("sharing.json")
            doc = json.loads(moto.client().get_object(Bucket=env["STORE_S3_BUCKET"], Key=key)["Body"].read())
        return {share["brain_id"] for share in doc["shares"]}

    for name in ("alice", "bob", "carol"):
        cli(env, "user", "add", name)
    users = {u["name"]: u["id"] for u in json.loads(cli(env, "user", "list", "--json").stdout)}
    brains = {}
    for owner, name in (("alice", "notes"), ("alice", "plans"), ("carol", "ideas"), ("carol", "drafts")):
        brains[name] = cli(env, "brain", "create", name, "--user", owner).stdout.splitlines()[-1]
        cli(env, "share", name, "--user", owner, "--with", "bob", "--role", "viewer")
    _damage(env, moto, tmp_path, users["alice"], brains["plans"])
    _damage(env, moto, tmp_path, users["carol"], brains["drafts"])
    assert shared() == set(brains.values())

    cli(env, "user", "remove", "alice", "--purge")
    assert shared() == {brains["ideas"], brains["drafts"]}

    cli(env, "user", "remove", "carol")
    cli(env, "user", "purge", users["carol"])
    assert shared() == set()
