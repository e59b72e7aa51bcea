"""`brain-store migrate` run again brings the target's users up to date with the source."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.backup.support import archive, cli, client, registry, serve, tree, upload


def test_a_token_rotated_at_the_source_since_is_the_one_that_works_at_the_target(tmp_path: Path) -> None:
    """A second `migrate` skipped every user already at the target: after `user rotate alice` at
    the source, her new token was refused at the target and the old one (the one rotated to end
    it) still worked there. The target's record now follows the source's."""
    source, target = tmp_path / "source", tmp_path / "target"
    users = registry({"STORE_DATA_DIR": str(source)})
    old = users.add("alice", "alice@example.org")[1]
    users.add("bob")
    first = cli({}, "migrate", "--from", str(source), "--to", str(target)).stdout
    assert "migrated 2 user(s), " in first, first
    new = registry({"STORE_DATA_DIR": str(source)}).rotate("alice")[1]
    again = cli({}, "migrate", "--from", str(source), "--to", str(target)).stdout
    assert "users: 0 added, 1 updated" in again and "migrated 0 user(s), 1 user(s) updated, " in again, again
    with serve({"STORE_DATA_DIR": str(target)}, tmp_path) as server:
        def me(token: str) -> int:
            return httpx.get(server.base_url + "/auth/me", headers={"Authorization": f"Bearer {token}"},
                             timeout=30).status_code

        assert (me(new), me(old)) == (200, 401)
    assert [(u.name, u.email) for u in registry({"STORE_DATA_DIR": str(target)}).users()] == \
        [("alice", "alice@example.org"), ("bob", "")]
    third = cli({}, "migrate", "--from", str(source), "--to", str(target)).stdout
    assert "users: 0 added, 0 updated" in third and "user(s) updated" not in third, third


def test_a_user_removed_at_the_source_since_is_removed_at_the_target(tmp_path: Path) -> None:
    """Migrating in passes (copy while live, then a final pass): a user removed at the source between
    them stayed at the target, token and agent key working (and a new user of that name was
    refused). Now the later pass removes them there too; the target's own users stay."""
    source, target = {"STORE_DATA_DIR": str(tmp_path / "source")}, {"STORE_DATA_DIR": str(tmp_path / "target")}
    tokens = {name: cli(source, "user", "add", name).stdout.splitlines()[-1] for name in ("alice", "bob")}
    tokens["bob-key"] = cli(source, "key", "create", "--user", "bob", "--brain", "default",
                            "--scope", "read").stdout.splitlines()[-1]
    tokens["tom"] = registry(target).add("tom")[1]  # the target's own user
    first = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "migrated 2 user(s), " in first and "removed" not in first, first
    old_bob = registry(target).find("bob").id
    assert "removed user bob" in cli(source, "user", "remove", "bob").stdout
    tokens["new-bob"] = cli(source, "user", "add", "bob").stdout.splitlines()[-1]  # the name, taken again

    again = cli({}, "migrate", "--from", str(tmp_path / "source" / ".." / "source"),  # spelt another way
                "--to", target["STORE_DATA_DIR"]).stdout
    assert f"users: 1 added, 0 updated, 1 removed (removed at the source since an earlier run: bob ({old_bob}))" \
        in again and "`brain-store user orphans` lists them" in again, again
    assert "migrated 1 user(s), 1 user(s) removed (gone from the source), " in again, again
    with serve(target, tmp_path) as server:
        def me(token: str) -> int:
            return httpx.get(server.base_url + "/auth/me", headers={"Authorization": f"Bearer {token}"},
                             timeout=30).status_code

        assert {who: me(token) for who, token in tokens.items()} == \
            {"alice": 200, "bob": 401, "bob-key": 401, "tom": 200, "new-bob": 200}
    assert sorted(u.name for u in registry(target).users()) == ["alice", "bob", "tom"]
    assert registry(target).find("bob").id != old_bob
    assert old_bob not in (tmp_path / "target" / "sharing.json").read_text()  # the key is gone, not only dead
    assert old_bob in cli(target, "user", "orphans").stdout  # the brains stay, as `user remove` keeps them
    third = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "users: 0 added, 0 updated\n" in third and "removed" not in third, third
    assert sorted(u.name for u in registry(target).users()) == ["alice", "bob", "tom"]


def test_a_damaged_record_of_migrated_users_stops_it_before_anything_changes(tmp_path: Path) -> None:
    """Read as "none", it would leave users removed at the source working at the target: refused, in one
    line saying what to do, with the target untouched."""
    source, target = tmp_path / "source", tmp_path / "target"
    registry({"STORE_DATA_DIR": str(source)}).add("alice")
    cli({}, "migrate", "--from", str(source), "--to", str(target))
    (target / "migrated-users.json").write_text('{"sources": [')
    registry({"STORE_DATA_DIR": str(source)}).add("bob")
    before = tree(target)
    done = cli({}, "migrate", "--from", str(source), "--to", str(target), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"Error: {target / 'migrated-users.json'} is unreadable (" in done.stderr, done.stderr
    assert "remove it to go on" in done.stderr, done.stderr
    assert tree(target) == before


def test_a_brain_changed_at_the_source_since_it_was_copied_is_named(tmp_path: Path) -> None:
    """A later pass skips a brain already at the target, so what was uploaded at the source since
    is not carried over: it said "already at the target; skipped" like for any other. Now such a
    brain is named with what to do, and doing it copies it again."""
    source, target = {"STORE_DATA_DIR": str(tmp_path / "source")}, {"STORE_DATA_DIR": str(tmp_path / "target")}
    token = cli(source, "user", "add", "alice").stdout.splitlines()[-1]
    with serve(source, tmp_path) as server, client(server, token) as alice:
        kept = alice.post("/api/brains", json={"name": "kept"}).json()["id"]
        upload(alice, kept, archive({"a.md": b"as copied"}))
        changed = alice.post("/api/brains", json={"name": "changed"}).json()["id"]
        upload(alice, changed, archive({"a.md": b"as copied"}))
        cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"])
        upload(alice, changed, archive({"a.md": b"uploaded after the first pass"}))
        newest = alice.get(f"/api/brains/{changed}/sync").content
    user_id = registry(source).find("alice").id
    again = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert f"brain {user_id}/{kept} already at the target; skipped" in again, again
    assert f"brain {user_id}/{changed} (changed) already at the target but not as at the source" in again, again
    assert f"1 brain(s) already at the target are not as at the source and were left as they are: " \
        f"{user_id}/{changed}; to copy one again, delete and purge it at the target" in again, again
    cli(target, "brain", "delete", changed, "--yes")
    cli(target, "brain", "purge", changed, "--yes")
    third = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "not as at the source" not in third and ", 1 brain(s), " in third, third
    with serve(target, tmp_path) as server, client(server, token) as alice:
        assert alice.get(f"/api/brains/{changed}/sync").content == newest


def test_a_share_removed_a_key_revoked_and_a_user_allowed_at_the_source_since_follow_at_the_target(
        tmp_path: Path) -> None:
    """The sharing merge only added: a member taken off a brain and an agent key revoked at the source
    between two passes still read it at the target, and an OIDC user lifted with `user allow` stayed
    blocked there. Now a later pass takes away what an earlier one brought (and adds a member given
    since); the target's own membership and key stay."""
    source, target = {"STORE_DATA_DIR": str(tmp_path / "source")}, {"STORE_DATA_DIR": str(tmp_path / "target")}
    tokens = {name: cli(source, "user", "add", name).stdout.splitlines()[-1] for name in ("alice", "bob", "carol")}
    tokens["tom"] = registry(target).add("tom")[1]  # the target's own user
    with serve(source, tmp_path) as server, client(server, tokens["alice"]) as alice:
        team = alice.post("/api/brains", json={"name": "team"}).json()["id"]
        upload(alice, team, archive({"a.md": b"shared"}))
    for member in ("bob", "carol"):
        cli(source, "share", team, "--with", member, "--role", "viewer")
    for owner in ("bob", "alice"):
        tokens[f"{owner}-key"] = cli(source, "key", "create", "--user", owner, "--brain", team,
                                     "--scope", "read").stdout.splitlines()[-1]
    gone = registry(source).add_oidc("oidcuser0001", "https://idp.example", "sub-1", "o@example.org", "olga")
    assert gone is not None and "removed user olga" in cli(source, "user", "remove", "olga").stdout
    cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"])
    assert [d.subject for d in registry(target).denied()] == ["sub-1"]
    # the target's own: tom on the brought brain, a key alice made there
    cli(target, "share", team, "--with", "tom", "--role", "viewer")
    tokens["target-key"] = cli(target, "key", "create", "--user", "alice", "--brain", team,
                               "--scope", "read").stdout.splitlines()[-1]

    def reads() -> dict[str, int]:
        with serve(target, tmp_path) as server:
            return {who: httpx.get(f"{server.base_url}/api/brains/{team}/sync", timeout=30,
                                   headers={"Authorization": f"Bearer {token}"}).status_code
                    for who, token in tokens.items()}

    assert set(reads().values()) == {200}  # what the first pass brought works, as the target's own
    assert "no longer shares" in cli(source, "unshare", team, "--with", "bob").stdout
    assert "revoked" in cli(source, "key", "revoke", tokens["bob-key"][:12]).stdout
    assert cli(source, "user", "allow", "olga").returncode == 0
    tokens["dave"] = cli(source, "user", "add", "dave").stdout.splitlines()[-1]
    cli(source, "share", team, "--with", "dave", "--role", "viewer")  # a member given since
    cli(source, "share", team, "--with", "carol", "--role", "editor")  # a role changed since

    again = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "users: 1 added, 0 updated, 1 OIDC deny record(s) lifted (allowed again at the source" in again, again
    assert "sharing: 0 shared brain(s), 0 agent key(s) added, 1 member(s) added to brains shared already; taken " \
        f"away (gone from the source since an earlier run): 1 agent key(s) ({tokens['bob-key'][:12]} of bob), " \
        f"1 membership(s) (bob on brain {team})" in again, again
    assert "1 OIDC deny record(s) lifted, " in again and ", 1 agent key(s) and 1 membership(s) taken away " \
        "(gone from the source); " in again, again
    assert reads() == {"alice": 200, "bob": 404, "carol": 200, "tom": 200, "bob-key": 401, "alice-key": 200,
                       "target-key": 200, "dave": 200}
    assert registry(target).denied() == []
    [share] = json.loads((tmp_path / "target" / "sharing.json").read_text())["shares"]
    ids = {u.name: u.id for u in registry(target).users()}
    assert share["members"] == {ids["carol"]: "editor", ids["tom"]: "viewer", ids["dave"]: "viewer"}
    third = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "taken away" not in third and "lifted" not in third and "member(s) added" not in third, third


def test_what_the_target_removed_since_an_earlier_pass_is_not_brought_again(tmp_path: Path) -> None:
    """Between two passes the target's operator took bob off the shared brain, revoked carol's agent key,
    removed erin and lifted an OIDC deny record (`user allow`): the later pass brought them all back,
    access the target had ended working again. Now a removal at the target holds (named in the output);
    what the source gives since is still brought."""
    source, target = {"STORE_DATA_DIR": str(tmp_path / "source")}, {"STORE_DATA_DIR": str(tmp_path / "target")}
    tokens = {name: cli(source, "user", "add", name).stdout.splitlines()[-1]
              for name in ("alice", "bob", "carol", "erin")}
    with serve(source, tmp_path) as server, client(server, tokens["alice"]) as alice:
        team = alice.post("/api/brains", json={"name": "team"}).json()["id"]
        upload(alice, team, archive({"a.md": b"shared"}))
    for member in ("bob", "carol", "erin"):
        cli(source, "share", team, "--with", member, "--role", "viewer")
    tokens["carol-key"] = cli(source, "key", "create", "--user", "carol", "--brain", team,
                              "--scope", "read").stdout.splitlines()[-1]
    registry(source).add_oidc("oidcuser0001", "https://idp.example", "sub-1", "o@example.org", "olga")
    cli(source, "user", "remove", "olga")
    cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"])
    erin = registry(target).find("erin").id

    assert "no longer shares" in cli(target, "unshare", team, "--with", "bob").stdout
    assert "revoked" in cli(target, "key", "revoke", tokens["carol-key"][:12]).stdout
    assert "removed user erin" in cli(target, "user", "remove", "erin").stdout
    assert cli(target, "user", "allow", "olga").returncode == 0
    tokens["dave"] = cli(source, "user", "add", "dave").stdout.splitlines()[-1]
    cli(source, "share", team, "--with", "dave", "--role", "viewer")  # given at the source since: brought

    again = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "not brought again (removed at the target since an earlier pass; the source still has them): " \
        f"1 user(s) (erin ({erin})); 1 membership(s) (bob on brain {team}); 1 agent key(s) " \
        f"({tokens['carol-key'][:12]} of carol); 1 OIDC deny record(s)" in again, again
    assert "users: 1 added, 0 updated\n" in again, again
    assert "1 member(s) added to brains shared already" in again, again

    def reads() -> dict[str, int]:
        with serve(target, tmp_path) as server:
            return {who: httpx.get(f"{server.base_url}/api/brains/{team}/sync", timeout=30,
                                   headers={"Authorization": f"Bearer {token}"}).status_code
                    for who, token in tokens.items()}

    assert reads() == {"alice": 200, "bob": 404, "carol": 200, "erin": 401, "carol-key": 401, "dave": 200}
    assert registry(target).denied() == []
    third = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "not brought again" in third and "added to brains shared already" not in third, third
    assert "users: 0 added, 0 updated\n" in third, third
    # taken off at the source too: the record of it goes, as for anything the source removes
    cli(source, "unshare", team, "--with", "bob")
    fourth = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "bob on brain" not in fourth and "taken away" not in fourth, fourth


def test_what_a_stopped_pass_only_noted_is_brought_by_the_next(tmp_path: Path) -> None:
    """A pass notes what it brings before adding it. One stopped before the memberships (a damaged
    archive at the source) had not added them: the next pass must, not take their absence at the
    target for a removal there."""
    import os

    source, target = {"STORE_DATA_DIR": str(tmp_path / "source")}, {"STORE_DATA_DIR": str(tmp_path / "target")}
    tokens = {name: cli(source, "user", "add", name).stdout.splitlines()[-1] for name in ("alice", "bob")}
    with serve(source, tmp_path) as server, client(server, tokens["alice"]) as alice:
        team = alice.post("/api/brains", json={"name": "team"}).json()["id"]
        upload(alice, team, archive({"a.md": b"shared"}))
    cli(source, "share", team, "--with", "bob", "--role", "viewer")
    [blob] = (tmp_path / "source").glob(f"brains/*/{team}/blobs/*")
    kept = blob.read_bytes()
    blob.unlink()
    os.mkfifo(blob)
    stopped = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"], check=False)
    assert stopped.returncode == 1 and "a named pipe, not a regular file" in stopped.stderr, stopped.stderr
    assert "users: 2 added" in stopped.stdout, stopped.stdout  # added before the brains; no membership yet
    blob.unlink()
    blob.write_bytes(kept)
    again = cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"]).stdout
    assert "not brought again" not in again and "1 shared brain(s)" in again, again
    with serve(target, tmp_path) as server:
        assert httpx.get(f"{server.base_url}/api/brains/{team}/sync", timeout=30,
                         headers={"Authorization": f"Bearer {tokens['bob']}"}).status_code == 200


def _strip(path: Path, drop: dict[str, tuple[str, ...]]) -> None:
    """Rewrite the JSON file ``path`` without the fields later versions added (``drop``: where -> names)."""
    def walk(node: object, where: str) -> object:
        if isinstance(node, dict):
            return {k: walk(v, k) for k, v in node.items() if k not in drop.get(where, ())}
        if isinstance(node, list):
            return [walk(v, where) for v in node]
        return node

    path.write_text(json.dumps(walk(json.loads(path.read_text()), "")))


def test_records_of_an_earlier_version_migrate(tmp_path: Path) -> None:
    """Records as the first versions wrote them, without the fields added since (a user's kind and
    e-mail, the deny list, a brain's generation and deletion mark, an archive's sealed and by_other
    flags, an agent key's label and expiry, and a migration record of users only) migrate like today's."""
    source, target = {"STORE_DATA_DIR": str(tmp_path / "source")}, {"STORE_DATA_DIR": str(tmp_path / "target")}
    tokens = {name: cli(source, "user", "add", name).stdout.splitlines()[-1] for name in ("alice", "bob", "gone")}
    with serve(source, tmp_path) as server, client(server, tokens["alice"]) as alice:
        team = alice.post("/api/brains", json={"name": "team"}).json()["id"]
        for text in (b"one", b"two"):
            upload(alice, team, archive({"a.md": text}))
        want = alice.get(f"/api/brains/{team}/sync").content
    cli(source, "share", team, "--with", "bob", "--role", "editor")
    tokens["bob-key"] = cli(source, "key", "create", "--user", "bob", "--brain", team, "--scope", "read",
                            "--label", "x", "--expires", "30d").stdout.splitlines()[-1]
    data = tmp_path / "source"
    _strip(data / "users.json", {"users": ("kind", "email", "oidc_issuer", "oidc_subject"), "": ("denied",)})
    _strip(data / "sharing.json", {"keys": ("label", "expires_at")})
    for meta in data.glob("brains/*/*/meta.json"):
        _strip(meta, {"": ("generation", "deleted_at"), "current": ("sealed", "by_other"),
                      "archive": ("sealed", "by_other")})
    assert '"generation"' not in (next(data.glob(f"brains/*/{team}/meta.json"))).read_text()
    cli({}, "migrate", "--from", str(data), "--to", target["STORE_DATA_DIR"])
    _strip(tmp_path / "target" / "migrated-users.json", {"": ("denied", "members", "keys", "pending")})
    cli(source, "user", "remove", "gone")
    again = cli({}, "migrate", "--from", str(data), "--to", target["STORE_DATA_DIR"]).stdout
    assert "1 removed (removed at the source since an earlier run: gone" in again, again
    with serve(target, tmp_path) as server:
        def get(token: str) -> httpx.Response:
            return httpx.get(f"{server.base_url}/api/brains/{team}/sync", timeout=30,
                             headers={"Authorization": f"Bearer {token}"})

        assert [get(tokens[who]).content == want for who in ("alice", "bob", "bob-key")] == [True] * 3
        assert get(tokens["gone"]).status_code == 401
        with client(server, tokens["alice"]) as alice:
            assert len(alice.get(f"/api/brains/{team}/versions").json()["versions"]) == 1


def test_a_migration_record_of_a_newer_version_is_refused(tmp_path: Path) -> None:
    """Its fields beyond this version's would be dropped unread when the record is rewritten."""
    source, target = tmp_path / "source", tmp_path / "target"
    registry({"STORE_DATA_DIR": str(source)}).add("alice")
    cli({}, "migrate", "--from", str(source), "--to", str(target))
    record = json.loads((target / "migrated-users.json").read_text())
    (target / "migrated-users.json").write_text(json.dumps({**record, "version": 2, "later": {}}))
    before = tree(target)
    done = cli({}, "migrate", "--from", str(source), "--to", str(target), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "was written by a newer brain-store (format 2); migrate with that version" in done.stderr, done.stderr
    assert tree(target) == before


def test_a_damaged_users_file_at_the_target_stops_it_before_anything_changes(tmp_path: Path) -> None:
    """A pass reads what the target has to know what its operator removed; a damaged users file there
    (its last good copy serving, or none) is not that: refused in one line, the target untouched."""
    source, target = tmp_path / "source", tmp_path / "target"
    registry({"STORE_DATA_DIR": str(source)}).add("alice")
    cli({}, "migrate", "--from", str(source), "--to", str(target))
    registry({"STORE_DATA_DIR": str(source)}).add("bob")
    (target / "users.json").write_text("{broken")
    before = tree(target)
    done = cli({}, "migrate", "--from", str(source), "--to", str(target), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"Error: at the target: users file {target / 'users.json'} is unreadable or corrupt" in done.stderr, \
        done.stderr
    assert "fix or restore it first; nothing migrated" in done.stderr, done.stderr
    assert tree(target) == before


def test_what_a_later_pass_changes_on_a_brain_is_in_its_audit_log(tmp_path: Path) -> None:
    """`share`, `unshare` and `key create|revoke` note an operator's change in the brain's sharing audit
    log; a later migration pass making the same changes at the target (a member given, a role changed, a
    member taken off, a key added and one revoked at the source since) left no trace there."""
    source, target = {"STORE_DATA_DIR": str(tmp_path / "source")}, {"STORE_DATA_DIR": str(tmp_path / "target")}
    tokens = {name: cli(source, "user", "add", name).stdout.splitlines()[-1] for name in ("alice", "bob", "carol")}
    with serve(source, tmp_path) as server, client(server, tokens["alice"]) as alice:
        team = alice.post("/api/brains", json={"name": "team"}).json()["id"]
        upload(alice, team, archive({"a.md": b"shared"}))
    cli(source, "share", team, "--with", "bob", "--role", "viewer")
    old_key = cli(source, "key", "create", "--user", "alice", "--brain", team,
                  "--scope", "read").stdout.splitlines()[-1]
    cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"])

    def log() -> list[dict[str, str]]:
        lines = cli(target, "audit", team, "--user", "alice").stdout.splitlines()
        return [json.loads(line) for line in lines]

    first = log()  # the source's log, as copied
    assert [e["action"] for e in first] == ["member_set", "key_created"], first
    cli(source, "share", team, "--with", "carol", "--role", "viewer")
    cli(source, "share", team, "--with", "bob", "--role", "editor")
    cli(source, "key", "revoke", old_key[:12])
    new_key = cli(source, "key", "create", "--user", "alice", "--brain", team,
                  "--scope", "write").stdout.splitlines()[-1]
    cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"])
    ids = {u.name: u.id for u in registry(target).users()}
    added = [{k: v for k, v in e.items() if k not in ("ts", "brain")} for e in log()[len(first):]]
    migrate = {"actor": "operator", "actor_name": "operator (migrate)"}
    assert sorted(added, key=lambda e: (e["action"], e.get("member_name", ""))) == [
        {**migrate, "action": "key_created", "key": new_key[:12], "member": ids["alice"], "scope": "write"},
        {**migrate, "action": "key_revoked", "key": old_key[:12], "member": ids["alice"]},
        {**migrate, "action": "member_set", "member": ids["bob"], "member_name": "bob", "role": "editor"},
        {**migrate, "action": "member_set", "member": ids["carol"], "member_name": "carol", "role": "viewer"},
    ], added
    assert len(log()) == len(first) + 4
    cli({}, "migrate", "--from", source["STORE_DATA_DIR"], "--to", target["STORE_DATA_DIR"])
    assert len(log()) == len(first) + 4  # a pass changing nothing notes nothing
