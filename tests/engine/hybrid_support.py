"""Small generated brains for hybrid recall tests (English, Chinese, Japanese, accents)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from connector.engine.format.brain import Brain
from connector.engine.writes.ops import Memorize
from connector.workcopy.backfill import READY, E5Backfill

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

MEMORIES: list[dict[str, Any]] = [
    {"title": "Editor settings", "content": "I indent Python with tabs in my editor, four columns wide.",
     "tags": ["editor"]},
    {"title": "Database choice", "content": "We picked PostgreSQL for the shipment tracking service.",
     "tags": ["database"]},
    {"title": "Contract meeting", "content": "Meeting with Jürgen Müller about the résumé review on Friday.",
     "tags": ["meeting"]},
    {"title": "Cluster upgrade", "content": "The Kubernetes cluster upgrade needs a maintenance window.",
     "tags": ["ops"]},
    {"title": "猫的疫苗", "content": "我家的猫每年三月去宠物医院打疫苗。", "tags": ["猫"]},
    {"title": "週末の予定", "content": "土曜日は鎌倉で友達と海辺を散歩する予定です。", "tags": ["週末"]},
    {"title": "Track habit", "content": "My knees hurt after long runs on concrete, so I run on the track.",
     "tags": ["health"]},
    {"title": "Coffee", "content": "I drink one coffee in the morning and none after noon.", "tags": ["habits"]},
    {"title": "Webhook relay", "content": "The webhook relay retries failed deliveries with exponential backoff.",
     "tags": ["webhooks"]},
    {"title": "Travel documents", "content": "Passport renewal happens at the embassy in Tokyo.", "tags": ["travel"]},
]


def make_brain(memories: list[dict[str, Any]] | None = None) -> tuple[Brain, dict[str, str]]:
    """A fresh brain holding ``memories`` (default: MEMORIES); returns it and title -> id."""
    brain = Brain()
    items = [{"type": "learning", "path": "notes/", **memory} for memory in (memories or MEMORIES)]
    stored = Memorize.from_request(items).apply(brain, NOW)["stored"]
    return brain, {item["title"]: entry["id"] for item, entry in zip(items, stored)}


class CountingEmbedder:
    """Deterministic unit vectors per text (no model), counting what it embeds.

    ``favour`` maps a substring to a fixed direction: texts containing it (and
    queries containing it) point the same way, which lets a test make the
    semantic side prefer a given memory.
    """

    model_id = "test-embedder"
    dimensions = 32

    def __init__(self, favour: dict[str, int] | None = None) -> None:
        self.favour = favour or {}
        self.embedded = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.embedded += len(texts)
        rows = []
        for text in texts:
            # A digest, not hash(): str hashes differ between processes, and so would every ranking.
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")
            vector = np.random.default_rng(seed).standard_normal(self.dimensions)
            for needle, axis in self.favour.items():
                if needle in text:
                    vector = np.zeros(self.dimensions)
                    vector[axis] = 1.0
            rows.append(vector / np.linalg.norm(vector))
        return np.asarray(rows, dtype=np.float32)


def write_brain(brain: Brain, directory: Path) -> None:
    """Write ``brain``'s files under ``directory`` (a brain directory, as the quality sets hold)."""
    for path, data in brain.files.items():
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_bytes(data)


def backfilled(backfill: E5Backfill, brain_id: str = "b") -> bool:
    """Whether ``backfill`` has computed every e5 vector of ``brain_id``'s version."""
    progress = backfill.progress(brain_id)
    return progress is not None and progress.state == READY
