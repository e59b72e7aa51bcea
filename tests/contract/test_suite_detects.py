"""The conformance suite is not vacuous: a correct fake store passes, each planted fault is caught."""

from __future__ import annotations

import pytest

from contract.conformance import SuiteConfig, run_suite
from tests.contract.fake_store import FakeStore

TOKENS = {"tok-one": "user-1", "tok-two": "user-2"}


def _run(fault: str | None, only: tuple[str, ...] = ()) -> dict[str, str]:
    store = FakeStore(dict(TOKENS), fault)
    config = SuiteConfig(url="http://fake.store", token="tok-one", token2="tok-two", only=only, extensions=False)
    return {r.id: r.status for r in run_suite(config, transport=store.transport())}


def test_a_correct_store_passes_the_core_checks() -> None:
    statuses = _run(None)
    assert {k: v for k, v in statuses.items() if v != "pass"} == {}


@pytest.mark.parametrize(
    ("fault", "caught_by"),
    [
        ("foreign-403", "iso.foreign_brain"),
        ("ignore-if-match", "cond.if_match_stale"),
        ("ignore-if-match", "cond.race"),
        ("no-challenge", "auth.missing"),
        ("serve-traversal", "versions.traversal"),
        ("no-empty-guard", "guard.empty_push"),
        ("accept-junk", "junk.not_gzip"),
        ("listing-oldest-last", "brains.list_order"),
    ],
)
def test_each_planted_fault_is_caught(fault: str, caught_by: str) -> None:
    assert _run(fault, only=(caught_by,)) == {caught_by: "fail"}
