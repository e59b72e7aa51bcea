"""The connector's state over a DocumentStore, on a directory, moto and SeaweedFS.

Two objects on one place stand for two replicas: what one writes the other reads, a code or
a sign-in is taken or claimed once among racers, concurrent changes to one collection are
all kept, a revocation reaches a cached copy within its bound, and damage never reads as empty.
"""

from __future__ import annotations

import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from common.docstore import DocumentStore
from connector.identity.base import Identity
from connector.oauth.client_files import ClientDocs
from connector.oauth.grants import RefreshGrants
from connector.oauth.state import OAuthState
from connector.state.collection import DocCollection
from connector.state.files import StateError
from connector.state.once import OnceDocs
from connector.state.sealed import SealedDocs
from connector.state.sealing import SecretBox

from tests.support.docstores import Backend

pytestmark = [pytest.mark.timeout(120)]
KEY = secrets.token_bytes(32)


def race(count: int, action: Any) -> list[Any]:
    """``action(i)`` in ``count`` threads released together; their results."""
    start = threading.Barrier(count)

    def run(index: int) -> Any:
        start.wait()
        return action(index)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def test_a_collection_change_at_one_replica_is_read_at_the_other(backend: Backend) -> None:
    a, b = DocCollection(backend.store, "brains.json"), DocCollection(backend.reopen(), "brains.json")
    assert a.get("alice") is None and len(b) == 0
    a.mutate(lambda records: records.__setitem__("alice", "work"))
    assert b.get("alice") == "work"
    b.mutate(lambda records: records.__setitem__("alice", "home"))
    assert a.get("alice") == "home"
    # A change that raises writes nothing.
    with pytest.raises(KeyError):
        a.mutate(lambda records: records.pop("nobody"))
    assert b.records == {"alice": "home"}


def test_concurrent_changes_at_two_replicas_are_all_kept(backend: Backend) -> None:
    replicas = [DocCollection(backend.store, "refresh.json"), DocCollection(backend.reopen(), "refresh.json")]
    race(8, lambda i: replicas[i % 2].mutate(lambda records: records.__setitem__(f"t{i}", i)))
    assert replicas[0].records == {f"t{i}": i for i in range(8)}


def test_a_cached_copy_sees_another_replicas_change_within_its_bound(backend: Backend) -> None:
    writer = DocCollection(backend.store, "revoked.json")
    cached = DocCollection(backend.reopen(), "revoked.json", fresh_s=0.2)
    assert cached.get("family") is None  # starts the background refresh
    writer.mutate(lambda records: records.__setitem__("family", 1.0))
    changed = time.monotonic()
    while cached.get("family") is None:
        assert time.monotonic() - changed < 2.0, "the revocation did not arrive within the bound"
        time.sleep(0.01)
    # Within fresh_s plus a round trip (loaded machine: allow slack, but far below "never").
    assert time.monotonic() - changed < 1.5


def test_a_damaged_document_is_never_read_as_empty(backend: Backend) -> None:
    revoked = DocCollection(backend.store, "revoked.json")
    revoked.mutate(lambda records: records.__setitem__("family", 9e12))
    backend.store.put("revoked.json", b'{"fam')  # damaged from outside
    assert revoked.get("family") == 9e12 and revoked.damaged is not None
    revoked.mutate(lambda records: records.__setitem__("other", 1.0))
    assert revoked.damaged is None
    assert DocCollection(backend.reopen(), "revoked.json").records == {"family": 9e12, "other": 1.0}
    backend.store.put("revoked.json", b"[]")
    with pytest.raises(StateError, match="revoked.json"):
        DocCollection(backend.reopen(), "revoked.json")  # start-up refuses rather than guess


def test_sealed_records_are_shared_taken_once_and_deleted_everywhere(backend: Backend) -> None:
    box = SecretBox(KEY)
    a = SealedDocs(backend.store, "codes", box, "authorization-code", ttl_s=60, capacity=100)
    b = SealedDocs(backend.reopen(), "codes", box, "authorization-code", ttl_s=60, capacity=100)
    a.put("code-1", {"client": "c"}, time.time() + 60)
    assert b.get("code-1") == {"client": "c"}
    # Nothing of the key is written, and the record is sealed.
    [name] = backend.store.list("codes/")
    stored = backend.store.get(name)
    assert stored is not None and b"code-1" not in stored.data and b"client" not in stored.data
    taken = race(6, lambda i: (a if i % 2 else b).take("code-1"))
    assert taken.count({"client": "c"}) == 1 and taken.count(None) == 5
    a.put("session", {"s": 1}, time.time() + 60)
    assert b.delete("session") and a.get("session") is None
    # Expired records are neither read nor taken; a foreign key opens nothing.
    a.put("old", {"o": 1}, time.time() - 1)
    assert b.get("old") is None and b.take("old") is None
    a.put("mine", {"m": 1}, time.time() + 60)
    foreign = SealedDocs(backend.reopen(), "codes", SecretBox(secrets.token_bytes(32)), "authorization-code",
                         ttl_s=60, capacity=100)
    assert foreign.get("mine") is None


def test_pruning_removes_expired_records_and_the_soonest_to_expire_beyond_capacity(backend: Backend) -> None:
    now = [1000.0]
    records = SealedDocs(backend.store, "web-oidc", SecretBox(KEY), "web-oidc", ttl_s=1000, capacity=2,
                         clock=lambda: now[0], prune_every_s=1e9)

    def settle(count: int) -> None:
        deadline = time.monotonic() + 10
        while len(records) != count and time.monotonic() < deadline:
            time.sleep(0.05)

    records.put("k0", {"i": 0}, now[0] + 10)
    records.put("k1", {"i": 1}, now[0] + 11)  # every capacity-th write starts a pass: nothing to do
    settle(2)
    now[0] += 50  # k0 and k1 have expired
    records.put("k2", {"i": 2}, now[0] + 100)
    records.put("k3", {"i": 3}, now[0] + 200)
    settle(2)
    assert records.get("k2") == {"i": 2} and records.get("k3") == {"i": 3} and len(records) == 2
    records.put("k4", {"i": 4}, now[0] + 300)
    records.put("k5", {"i": 5}, now[0] + 400)  # four live, capacity two: the two expiring first go
    settle(2)
    assert records.get("k4") == {"i": 4} and records.get("k5") == {"i": 5} and len(records) == 2


def test_a_sign_in_is_claimed_once_across_replicas(backend: Backend) -> None:
    markers = [OnceDocs(backend.store, "once"), OnceDocs(backend.reopen(), "once")]
    claims = race(6, lambda i: markers[i % 2].claim("sign-in-1"))
    assert claims.count(True) == 1
    assert markers[1].claim("sign-in-2") and not markers[0].claim("sign-in-2")


def test_clients_registered_at_one_replica_are_known_at_the_other(backend: Backend) -> None:
    a, b = ClientDocs(backend.store), ClientDocs(backend.reopen())
    client_id = "bcc_" + secrets.token_urlsafe(24)
    a.put(client_id, {"redirect_uris": ["http://127.0.0.1:1/cb"], "used": False})
    assert b.get(client_id) == {"redirect_uris": ["http://127.0.0.1:1/cb"], "used": False}
    assert len(a) == 1 and dict(b.items()) == {client_id: {"redirect_uris": ["http://127.0.0.1:1/cb"], "used": False}}
    b.put(client_id, {"used": True})
    assert a.get(client_id) == {"used": True} and len(a) == 1
    assert b.get("../../etc/passwd") is None and b.get("bcc_x") is None
    with pytest.raises(ValueError):
        a.put("not-a-client", {})
    a.delete(client_id)
    assert b.get(client_id) is None and len(list(b.items())) == 0


def _grants(docs: DocumentStore) -> tuple[OAuthState, RefreshGrants]:
    state = OAuthState(None, KEY, docs=docs)
    return state, RefreshGrants(state, ttl_s=3600, grace_s=0)


def test_refresh_reuse_at_another_replica_is_detected_and_revokes_the_family(backend: Backend) -> None:
    state_a, grants_a = _grants(backend.store)
    state_b, grants_b = _grants(backend.reopen())
    identity = Identity(subject="alice", store_credential="bst_secret", renewal_secret="", credential_expires_at=None)
    family, first = grants_a.start_family(client_id="bcc_x", client_name="x", scope=frozenset({"brain"}),
                                          resource="http://c/mcp", idp="static", identity=identity)
    # The family's secret is sealed: the store credential is nowhere in the documents.
    for key in backend.store.list(""):
        document = backend.store.get(key)
        assert document is not None and b"bst_secret" not in document.data
    assert grants_b.inspect(first).status == "active"
    _, second = grants_b.rotate(first, identity)
    assert grants_a.inspect(second).status == "active"
    assert grants_a.inspect(first).status == "reused"  # replayed at the other replica
    grants_a.revoke_family(family.family_id)
    assert grants_b.inspect(second).status == "unknown"
    deadline = time.monotonic() + 5
    while not grants_b.family_revoked(family.family_id):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    state_b.set_brain("alice", "work")
    assert state_b.get_brain("alice") == "work"  # at once where it was chosen
    while state_a.get_brain("alice") != "work":  # within the bound elsewhere
        assert time.monotonic() < deadline + 5
        time.sleep(0.05)
