"""Recall parity with the reference `brain recall` over $RECALL_PARITY_DIR.

Each line of ``cases.jsonl`` is one test: same ids in the same order, same keys
in the same order, every number equal. Works for any fixture folder of the same
shape (``brains/<name>/`` + ``cases.jsonl``).
"""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from typing import Any

import pytest

from connector.engine.format.archive import load_directory
from connector.engine.format.brain import Brain
from connector.engine.recall.exact import recall
from connector.engine.recall.index import BrainIndex
from tests.engine.conftest import parity_dir

CASES_FILE = parity_dir() / "cases.jsonl"


def _cases() -> list[Any]:
    if not CASES_FILE.is_file():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no fixtures at {CASES_FILE}"), id="no-fixtures")]
    params = []
    for number, line in enumerate(CASES_FILE.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        case = json.loads(line)
        args = case["args"]
        label = args.get("query") if not args.get("context") else "context"
        slug = re.sub(r"[^A-Za-z0-9]+", "-", str(label)).strip("-")[:40] or "empty"
        params.append(pytest.param(case, id=f"{number:03d}-{case['brain']}-{slug}"))
    return params


@functools.lru_cache(maxsize=None)
def _brain(name: str) -> Brain:
    return load_directory(parity_dir() / "brains" / name)


@functools.lru_cache(maxsize=None)
def _index(name: str) -> BrainIndex:
    # Built once per brain, as the connector does per archive checksum.
    return BrainIndex.build(_brain(name))


def same_json(actual: Any, expected: Any) -> bool:
    """Equal JSON values, numbers compared numerically (1 == 1.0), key order included."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return actual is expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        return float(actual) == float(expected)
    if isinstance(expected, dict) and isinstance(actual, dict):
        return list(actual) == list(expected) and all(same_json(actual[key], expected[key]) for key in expected)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(same_json(a, e) for a, e in zip(actual, expected, strict=True))
    return bool(type(actual) is type(expected) and actual == expected)


def run_case(brain: Brain, case: dict[str, Any], index: BrainIndex | None = None) -> list[dict[str, Any]]:
    """Our recall for one fixture case (with a prepared index when given)."""
    args = case["args"]
    return recall(
        brain,
        args.get("query"),
        top=args.get("top", 10),
        project=args.get("project"),
        task=args.get("task"),
        topics=args.get("topics"),
        context=bool(args.get("context", False)),
        now=datetime.fromisoformat(case["now"].replace("Z", "+00:00")),
        index=index,
    )


@pytest.mark.parametrize("case", _cases())
def test_recall_matches_reference(case: dict[str, Any]) -> None:
    brain = _brain(case["brain"])
    before = dict(brain.files)
    got = run_case(brain, case, _index(case["brain"]))
    expected = case["expected"]
    assert [hit["id"] for hit in got] == [hit["id"] for hit in expected]
    for ours, theirs in zip(got, expected, strict=True):
        assert same_json(ours, theirs), f"{ours} != {theirs}"
    assert brain.files == before, "recall must not change the brain"
