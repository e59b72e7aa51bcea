"""Renaming a brain and deleting it while the store keeps its data (this store's extensions
`PATCH /api/brains/{id}` and `POST /api/brains/{id}/trash`), and `brain-store brain
create|rename|delete|undelete|purge`, against a real store process and its data directory."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.processes import console_script

from .conftest import Store, add_user, brain_files, cli, make_archive, start_store, upload

pytestmark = pytest.mark.timeout(180)


def _brain_cli(data: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([console_script("brain-store"), "brain", *args, "--data", str(data)],
                          capture_output=True, text=True, timeout=60, input=stdin)


@pytest.fixture
def running(tmp_path: Path) -> Store:
    with start_store(tmp_path) as store:
        yield store


def test_owners_rename_and_delete_keeping_the_data_others_cannot(running: Store) -> None:
    alice_token, bob_token = add_user(running.data, "alice"), add_user(running.data, "bob")
    alice, bob = running.client(alice_token), running.client(bob_token)
    work = alice.post("/api/brains", json={"name": "work"}).json()
    for n in (1, 2):
        assert upload(alice, work["id"], make_archive(brain_files(n, "w"))).status_code == 200
    before = alice.get(f"/api/brains/{work['id']}").json()
    cli("share", work["id"], "--with", "bob", "--role", "editor", data=running.data)
    key = cli("key", "create", "--user", "alice", "--brain", work["id"], "--scope", "write",
              data=running.data).stdout.strip().splitlines()[-1]

    # Rename: owners only (an editor 403, an agent key 403); a bad name 400; nothing else changes.
    renamed = alice.patch(f"/api/brains/{work['id']}", json={"name": "job"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "job"
    assert renamed.json()["checksum"] == before["checksum"] and renamed.json()["id"] == work["id"]
    assert bob.patch(f"/api/brains/{work['id']}", json={"name": "mine"}).status_code == 403
    as_key = httpx.patch(f"{running.url}/api/brains/{work['id']}", json={"name": "k"},
                         headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert as_key.status_code == 403
    for bad in ({"name": ""}, {"name": "a/b"}, {"name": 3}, {}, ["job"]):
        assert alice.patch(f"/api/brains/{work['id']}", json=bad).status_code == 400, bad
    assert alice.patch("/api/brains/00000000-0000-0000-0000-000000000000", json={"name": "x"}).status_code == 404
    assert [b["name"] for b in alice.get("/api/brains").json()] == ["default", "job"]
    assert "job" in [b["name"] for b in bob.get("/api/brains").json()]

    # Delete keeping the data: an editor may not; the owner's makes it gone for every client.
    assert bob.post(f"/api/brains/{work['id']}/trash").status_code == 403
    assert alice.post(f"/api/brains/{work['id']}/trash").status_code == 204
    assert [b["name"] for b in alice.get("/api/brains").json()] == ["default"]
    assert "job" not in [b["name"] for b in bob.get("/api/brains").json()]
    for path in ("", "/sync", "/versions", "/members"):
        assert alice.get(f"/api/brains/{work['id']}{path}").status_code == 404, path
    assert upload(alice, work["id"], make_archive(brain_files(3, "w"))).status_code == 404
    assert alice.post(f"/api/brains/{work['id']}/trash").status_code == 404
    assert alice.delete(f"/api/brains/{work['id']}").status_code == 404

    # The operator sees it kept, and brings it back as it was: archive, snapshot and members.
    listed = _brain_cli(running.data, "list")
    assert "deleted, kept with their snapshots" in listed.stdout and work["id"] in listed.stdout
    assert _brain_cli(running.data, "undelete", work["id"]).returncode == 0
    back = alice.get(f"/api/brains/{work['id']}").json()
    assert back["name"] == "job" and back["checksum"] == before["checksum"]
    assert alice.get(f"/api/brains/{work['id']}/versions").json()["total"] == 1
    assert "job" in [b["name"] for b in bob.get("/api/brains").json()]


def test_brain_commands_create_rename_delete_with_confirmation_and_purge(running: Store) -> None:
    token = add_user(running.data, "carol")
    carol = running.client(token)
    made = _brain_cli(running.data, "create", "personal", "--user", "carol")
    assert made.returncode == 0, made.stderr
    brain_id = made.stdout.strip().splitlines()[-1]
    assert {b["id"]: b["name"] for b in carol.get("/api/brains").json()}[brain_id] == "personal"
    assert upload(carol, brain_id, make_archive(brain_files(2, "p"))).status_code == 200

    assert _brain_cli(running.data, "rename", "personal", "home", "--user", "carol").returncode == 0
    assert {b["id"]: b["name"] for b in carol.get("/api/brains").json()}[brain_id] == "home"
    refused = _brain_cli(running.data, "rename", "home", "a/b", "--user", "carol")
    assert refused.returncode == 1 and "without slashes" in refused.stderr and "Traceback" not in refused.stderr

    # Delete asks first: without a terminal and without --yes nothing happens.
    asked = _brain_cli(running.data, "delete", "home", "--user", "carol", stdin="y\n")
    assert asked.returncode == 1 and "--yes" in asked.stderr
    assert brain_id in [b["id"] for b in carol.get("/api/brains").json()]
    deleted = _brain_cli(running.data, "delete", "home", "--user", "carol", "--yes")
    assert deleted.returncode == 0 and f"brain-store brain undelete {brain_id}" in deleted.stdout
    assert brain_id not in [b["id"] for b in carol.get("/api/brains").json()]
    assert _brain_cli(running.data, "rename", "home", "x", "--user", "carol").returncode == 1  # gone by name

    # Purge asks too, then removes it for good (undelete finds nothing).
    assert _brain_cli(running.data, "purge", brain_id).returncode == 1
    assert _brain_cli(running.data, "purge", brain_id, "--yes").returncode == 0
    gone = _brain_cli(running.data, "undelete", brain_id)
    assert gone.returncode == 1 and "no deleted brain" in gone.stderr
    rows = json.loads(_brain_cli(running.data, "list", "--json").stdout)
    assert brain_id not in [row["id"] for row in rows]
