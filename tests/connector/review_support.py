"""Helpers for the review-queue tests: a device that writes similar memories and flags them at the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from connector.engine.archive import load_archive, pack_archive
from connector.engine.brain import Brain
from connector.engine.ops import connector_memorize
from connector.engine.review import REVIEW_FILE, Flag, FlagPairs, review_document

from .conftest import auth, upload_raw


def flag_pairs_at_store(store_url: str, token: str, brain_id: str, pairs: list[tuple[str, str, str]],
                        attempts: int = 20) -> list[tuple[str, str]]:
    """Write each (old text, new text, relation) as two memories and queue the pair, as another
    connector would; pull, write, push with If-Match (again on 412). Returns (new id, old id) pairs."""
    for _ in range(attempts):
        response = httpx.get(f"{store_url}/api/brains/{brain_id}/sync", headers=auth(token), timeout=30)
        if response.status_code == 404:
            brain, condition = Brain(), {"If-None-Match": "*"}
        else:
            response.raise_for_status()
            brain = load_archive(response.content)
            condition = {"If-Match": f'"{response.headers["X-Checksum"]}"'}
        now = datetime.now(UTC)
        flags, ids = [], []
        for number, (old_text, new_text, relation) in enumerate(pairs):
            old = connector_memorize(old_text, agent="other device").apply(brain, now + timedelta(seconds=number))
            new = connector_memorize(new_text, agent="other device").apply(brain, now + timedelta(seconds=number, milliseconds=500))
            old_id, new_id = old["stored"][0]["id"], new["stored"][0]["id"]
            flags.append(Flag(new_id, old_id, relation, 0.9, "write", "other device"))
            ids.append((new_id, old_id))
        FlagPairs(flags, []).apply(brain, now)
        pushed = upload_raw(store_url, token, brain_id, pack_archive(brain), condition)
        if pushed.status_code == 200:
            return ids
        assert pushed.status_code == 412, pushed.text
    raise AssertionError("never won a push")


def statuses_at_store(store_url: str, token: str, brain_id: str) -> tuple[Brain, dict[tuple[str, str], str]]:
    """The brain at the store and each recorded pair's status."""
    response = httpx.get(f"{store_url}/api/brains/{brain_id}/sync", headers=auth(token), timeout=30)
    response.raise_for_status()
    brain = load_archive(response.content)
    assert REVIEW_FILE in brain
    return brain, {(pair["new"], pair["old"]): pair["status"] for pair in review_document(brain)["pairs"]}
