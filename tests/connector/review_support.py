"""Helpers for the review-queue tests: a device that writes similar memories and flags them at the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from connector.engine.format.brain import Brain
from connector.engine.tending.review import REVIEW_FILE, Flag, FlagPairs, review_document
from connector.engine.writes.ops import connector_memorize

from .conftest import device_write, download_brain


def flag_pairs_at_store(store_url: str, token: str, brain_id: str,
                        pairs: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """Write each (old text, new text, relation) as two memories and queue the pair, as another
    connector would, straight to the store. Returns the (new id, old id) pairs."""

    def write(brain: Brain) -> list[tuple[str, str]]:
        now = datetime.now(UTC)
        flags, ids = [], []
        for number, (old_text, new_text, relation) in enumerate(pairs):
            at = now + timedelta(seconds=number)
            old = connector_memorize(old_text, agent="other device").apply(brain, at)["stored"][0]["id"]
            new = connector_memorize(new_text, agent="other device").apply(brain, at + timedelta(milliseconds=500))
            flags.append(Flag(new["stored"][0]["id"], old, relation, 0.9, "write", "other device"))
            ids.append((new["stored"][0]["id"], old))
        FlagPairs(flags, []).apply(brain, now)
        return ids

    return device_write(store_url, token, brain_id, write)


def statuses_at_store(store_url: str, token: str, brain_id: str) -> tuple[Brain, dict[tuple[str, str], str]]:
    """The brain at the store and each recorded pair's status."""
    brain, _ = download_brain(store_url, token, brain_id)
    assert REVIEW_FILE in brain
    return brain, {(pair["new"], pair["old"]): pair["status"] for pair in review_document(brain)["pairs"]}
