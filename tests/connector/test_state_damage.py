"""Damaged state files and a full disk (issue 24, item 9, the connector's part).

Real store and connector processes sharing nothing but loopback. State files damaged
from outside (truncated in place) are never read as empty: `/token`, MCP calls and
web pages go on from the last good records, a revoked sign-in stays revoked (also
after a restart, from the `.last-good` copy), the log and `/health/ready` name the files,
and the next change writes them back. A full disk under the state directory makes
`/register` answer 503 with the reason, and it works again once there is room.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.processes import free_port

from .conftest import RunningStore, shared_store
from .oauth.live import REDIRECT, HandClient, mcp_status, running_connector
from .webapp.conftest import csrf_of, signed_in_browser

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = [pytest.mark.timeout(120)]

DAMAGED = ("families.json", "refresh.json", "revoked.json", "brains.json")


def truncate(path: Path) -> None:
    """Damage a state file in place, as a full disk or a crash of an editor would."""
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(max(1, size // 2))


def test_damaged_state_files_keep_the_last_good_state_and_are_reported(store: RunningStore, tmp_path: Path) -> None:
    alice = store.add_user("alice")
    state = tmp_path / "state"
    env = {"CONNECTOR_STATE_KEY": secrets.token_hex(32)}
    port = free_port()  # the same after the restart: access tokens name the connector's URL
    with running_connector(tmp_path, store.url, state_dir=state, port=port, extra_env=env) as server:
        base = server.base_url
        client = HandClient(base)
        kept, revoked = client.sign_in(alice), client.sign_in(alice)
        assert httpx.post(base + "/revoke", data={"token": revoked["refresh_token"], "client_id": client.client_id}).status_code == 200
        assert mcp_status(base, revoked["access_token"]) == 401
        # A brain chosen in the web app (brains.json holds each person's choice).
        browser = signed_in_browser(base, alice.token, "198.51.100.1")
        home = browser.get("/app")
        chosen = browser.post("/app/brain", data={"brain": "default", "csrf": csrf_of(home.text)})
        assert chosen.status_code == 303, chosen.text
        assert json.loads((state / "brains.json").read_text())
        for name in DAMAGED:
            truncate(state / name)

        assert mcp_status(base, kept["access_token"]) == 200
        assert mcp_status(base, revoked["access_token"]) == 401  # never read as "nothing revoked"
        assert browser.get("/app").status_code == 200
        refreshed = client.refresh(kept["refresh_token"])
        assert refreshed.status_code == 200, refreshed.text
        kept = refreshed.json()
        assert client.refresh(revoked["refresh_token"]).status_code == 400
        ready = httpx.get(base + "/health/ready", timeout=30).json()
        assert ready["status"] == "degraded"
        assert set(ready["damaged_state_files"]) >= {"revoked.json", "brains.json"}, ready
        log = server.log()
        assert '"file": "revoked.json"' in log and "state file damaged" in log
        assert '"status": 500' not in log
        # The refresh above rewrote the token files from the last good records.
        assert json.loads((state / "refresh.json").read_text())
        for name in ("revoked.json", "brains.json"):
            truncate(state / name)  # damaged again (they were not written since)

    # A restart with damaged files starts from the good copies: the revoked sign-in stays revoked.
    with running_connector(tmp_path, store.url, state_dir=state, port=port, extra_env=env) as server:
        base = server.base_url
        assert mcp_status(base, kept["access_token"]) == 200
        assert mcp_status(base, revoked["access_token"]) == 401
        assert client.refresh(kept["refresh_token"]).status_code == 200
        assert "revoked.json" in httpx.get(base + "/health/ready", timeout=30).json()["damaged_state_files"]


@pytest.fixture
def tiny_disk(tmp_path: Path):  # noqa: ANN201
    """A 4 MiB tmpfs (mounting needs root; skipped otherwise), unmounted afterwards."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_makes_register_answer_503_with_the_reason(store: RunningStore, tmp_path: Path, tiny_disk: Path) -> None:
    state = tiny_disk / "state"
    with running_connector(tmp_path, store.url, state_dir=state) as server:
        base = server.base_url
        assert httpx.post(base + "/register", json={"redirect_uris": [REDIRECT]}, timeout=30).status_code == 201
        filler = tiny_disk / "filler"
        with filler.open("wb") as handle:
            try:
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
            except OSError:
                pass
        full = httpx.post(base + "/register", json={"redirect_uris": [REDIRECT]}, timeout=30)
        assert full.status_code == 503, full.text
        assert full.json()["error"] == "temporarily_unavailable"
        assert "no space left" in full.json()["error_description"]
        assert "Retry-After" in full.headers
        os.unlink(filler)
        assert httpx.post(base + "/register", json={"redirect_uris": [REDIRECT]}, timeout=30).status_code == 201
        assert '"status": 500' not in server.log()
