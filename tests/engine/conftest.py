"""Shared helpers for engine tests: where the recall-parity fixtures live."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def parity_dir() -> Path:
    """The recall-parity fixture folder: $RECALL_PARITY_DIR, else ../shared beside the repo."""
    configured = os.environ.get("RECALL_PARITY_DIR")
    if configured:
        return Path(configured).resolve()
    return (REPO_ROOT.parent / "shared" / "fixtures" / "recall-parity").resolve()


def fixture_brains() -> list[Path]:
    """Every brain directory of the parity fixtures (empty when they are absent)."""
    brains = parity_dir() / "brains"
    return sorted(path for path in brains.iterdir() if path.is_dir()) if brains.is_dir() else []
