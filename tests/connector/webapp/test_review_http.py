"""The Review page over HTTP against a real store: listing, the four decisions, refusals that change nothing."""

from __future__ import annotations

import httpx
import pytest

from tests.engine.writes_support import check_consistency

from ..conftest import RunningStore, auth, brains_of, direct_memorize, shared_store
from ..review_support import flag_pairs_at_store, statuses_at_store
from ..test_e2e_sharing import share
from .conftest import app_client, sign_in

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(120)

PAIRS = [("The standup is at 9:30.", "We moved the standup to 10:00.", "update"),
         ("Deploys go out on Tuesdays.", "We deploy every Tuesday.", "duplicate")]


def test_the_review_page_lists_pairs_and_refuses_bad_decisions(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, "The office wifi is called Nimbus.")
    (standup_new, standup_old), (deploy_new, deploy_old) = flag_pairs_at_store(store.url, alice.token, brain_id, PAIRS)
    _, before = statuses_at_store(store.url, alice.token, brain_id)
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        home = client.get("/app")
        assert "Similar pairs to review" in home.text and '/app/review">2</a>' in home.text
        page = client.get("/app/review")
        assert page.status_code == 200
        assert "2 pairs waiting" in page.text
        assert "We moved the standup to 10:00." in page.text and "The standup is at 9:30." in page.text
        assert page.text.count('name="decision" value="keep_new"') == 2
        # Refused, nothing changed: no CSRF token, a made-up decision, the pair the wrong way round, an unknown id.
        assert client.post("/app/review", data={"new": standup_new, "old": standup_old,
                                                "decision": "keep_new"}).status_code == 403
        for data in ({"decision": "delete"}, {"decision": "keep_new", "new": standup_old, "old": standup_new},
                     {"decision": "keep_new", "new": "mem_20200101_abcdef"}, {"decision": "merge", "content": " "}):
            refused = client.post("/app/review", data={"csrf": csrf, "new": standup_new, "old": standup_old, **data})
            assert refused.status_code == 409, data
            assert 'role="alert"' in refused.text
        _, after = statuses_at_store(store.url, alice.token, brain_id)
        assert after == before
        # One decision: the page says so and lists one pair less.
        done = client.post("/app/review", data={"csrf": csrf, "new": deploy_new, "old": deploy_old,
                                                "decision": "dismiss"})
        assert done.status_code == 303 and done.headers["location"].endswith("/app/review?done=dismiss")
        page = client.get("/app/review?done=dismiss")
        assert "you will not be asked about this pair again" in page.text and "1 pair waiting" in page.text
        brain, statuses = statuses_at_store(store.url, alice.token, brain_id)
        assert statuses[(deploy_new, deploy_old)] == "dismissed"
        assert statuses[(standup_new, standup_old)] == "pending"
        check_consistency(brain)


def test_a_read_only_sign_in_sees_the_pairs_but_cannot_decide(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    direct_memorize(store.url, alice.token, brain_id, "The office wifi is called Nimbus.")
    [(new, old)] = flag_pairs_at_store(store.url, alice.token, brain_id, PAIRS[:1])
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token, access="read")
        page = client.get("/app/review")
        assert page.status_code == 200 and "1 pair waiting" in page.text
        assert "We moved the standup to 10:00." in page.text
        for word in ('name="decision"', ">Keep new<", ">Merge<"):
            assert word not in page.text
        for decision in ("keep_new", "keep_old", "merge", "dismiss"):
            refused = client.post("/app/review", data={"csrf": csrf, "new": new, "old": old, "decision": decision,
                                                       "content": "merged"})
            assert refused.status_code == 403 and "read-only" in refused.text
    _, statuses = statuses_at_store(store.url, alice.token, brain_id)
    assert statuses == {(new, old): "pending"}


def test_a_viewer_of_a_shared_brain_sees_the_pairs_but_cannot_decide(store: RunningStore) -> None:
    alice, bob = store.add_user("alice"), store.add_user("bob")
    team = httpx.post(f"{store.url}/api/brains", headers=auth(alice.token), json={"name": "team"}, timeout=30).json()
    direct_memorize(store.url, alice.token, team["id"], "The team deploys the billing service on Thursdays.")
    [(new, old)] = flag_pairs_at_store(store.url, alice.token, team["id"], PAIRS[:1])
    share(store, team["id"], bob, "viewer")
    with app_client(store.url) as client:
        csrf = sign_in(client, bob.token)  # a sign-in that may write: the brain's role is what forbids
        assert client.post("/app/brain", data={"csrf": csrf, "brain": team["id"]}).status_code == 303
        page = client.get("/app/review")
        assert page.status_code == 200 and "1 pair waiting" in page.text
        assert "You are a viewer of this brain" in page.text
        assert 'name="decision"' not in page.text and ">Merge<" not in page.text
        refused = client.post("/app/review", data={"csrf": csrf, "new": new, "old": old, "decision": "keep_new"})
        assert refused.status_code == 409 and "viewer" in refused.text
    _, statuses = statuses_at_store(store.url, alice.token, team["id"])
    assert statuses == {(new, old): "pending"}
