"""Deleted brains of a removed user, on a directory and on S3.

A removed user's brain can be deleted and kept: deleted before they were removed, or since (a shared
one is still found by id, so `brain delete ID` takes it, as a member owner's web app does).
`brain undelete` and `brain purge` looked only among current users' deleted brains ("no deleted
brain"), so only `user purge` or `user adopt` reached it: they take it by id now, naming it as a
removed user's, and `user orphans` says which of their brains are deleted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.backup.support import cli, client, serve
from tests.store.test_admin_with_damaged_sharing import _Place
from tests.store.test_orphans_damaged import _leftovers, _mentions, _store, _user_with_notes


def _shared_with_bob(env: dict[str, str]) -> list[str]:
    """The ids of the brains `brain list --user bob` shows (his own and those shared with him)."""
    return [b["id"] for b in json.loads(cli(env, "brain", "list", "--user", "bob", "--json").stdout)
            if b["role"] != "owner"]


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_undelete_and_purge_take_a_removed_users_deleted_brain_by_id(
        where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env, moto = _store(where, tmp_path, request)
    alice, default, notes = _user_with_notes(env, tmp_path, "alice")
    cli(env, "user", "add", "bob")
    carol = cli(env, "user", "add", "carol").stdout.splitlines()[-1]
    cli(env, "share", notes, "--with", "bob", "--role", "viewer")
    cli(env, "share", notes, "--with", "carol", "--role", "owner")
    cli(env, "brain", "delete", default, "--yes")  # deleted while alice was a user
    cli(env, "user", "remove", "alice")
    deleted = cli(env, "brain", "delete", notes, "--yes").stdout  # shared: still found by id
    assert deleted.startswith(f"deleted brain notes ({notes}) of removed user {alice}; "), deleted
    assert _shared_with_bob(env) == []

    orphans = cli(env, "user", "orphans").stdout
    for brain in (default, notes):
        assert f"`brain-store brain undelete|purge {brain}`" in orphans, orphans

    place = _Place(env, moto)
    before = place.snapshot()
    for args, expected in (
            (("purge", notes), "run it in a terminal to confirm, or add --yes"),
            (("undelete", "00000000-0000-4000-8000-000000000000"),
             "no deleted brain '00000000-0000-4000-8000-000000000000' (`brain-store brain list` lists the "
             "deleted ones, `brain-store user orphans` those of removed users)")):
        refused = cli(env, "brain", *args, check=False)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, (args, refused.stderr)
        assert expected in refused.stderr, (args, refused.stderr)
        assert place.snapshot() == before, args

    back = cli(env, "brain", "undelete", notes.upper()).stdout
    assert back.strip() == (f"brought back brain notes ({notes}) of removed user {alice}: "
                            "`brain-store user orphans` lists it with their other brains"), back
    assert _shared_with_bob(env) == [notes]  # with its members
    assert f"`brain-store brain undelete|purge {notes}`" not in cli(env, "user", "orphans").stdout

    purged = cli(env, "brain", "purge", default, "--yes").stdout
    assert purged.strip() == f"purged brain default ({default}) of removed user {alice}", purged
    assert _mentions(env, moto, default) == [] and _leftovers(env, moto, alice)  # notes keeps what holds it

    with serve(env, tmp_path) as server, client(server, carol) as c:  # a member owner deletes it
        assert c.post(f"/api/brains/{notes}/trash").status_code == 204
    purged = cli(env, "brain", "purge", notes, "--yes").stdout.splitlines()
    assert purged == [f"purged brain notes ({notes}) of removed user {alice}",
                      f"it was the last brain of removed user {alice}: nothing of theirs is kept any more"], purged
    assert _mentions(env, moto, notes) == [] and _leftovers(env, moto, alice) == []  # members and audit log too
    assert _shared_with_bob(env) == []
    assert cli(env, "user", "orphans").stdout.splitlines()[-1] == "none"
