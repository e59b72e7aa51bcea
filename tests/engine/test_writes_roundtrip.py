"""Round trips: brains written by our operations, read back by our recall and archive code."""

from __future__ import annotations

from datetime import timedelta

import pytest

from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.format.brain import Brain
from connector.engine.recall.exact import recall
from connector.engine.writes.ops import Forget, Memorize, Pin, Unpin, Verify, connector_memorize
from tests.engine.writes_support import require_fixtures, NOW, check_consistency, entries, fixture_brain, memory

require_fixtures()

QUERIES = ["zanzibar ferries", "pytest snapshot", "podcast networking", "guitar cooking meditation",
           "deploy caddy", "budget travel reading"]


def ids(hits: list[dict]) -> list[str]:
    return [hit["id"] for hit in hits]


def without_search_index(brain: Brain) -> Brain:
    copy = brain.copy()
    copy.remove("search-index.json")
    return copy


@pytest.mark.parametrize("name", ["brain-1-01", "brain-1-07"])  # with and without search-index.json
def test_a_memorized_memory_is_recalled_by_its_words(name: str) -> None:
    brain = fixture_brain(name)
    [stored] = Memorize.from_request(memory("Zanzibar ferries", content="Ferries to Zanzibar leave at seven.",
                                            tags=["travel", "ferry"])).apply(brain, NOW)["stored"]
    hits = recall(brain, "zanzibar ferries", now=NOW + timedelta(days=1))
    assert hits[0]["id"] == stored["id"]
    assert hits[0]["relevance"] == 1 and hits[0]["title"] == "Zanzibar ferries"


def test_search_index_kept_in_step_gives_the_same_recall_as_a_rebuild() -> None:
    """After writes, recall from our updated search-index.json equals recall rebuilt from files."""
    brain = fixture_brain("brain-1-01")
    victims = [mid for mid, entry in entries(brain).items() if entry["salience"] < 0.7][:3]
    Memorize.from_request([
        memory("Zanzibar ferries", content="Ferries to Zanzibar leave at 07:00, 1000 rps of tourists.",
               tags=["travel", "ferry"]),
        memory("Pytest snapshot flakes", content="Snapshot tests flake under xdist; pin the seed.",
               tags=["pytest", "snapshot", "flaky"]),
    ]).apply(brain, NOW)
    for victim in victims:
        Forget(victim).apply(brain, NOW)
    connector_memorize("Podcast networking works best at meetups.", tags=["podcast", "meetup"]).apply(brain, NOW)
    check_consistency(brain)
    rebuilt = without_search_index(brain)
    later = NOW + timedelta(days=3)
    for query in QUERIES:
        assert recall(brain, query, top=25, now=later) == recall(rebuilt, query, top=25, now=later), query
    assert recall(brain, None, context=True, project="atlas", topics="talk,blog", now=later, top=25) == \
        recall(rebuilt, None, context=True, project="atlas", topics="talk,blog", now=later, top=25)


def test_a_pinned_memory_does_not_decay_and_an_unpinned_one_does() -> None:
    brain = fixture_brain("brain-1-00")
    stored = Memorize.from_request([
        memory("Quokka habitat facts", content="Quokkas live on Rottnest island.", tags=["quokka"]),
        memory("Quokka diet facts", content="Quokkas eat leaves on Rottnest island.", tags=["quokka"]),
    ]).apply(brain, NOW)["stored"]
    pinned_id, plain_id = stored[0]["id"], stored[1]["id"]
    Pin(pinned_id).apply(brain, NOW)
    year_later = NOW + timedelta(days=365)
    hits = {hit["id"]: hit for hit in recall(brain, "quokka rottnest", now=year_later)}
    assert hits[pinned_id]["decayed_strength"] == stored[0]["strength"]
    assert hits[plain_id]["decayed_strength"] < stored[1]["strength"] * 0.1
    Unpin(pinned_id).apply(brain, NOW)
    hits = {hit["id"]: hit for hit in recall(brain, "quokka rottnest", now=year_later)}
    assert hits[pinned_id]["decayed_strength"] < stored[0]["strength"]


def test_a_forgotten_memory_disappears_and_sits_in_the_archive() -> None:
    brain = fixture_brain("brain-1-05")
    [stored] = Memorize.from_request(memory("Axolotl regeneration", content="Axolotls regrow limbs.",
                                            tags=["axolotl"])).apply(brain, NOW)["stored"]
    assert ids(recall(brain, "axolotl regrow", now=NOW)) == [stored["id"]]
    Forget(stored["id"]).apply(brain, NOW)
    assert stored["id"] not in ids(recall(brain, "axolotl regrow", now=NOW))
    assert brain.read_json("_archived/index.json")["memories"][stored["id"]]["archived_reason"] == "forget"
    assert brain.read_text(f"_archived/{stored['path']}").endswith("Axolotls regrow limbs.\n")
    assert ids(recall(without_search_index(brain), "axolotl regrow", now=NOW)) == []


def test_quarantine_and_supersession_marks_reach_recall() -> None:
    brain = fixture_brain("brain-1-00")
    old = Memorize.from_request(memory("Office wifi password rotation", content="Wifi rotates monthly.",
                                       origin="user")).apply(brain, NOW)["stored"][0]
    new = connector_memorize("Office wifi password rotation is weekly now.", origin="tool-output",
                             supersedes=[old["id"]]).apply(brain, NOW)["stored"][0]
    hits = {hit["id"]: hit for hit in recall(brain, "wifi rotation", now=NOW)}
    assert hits[new["id"]]["quarantine_pending"] is True and hits[new["id"]]["low_trust"] is True
    assert "superseded_by" not in hits[old["id"]]
    Verify("approve", [new["id"]]).apply(brain, NOW)
    hits = {hit["id"]: hit for hit in recall(brain, "wifi rotation", now=NOW)}
    assert "quarantine_pending" not in hits[new["id"]]
    assert hits[old["id"]]["superseded_by"] == new["id"]


def test_written_brain_survives_pack_and_load() -> None:
    brain = fixture_brain("brain-1-05")
    Memorize.from_request(memory("Packed", tags=["a", "b"])).apply(brain, NOW)
    Forget(next(mid for mid, e in entries(brain).items() if e["salience"] < 0.7)).apply(brain, NOW)
    packed = pack_archive(brain)
    assert load_archive(packed).files == brain.files
    assert pack_archive(load_archive(packed)) == packed
