"""A deleted revocation list revives nothing (issue #35, item 7).

Real processes: a store and two connector replicas sharing their state, in a directory or in a
bucket (a moto server). A sign-in revoked at one replica is refused at both; `conn/revoked.json`
(`revoked.json` in the directory) is then deleted from outside: the revoked access token stays
refused at both replicas, also at a replica started afterwards (from the `.last-good` copy), a
sign-in that was not revoked keeps working, `/health/ready` names the file, and the next
revocation writes the list back holding both."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from connector.oauth.pkce import s256
from tests.connector.conftest import RunningStore, StoreUser
from tests.connector.oauth.live import mcp_status, running_connector
from tests.s3.servers import CREDENTIALS, S3Service
from tests.support.processes import ServerProcess, free_port
from tests.support.waiting import seconds_until

pytestmark = [pytest.mark.timeout(240)]

REDIRECT = "http://127.0.0.1:1/callback"
PREFIX = "conn"
# The replicas' copies of the list are refreshed every 0.5 s, or by a read finding them 1.5 s old:
# what a replica shows within SETTLE_S (asked every 0.1 s: each ask is an /mcp call).
SETTLE_S = 2.5


class Replicas:
    """Two connector replicas answering for one public URL, with their shared state."""

    def __init__(self, public: str, servers: list[ServerProcess], remove: Callable[[], None],
                 read: Callable[[], dict | None]) -> None:
        self.public = public
        self.servers = servers
        self.remove_revocations = remove
        self.revocations = read

    def sign_in(self, user: StoreUser) -> tuple[str, dict[str, str]]:
        """The OAuth code flow by hand at the first replica: (client id, tokens)."""
        base = self.servers[0].base_url
        registered = httpx.post(base + "/register", json={"redirect_uris": [REDIRECT], "client_name": "t"}, timeout=30)
        client_id = registered.json()["client_id"]
        verifier = secrets.token_urlsafe(48)
        params = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "state": "s",
                  "code_challenge": s256(verifier), "code_challenge_method": "S256", "resource": self.public + "/mcp"}
        with httpx.Client(base_url=base, timeout=30) as http:
            page = http.get("/authorize", params=params)
            login_id = re.search(r'name="login_id" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
            done = http.post("/authorize/complete", data={"login_id": login_id, "token": user.token, "action": "allow"})
            code = parse_qs(urlsplit(done.headers["location"]).query)["code"][0]
            tokens = http.post("/token", data={"grant_type": "authorization_code", "code": code, "client_id": client_id,
                                               "redirect_uri": REDIRECT, "code_verifier": verifier,
                                               "resource": self.public + "/mcp"})
        assert tokens.status_code == 200, tokens.text
        return client_id, tokens.json()

    def revoke(self, client_id: str, tokens: dict[str, str]) -> None:
        revoked = httpx.post(self.servers[0].base_url + "/revoke", timeout=30,
                             data={"token": tokens["refresh_token"], "client_id": client_id})
        assert revoked.status_code == 200, revoked.text

    def statuses(self, access_token: str) -> list[int]:
        return [mcp_status(server.base_url, access_token) for server in self.servers]


@contextmanager
def replicas(kind: str, tmp_path: Path, store: RunningStore, s3: S3Service) -> Iterator[Callable[[int], Replicas]]:
    """A factory of replica pairs on one state (the same state across calls: a restart)."""
    public = f"http://127.0.0.1:{free_port()}"
    env = {"CONNECTOR_STATE_KEY": secrets.token_hex(32), "CONNECTOR_PUBLIC_URL": public}
    state_dir: Path | None = None
    if kind == "directory":
        state_dir = tmp_path / "state"

        def remove() -> None:
            (state_dir / "revoked.json").unlink()

        def read() -> dict | None:
            path = state_dir / "revoked.json"
            return json.loads(path.read_text()) if path.exists() else None
    else:
        bucket = s3.new_bucket()
        env |= {**CREDENTIALS, "CONNECTOR_STATE_URL": f"s3://{bucket}/{PREFIX}", "CONNECTOR_S3_ENDPOINT_URL": s3.endpoint,
                "CONNECTOR_S3_REGION": "us-east-1"}
        key = f"{PREFIX}/revoked.json"

        def remove() -> None:
            assert key in s3.keys(bucket, PREFIX)
            s3.client().delete_object(Bucket=bucket, Key=key)

        def read() -> dict | None:
            if key not in s3.keys(bucket, PREFIX):
                return None
            return json.loads(s3.client().get_object(Bucket=bucket, Key=key)["Body"].read())

    with ExitStack() as stack:

        def start(generation: int) -> Replicas:
            servers = []
            for n in range(2):
                logs = tmp_path / f"replica-{generation}-{n}"
                logs.mkdir()
                servers.append(stack.enter_context(running_connector(logs, store.url, state_dir=state_dir, extra_env=env)))
            return Replicas(public, servers, remove, read)

        yield start


def _names_revocations_damaged(server: ServerProcess) -> bool:
    return "revoked.json" in httpx.get(server.base_url + "/health/ready", timeout=30).json().get("damaged_state_files", [])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["directory", "s3"])
def test_deleting_the_revocation_list_revives_no_token(kind: str, store: RunningStore, tmp_path: Path,
                                                       moto: S3Service) -> None:
    alice = store.add_user("alice")
    with replicas(kind, tmp_path, store, moto) as start:
        pair = start(1)
        kept_client, kept = pair.sign_in(alice)
        gone_client, gone = pair.sign_in(alice)
        later_client, later = pair.sign_in(alice)
        pair.revoke(gone_client, gone)
        seconds_until(lambda: pair.statuses(gone["access_token"]) == [401, 401], SETTLE_S, 0.1, "revoked at both")
        assert pair.statuses(kept["access_token"]) == [200, 200]

        pair.remove_revocations()
        assert pair.revocations() is None
        # Every replica has looked at the list again: its readiness (read through the same records
        # as the tokens' checks) names the file it found missing.
        seconds_until(lambda: all(_names_revocations_damaged(server) for server in pair.servers), SETTLE_S, 0.1,
                      "both replicas noticed the missing list")
        for _ in range(3):
            assert pair.statuses(gone["access_token"]) == [401, 401]  # not revived
            assert pair.statuses(kept["access_token"]) == [200, 200]
        for server in pair.servers:
            ready = httpx.get(server.base_url + "/health/ready", timeout=30).json()
            assert "revoked.json" in ready.get("damaged_state_files", []), ready

        # Replicas started while the list is missing read its last good copy.
        fresh = start(2)
        assert fresh.statuses(gone["access_token"]) == [401, 401]
        assert fresh.statuses(kept["access_token"]) == [200, 200]

        # The next revocation writes the list back, holding the earlier one too.
        fresh.revoke(later_client, later)
        written = pair.revocations()
        assert written is not None and len(written) == 2, written
        seconds_until(lambda: all(group.statuses(later["access_token"]) == [401, 401] for group in (pair, fresh)),
                      SETTLE_S, 0.1, "the new revocation at all four")
        for group in (pair, fresh):
            assert group.statuses(gone["access_token"]) == [401, 401]
            assert group.statuses(later["access_token"]) == [401, 401]
            assert group.statuses(kept["access_token"]) == [200, 200]
        assert kept_client
