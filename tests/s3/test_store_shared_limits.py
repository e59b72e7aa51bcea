"""Failed logins counted across store replicas on one bucket (issue 27 item 2): two replicas on
SeaweedFS grant an address one budget of wrong tokens between them, not one each."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import httpx

from tests.s3.servers import S3Service
from tests.s3.test_replicas import two_replicas

FAILED_PER_MIN = 6


def test_wrong_tokens_from_one_address_get_one_budget_across_replicas(weed: S3Service, tmp_path: Path) -> None:
    address = f"198.51.100.{secrets.randbelow(200) + 20}"
    extra = {"STORE_TRUST_PROXY": "loopback", "STORE_RATE_FAILED_LOGINS_PER_MIN": str(FAILED_PER_MIN)}
    statuses: list[int] = []
    with two_replicas(weed, tmp_path, **extra) as (a, b, env):
        assert env["STORE_BACKEND"] == "s3"
        started = time.monotonic()
        for attempt in range(FAILED_PER_MIN * 3):
            replica = (a, b)[attempt % 2]
            answer = httpx.get(replica.url + "/auth/me", timeout=30, headers={
                "Authorization": "Bearer bst_" + secrets.token_urlsafe(32), "X-Forwarded-For": address})
            statuses.append(answer.status_code)
        refilled = int((time.monotonic() - started) * FAILED_PER_MIN / 60) + 1
        # Someone else's address still gets its own budget.
        other = httpx.get(a.url + "/auth/me", timeout=30, headers={"Authorization": "Bearer bst_x", "X-Forwarded-For": "192.0.2.1"})
        assert other.status_code == 401
    assert set(statuses) <= {401, 429}, statuses
    # One budget (plus what refilled meanwhile), not one per replica; once refused, refused at both.
    assert FAILED_PER_MIN <= statuses.count(401) <= FAILED_PER_MIN + refilled, statuses
    assert statuses[-4:] == [429] * 4
    assert weed.keys(env["STORE_S3_BUCKET"], env.get("STORE_S3_PREFIX", "").strip("/") + "/limits/failed-logins/")
