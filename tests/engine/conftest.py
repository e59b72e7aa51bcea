"""Shared helpers for engine tests: where the recall-parity fixtures live."""

from __future__ import annotations

from pathlib import Path

from tests.support.fixtures import recall_parity_dir
from tests.support.processes import REPO_ROOT

__all__ = ["REPO_ROOT", "fixture_brains", "parity_dir"]


def parity_dir() -> Path:
    """The recall-parity fixture folder (see ``tests.support.fixtures.recall_parity_dir``)."""
    return recall_parity_dir()


def fixture_brains() -> list[Path]:
    """Every brain directory of the parity fixtures (empty when they are absent)."""
    brains = parity_dir() / "brains"
    return sorted(path for path in brains.iterdir() if path.is_dir()) if brains.is_dir() else []
