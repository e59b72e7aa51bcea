"""bench/gate_signals_probe.py: its unpooled token states are the numpy pass's own (their mean is
the pass's vector), a memory's sentences, and the AUC it reports."""

from __future__ import annotations

import sys

import numpy as np

from connector.engine.recall.e5numpy import PASSAGE_PREFIX, QUERY_PREFIX, NumpyE5
from tests.engine.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))
import gate_signals_probe as probe  # type: ignore[import-not-found]  # noqa: E402


def test_the_token_states_pool_to_the_numpy_pass_vector() -> None:
    model = NumpyE5()
    states = probe.TokenStates(model)
    for text in ("I adopted a grey cat from the shelter last spring.", "土曜日は鎌倉で友達と海辺を散歩する予定です。"):
        every = states.every_state(text, PASSAGE_PREFIX)
        pooled = every.mean(axis=0)
        pooled /= np.linalg.norm(pooled)
        assert float(pooled @ model.passages([text])[0]) > 0.9999
        content = states(text, PASSAGE_PREFIX)
        # <s>, the prefix's tokens and </s> are left out; each row is unit length.
        assert len(content) == len(every) - 2 - len(model.tokenizer.content(PASSAGE_PREFIX))
        assert np.allclose(np.linalg.norm(content, axis=1), 1.0, atol=1e-5)
    assert len(states("cat", QUERY_PREFIX)) >= 1


def test_sentences_split_at_the_ends_of_sentences_and_lines_in_every_script() -> None:
    assert probe.sentences("First one. Second one!\nA line") == ["First one.", "Second one!", "A line"]
    assert probe.sentences("我家的猫。它很健康！") == ["我家的猫。", "它很健康！"]
    assert probe.sentences("ok") == ["ok"]


def test_auc_counts_ties_as_half() -> None:
    assert probe.auc(np.array([2.0, 3.0]), np.array([1.0, 0.0])) == 1.0
    assert probe.auc(np.array([1.0]), np.array([1.0])) == 0.5
    assert probe.auc(np.array([0.0]), np.array([1.0, 2.0])) == 0.0
