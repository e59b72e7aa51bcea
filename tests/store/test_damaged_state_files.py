"""A damaged sharing.json or users.json against a real store with two workers (issue 24, item 9).

Every worker reads the files when they change. A file truncated right after a revocation
must not make a worker that had not read the revocation yet keep the revoked key (or the
rotated token): the file is never read as empty, and the last good state written serves,
reported in the log and by /health/ready.
"""

from __future__ import annotations

from pathlib import Path

from tests.store.conftest import add_user, cli, start_store


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # in place, as a full disk or a bad copy leaves it


def test_truncated_state_files_keep_the_last_good_state_on_every_worker(tmp_path: Path) -> None:
    with start_store(tmp_path, workers=2) as store:
        data = store.data
        alice_token = add_user(data, "alice")
        alice = store.client(alice_token)
        brain = alice.get("/api/brains").json()[0]["id"]
        key = cli("key", "create", "--user", "alice", "--brain", brain, "--scope", "read",
                  data=data).stdout.strip().splitlines()[-1]
        # every worker has read the key: each request on a new connection, until each worker answered
        assert {r.status_code for r in store.on_every_worker("GET", "/api/brains", key)} == {200}
        assert alice.get("/health/ready").json() == {"status": "ready"}

        # revoke and rotate with no request in between, then damage both files
        cli("key", "revoke", key[:12], data=data)
        new_token = cli("user", "rotate", "alice", data=data).stdout.strip().splitlines()[-1]
        _truncate(data / "sharing.json")
        _truncate(data / "users.json")

        assert {r.status_code for r in store.on_every_worker("GET", "/api/brains", key)} == {401}
        assert {r.status_code for r in store.on_every_worker("GET", "/api/brains", alice_token)} == {401}
        assert {r.status_code for r in store.on_every_worker("GET", "/api/brains", new_token)} == {200}
        for ready in store.on_every_worker("GET", "/health/ready"):  # every worker says what is damaged
            assert ready.status_code == 200 and ready.json()["status"] == "degraded"
            damaged = " ".join(ready.json()["damaged"])
            assert "sharing.json is unreadable or corrupt" in damaged and "users.json" in damaged
        assert "sharing.json is unreadable or corrupt" in store.server.log()
