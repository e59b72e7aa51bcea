"""`brain-store brain list`, `user list --json`, and brains named by name (with --user saying
whose) wherever a command takes a brain: through the CLI (click's runner) on a real data dir."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.store import main
from cli.store.runner import settings_from_cli

pytestmark = pytest.mark.timeout(120)


def run(data: Path, *args: str, ok: bool = True) -> Result:
    result = CliRunner().invoke(main, [*args, "--data", str(data)], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """alice (brains "default" and "team"), bob ("default"); team shared with bob as viewer."""
    from store.service import BrainService
    from store.storage.factory import open_backend

    data = tmp_path / "data"
    for name in ("alice", "bob"):
        run(data, "user", "add", name)
    users = {u["name"]: u for u in json.loads(run(data, "user", "list", "--json").output)}
    settings = settings_from_cli(data_dir=data, backend="local")
    BrainService(settings, open_backend(settings)).create(users["alice"]["id"], "team")
    run(data, "share", "team", "--with", "bob", "--role", "viewer")
    return data


def test_user_list_json(data: Path) -> None:
    users = json.loads(run(data, "user", "list", "--json").output)
    assert [u["name"] for u in users] == ["alice", "bob"]
    assert {u["name"]: u["brains"] for u in users} == {"alice": 2, "bob": 1}
    assert set(users[0]) == {"id", "name", "email", "kind", "brains", "deleted_brains", "damaged_brains", "stored_bytes",
                             "created_at"}


def test_brain_list_shows_ids_names_owners_and_roles(data: Path) -> None:
    every = json.loads(run(data, "brain", "list", "--json").output)
    assert sorted((b["owner"], b["name"]) for b in every) == [("alice", "default"), ("alice", "team"), ("bob", "default")]
    assert set(every[0]) == {"id", "name", "owner", "owner_id", "role", "size_bytes", "stored_bytes",
                            "last_change"}
    bobs = json.loads(run(data, "brain", "list", "--user", "bob", "--json").output)
    assert sorted((b["name"], b["owner"], b["role"]) for b in bobs) == [("default", "bob", "owner"),
                                                                       ("team", "alice", "viewer")]
    table = run(data, "brain", "list", "--user", "alice").output
    team = next(b for b in every if b["name"] == "team")
    assert f"brains of {data}:" in table and team["id"] in table and "LAST CHANGE" in table


def test_tables_keep_their_columns_under_chinese_and_japanese_names(data: Path) -> None:
    """A Chinese or Japanese character takes two columns in a terminal: the cells after a brain
    name, a user name or a key label holding them start where the header's do."""
    run(data, "brain", "create", "工作台", "--user", "alice")
    run(data, "brain", "create", "メモ帳", "--user", "bob")
    run(data, "user", "add", "wang", "--email", "王小明@example.cn")
    run(data, "key", "create", "--user", "alice", "--brain", "工作台", "--scope", "read", "--label", "夜間ビルド")

    def starts(line: str, text: str) -> int:
        """The terminal column ``text`` starts at in ``line``."""
        before = line[:line.index(text)]
        return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in before)

    cases: tuple[tuple[tuple[str, ...], str, str, str | None], ...] = (
        (("brain", "list"), "OWNER", "工作台", "alice"), (("brain", "list"), "ROLE", "メモ帳", "owner"),
        (("user", "list"), "KIND", "王小明@example.cn", "static"), (("key", "list"), "BRAINS", "夜間ビルド", None),
    )
    for args, header, row_of, after in cases:
        lines = run(data, *args).output.splitlines()
        head = next(line for line in lines if header in line)
        row = next(line for line in lines if row_of in line)
        # The cell after the CJK one: named, or (a key's brains: an id) the first word after it.
        text = after or row[row.index(row_of) + len(row_of):].split()[0]
        assert starts(row, text) == starts(head, header), (args, head, row)


def test_a_name_works_where_an_id_is_taken_and_an_ambiguous_one_is_refused(data: Path) -> None:
    every = json.loads(run(data, "brain", "list", "--json").output)
    ids = {(b["owner"], b["name"]): b["id"] for b in every}
    # "default" names two brains: refused, naming both with their owners; nothing changed.
    refused = run(data, "share", "default", "--with", "bob", "--role", "editor", ok=False)
    assert refused.exit_code == 1
    assert "the brain name 'default' is ambiguous" in refused.output
    assert f"{ids['alice', 'default']} (owner alice, last change " in refused.output
    assert f"{ids['bob', 'default']} (owner bob, last change " in refused.output and "--user NAME" in refused.output
    # --user says whose: now it is one brain.
    done = run(data, "share", "default", "--user", "alice", "--with", "bob", "--role", "editor")
    assert f"bob is now editor of brain {ids['alice', 'default']}" in done.output
    assert run(data, "audit", "default", "--user", "alice").output.count("member_set") == 1
    assert "no longer shares brain " + ids["alice", "default"] in run(
        data, "unshare", "default", "--user", "alice", "--with", "bob").output
    # A key for one of the user's brains, by name; another user's brain by name is not theirs.
    key = run(data, "key", "create", "--user", "bob", "--brain", "team", "--scope", "read")
    assert key.output.strip().splitlines()[-1].startswith("bsk_")
    listed = run(data, "key", "list", "--user", "bob").output
    assert ids["alice", "team"] in listed
    missing = run(data, "audit", "nonesuch", ok=False)
    assert missing.exit_code == 1 and "no brain 'nonesuch'" in missing.output and "brain list" in missing.output
    # The id still works, in any case.
    assert run(data, "audit", ids["alice", "team"].upper()).exit_code == 0


def test_two_brains_of_one_owner_under_one_name_are_told_apart_by_id(data: Path) -> None:
    """A rename may give a brain the name of another of its owner's (names need not be unique, as
    the store's contract allows): it says so, and the ambiguity's hint no longer offers --user,
    which cannot tell one owner's brains apart ("give its id, or --user NAME to say whose")."""
    ids = {(b["owner"], b["name"]): b["id"] for b in json.loads(run(data, "brain", "list", "--json").output)}
    renamed = run(data, "brain", "rename", ids["alice", "team"], "default")
    assert f"renamed brain team ({ids['alice', 'team']}) of alice to default" in renamed.output
    assert f"note: alice has another brain named 'default' ({ids['alice', 'default']}); commands will need " \
           "the id to tell them apart" in renamed.output
    made = run(data, "brain", "create", "default", "--user", "alice")
    assert "note: alice has another brain named 'default' (" in made.output
    new_id = made.output.strip().splitlines()[-1]  # still the last line, for scripts
    assert new_id not in ids.values() and len(new_id) == 36
    for extra in ((), ("--user", "alice")):
        refused = run(data, "unshare", "default", *extra, "--with", "bob", ok=False)
        assert refused.exit_code == 1 and "is ambiguous" in refused.output
        assert refused.output.rstrip().endswith(". give its id in place of the name")
        assert "--user NAME" not in refused.output
    # alice's three and bob's one: --user would not tell alice's apart either.
    assert "--user NAME" not in run(data, "audit", "default", ok=False).output
    # By id it is one brain; nothing was shared or unshared on the way.
    done = run(data, "unshare", ids["alice", "team"], "--with", "bob")
    assert f"no longer shares brain {ids['alice', 'team']}" in done.output
    # A name no other brain of the owner has: no note.
    assert "note:" not in run(data, "brain", "rename", new_id, "scratch").output


def test_every_command_taking_a_brain_takes_its_id_where_one_owners_name_is_ambiguous(data: Path) -> None:
    """With two brains of alice's named "work", a name cannot say which (nor --user: both are
    alice's): each command refuses it, changing nothing, with what tells the two apart (as `brain
    list` shows it) and what to give instead; each takes either brain's id."""
    run(data, "brain", "create", "work", "--user", "alice")
    run(data, "brain", "create", "work", "--user", "alice")
    rows = [row for row in json.loads(run(data, "brain", "list", "--json").output) if row["name"] == "work"]
    first, second = (row["id"] for row in rows)
    refusals = (("key", "create", "--user", "alice", "--brain", "work", "--scope", "read"),
                ("share", "work", "--user", "alice", "--with", "bob", "--role", "viewer"),
                ("unshare", "work", "--user", "alice", "--with", "bob"), ("audit", "work", "--user", "alice"),
                ("brain", "rename", "work", "other", "--user", "alice"),
                ("brain", "delete", "work", "--user", "alice", "--yes"))
    for args in refusals:
        refused = run(data, *args, ok=False)
        assert refused.exit_code == 1, args
        assert "the brain name 'work' of alice is ambiguous: " in refused.output, args
        for row in rows:
            assert (f"{row['id']} (owner alice, last change {row['last_change']}, {row['size_bytes']} bytes)"
                    in refused.output), args
        assert refused.output.rstrip().endswith(". give its id in place of the name"), args
        assert "Traceback" not in refused.output
    # Nothing was done: no key, no member, both brains as they were.
    assert "no agent keys" in run(data, "key", "list").output
    assert run(data, "audit", first).stdout == run(data, "audit", second).stdout == ""  # no events (said on stderr)
    assert [row["name"] for row in json.loads(run(data, "brain", "list", "--json").output)
            if row["id"] in (first, second)] == ["work", "work"]
    # By id, each command acts on that brain alone.
    key = run(data, "key", "create", "--user", "alice", "--brain", second, "--scope", "read")
    assert key.output.strip().splitlines()[-1].startswith("bsk_")
    assert second in run(data, "key", "list", "--user", "alice").output
    assert f"bob is now viewer of brain {second}" in run(
        data, "share", second, "--with", "bob", "--role", "viewer").output
    assert run(data, "audit", first).stdout == "" and "member_set" in run(data, "audit", second).stdout
    assert f"bob (viewer) no longer shares brain {second}" in run(data, "unshare", second, "--with", "bob").output
    assert f"renamed brain work ({first}) of alice to other" in run(data, "brain", "rename", first, "other").output
    # One "work" is left: its name is enough again.
    assert "member_removed" in run(data, "audit", "work", "--user", "alice").output
    deleted = run(data, "brain", "delete", second, "--yes").output
    assert f"deleted brain work ({second}) of alice" in deleted
