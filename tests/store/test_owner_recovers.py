"""An editor cannot destroy a shared brain beyond recovery (issue 24, item 5).

Against a real store (local disk here; tests/s3/test_sharing_s3.py runs the same scenario on
moto and SeaweedFS): six junk uploads by an editor push every ordinary snapshot out of
retention (5 by default), then an empty ``?force=true`` upload; the owner still finds the
version they wrote last among the snapshots and restores it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from tests.store.conftest import add_user, brain_files, cli, make_archive, start_store

OWNERS = make_archive(brain_files(8, "owner"), dirs=("memories",))
EMPTY = make_archive({})


def editor_trashes_owner_restores(owner: httpx.Client, editor: httpx.Client, brain: str) -> None:
    """The scenario, given clients of the brain's owner and of an editor (any store)."""
    assert owner.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", OWNERS)}).status_code == 200
    own = owner.get(f"/api/brains/{brain}").json()["checksum"]
    for i in range(6):
        junk = make_archive({f"junk/{i}.md": f"junk {i}".encode()})
        r = editor.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", junk)})
        assert r.status_code == 200, r.text
    r = editor.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", EMPTY)}, params={"force": "true"})
    assert r.status_code == 200, r.text
    versions = owner.get(f"/api/brains/{brain}/versions").json()["versions"]
    assert len(versions) == 6  # the five newest, plus the owner's last version
    saved = [v["version"] for v in versions if v["checksum"] == own]
    assert len(saved) == 1
    # the editor can neither restore it nor delete the brain
    assert editor.post(f"/api/brains/{brain}/versions/{saved[0]}/restore").status_code == 403
    assert editor.delete(f"/api/brains/{brain}").status_code == 403
    assert owner.post(f"/api/brains/{brain}/versions/{saved[0]}/restore").status_code == 200
    assert owner.get(f"/api/brains/{brain}/sync").content == OWNERS
    # an owner's own uploads prune as before: once the owner writes, older versions age out
    for i in range(6):
        mine = make_archive({f"memories/again{i}.md": f"again {i}".encode()})
        assert owner.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", mine)}).status_code == 200
    assert len(owner.get(f"/api/brains/{brain}/versions").json()["versions"]) == 5


def test_owner_recovers_after_an_editor_trashed_the_brain(tmp_path: Path) -> None:
    with start_store(tmp_path, workers=2) as store:
        owner = store.client(add_user(store.data, "alice"))
        editor = store.client(add_user(store.data, "eddie"))
        brain = owner.get("/api/brains").json()[0]["id"]
        cli("share", brain, "--with", "eddie", "--role", "editor", data=store.data)
        editor_trashes_owner_restores(owner, editor, brain)


def test_a_write_key_of_the_owner_counts_as_someone_else(tmp_path: Path) -> None:
    """An agent key acts at most as an editor: a leaked write key cannot destroy the brain either."""
    with start_store(tmp_path) as store:
        owner = store.client(add_user(store.data, "alice"))
        brain = owner.get("/api/brains").json()[0]["id"]
        key = cli("key", "create", "--user", "alice", "--brain", brain, "--scope", "write",
                  data=store.data).stdout.strip().splitlines()[-1]
        keyed = store.client(key)
        assert owner.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", OWNERS)}).status_code == 200
        for i in range(7):
            r = keyed.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tar.gz", make_archive({f"{i}": b"x"}))})
            assert r.status_code == 200
        versions = owner.get(f"/api/brains/{brain}/versions").json()["versions"]
        assert hashlib.sha256(OWNERS).hexdigest() in {v["checksum"] for v in versions}
