"""A test needing a third-party program skips without it, but fails under CI=true (where
`.ci/run` installs every one): a skip there would hide that a part of the suite never ran."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.tools import missing_tool

TESTS = Path(__file__).resolve().parent


def test_a_missing_tool_skips_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="caddy"):
        missing_tool("the caddy binary is not installed")


def test_a_missing_tool_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="axe-core is not installed.*CI=true"):
        missing_tool("axe-core is not installed")


def test_every_tool_skip_goes_through_the_helper() -> None:
    """Chromium, axe-core, Caddy, node and weed: no bare skip for them anywhere in the suite."""
    tool = re.compile(r"(?i)(chromium|axe|caddy|node|weed)")
    bare = []
    for path in TESTS.rglob("*.py"):
        if "node_modules" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if ("pytest.skip(" in line or "mark.skipif(" in line) and tool.search(line):
                bare.append(f"{path.relative_to(TESTS)}:{number}: {line.strip()}")
    assert bare == []
