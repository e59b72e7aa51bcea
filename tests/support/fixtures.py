"""Where test fixtures live: in the repository (tests/fixtures), or the full sets in ../shared.

No absolute paths: ``../shared`` is found beside the repository, so a bare clone runs on
the copies kept in tests/fixtures and a checkout with ../shared also runs the full sets.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.processes import REPO_ROOT

IN_REPO = REPO_ROOT / "tests" / "fixtures"
SHARED = (REPO_ROOT.parent / "shared" / "fixtures").resolve()


def fixture_dir(name: str, *, prefer_shared: bool = False) -> Path:
    """The fixture folder ``name``: the copy in tests/fixtures, or with ``prefer_shared`` the one
    in ../shared/fixtures when it is there."""
    if prefer_shared and (SHARED / name).is_dir():
        return SHARED / name
    return IN_REPO / name


def project_parity_dir() -> Path:
    """The project's own recall-parity fixtures: the full set in ../shared when it is there,
    else the subset kept in tests/fixtures/recall-parity-subset."""
    if (SHARED / "recall-parity").is_dir():
        return SHARED / "recall-parity"
    return IN_REPO / "recall-parity-subset"


def recall_parity_dir() -> Path:
    """The fixture folder the parity tests run: $RECALL_PARITY_DIR, else ``project_parity_dir()``."""
    configured = os.environ.get("RECALL_PARITY_DIR")
    return Path(configured).resolve() if configured else project_parity_dir()
