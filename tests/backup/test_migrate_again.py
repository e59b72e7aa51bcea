"""`brain-store migrate` run again brings the target's users up to date with the source."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.backup.support import cli, registry, serve


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
