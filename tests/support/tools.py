"""Third-party programs some tests drive (Chromium, axe-core, Caddy, node, weed).

Where one is missing a test skips, saying what to install; under ``CI=true`` it fails
instead: CI installs every tool (``.ci/run``), so a missing one means the suite did not
really run, which a skip would hide.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    """True on CI (``CI=true``, as CI services and ``.ci/run`` set it)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def missing_tool(reason: str) -> NoReturn:
    """Skip the running test for a missing tool, or fail it under ``CI=true``."""
    if under_ci():
        pytest.fail(f"{reason} (CI=true: a missing tool fails the test instead of skipping it)", pytrace=False)
    pytest.skip(reason)


def needs_tool(available: bool, reason: str) -> pytest.MarkDecorator:
    """A mark for a test (or ``pytestmark``) that needs a tool; ``tests/conftest.py`` acts on it."""
    return pytest.mark.needs_tool(available, reason=reason)
