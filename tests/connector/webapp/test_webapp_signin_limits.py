"""Wrong tokens on the web app's sign-in lock nobody else out (issue 24, item 1).

A real store (believing X-Forwarded-For from the connector on loopback) and a real
`brain-connector serve --workers 2`. The web app's sign-in names the person's address
to the store, as the OAuth sign-in page does, so 8 wrong tokens from each of 4
addresses are counted against those addresses, not against the connector: a valid
sign-in from another address still gets in. Attempts per address are one budget for
both workers (the OAuth page's, `CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN`), and a store 429
is a refusal, never a "token not accepted" that invites another try.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..conftest import RunningStore, running_store
from ..oauth.live import running_connector
from .conftest import web_sign_in

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("connector-workers"), pytest.mark.timeout(120)]

ATTACKERS = [f"203.0.113.{n}" for n in range(1, 5)]
WRONG_PER_ADDRESS = 8  # under the connector's own limit (10 a minute per address)


@contextmanager
def two_workers(tmp_path: Path, store: RunningStore) -> Iterator[str]:
    """`brain-connector serve --workers 2` over ``store``: its base URL."""
    env = {"CONNECTOR_WORKERS": "2", "CONNECTOR_MCP_RATE_PER_MIN": "0"}
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state", extra_env=env) as server:
        yield server.base_url
        assert "Traceback" not in server.log()


def test_wrong_web_sign_ins_lock_nobody_else_out_and_one_address_has_one_budget_across_workers(tmp_path: Path) -> None:
    with running_store(tmp_path, env={"STORE_TRUST_PROXY": "loopback"}) as store:
        alice = store.add_user("alice")
        with two_workers(tmp_path, store) as base:
            wrong = [web_sign_in(base, "bst_" + secrets.token_urlsafe(32), address).status_code
                     for address in ATTACKERS for _ in range(WRONG_PER_ADDRESS)]
            # Each refused as a wrong token: before the fix the store counted all 32 against the
            # connector's address and, past its 30 a minute, answered 429 for everyone.
            assert wrong == [401] * len(wrong)
            done = web_sign_in(base, alice.token, "198.51.100.9")
            assert done.status_code == 303, done.text
            assert done.headers["location"].endswith("/app")

            # Twenty tries from one address over fresh connections (both workers): ten reach the
            # store, as with one process; before, each worker granted its own ten.
            answers = [web_sign_in(base, "bst_" + secrets.token_urlsafe(32), "192.0.2.50") for _ in range(20)]
            assert [answer.status_code for answer in answers] == [401] * 10 + [429] * 10
            assert "Too many sign-in attempts" in answers[-1].text


def test_a_store_429_on_web_sign_in_is_a_refusal_not_a_wrong_token(tmp_path: Path) -> None:
    env = {"STORE_TRUST_PROXY": "loopback", "STORE_RATE_FAILED_LOGINS_PER_MIN": "3"}
    with running_store(tmp_path, env=env) as store:
        alice = store.add_user("alice")
        with two_workers(tmp_path, store) as base:
            statuses = [web_sign_in(base, "bst_" + secrets.token_urlsafe(32), "192.0.2.60").status_code
                        for _ in range(3)]
            assert statuses == [401] * 3
            # The store now refuses that address (its limit of 3): even the right token is refused
            # there, and the page says to wait instead of "not accepted".
            refused = web_sign_in(base, alice.token, "192.0.2.60")
            assert refused.status_code == 429
            assert "refuses more sign-in attempts" in refused.text and "not accepted" not in refused.text
            # From another address the same person signs in at once.
            assert web_sign_in(base, alice.token, "192.0.2.61").status_code == 303
