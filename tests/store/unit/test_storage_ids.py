"""Ids and checksums that become path components or object keys (store.storage.base)."""

from __future__ import annotations

import pytest

from store.storage.base import StorageError, check_checksum, check_id

GOOD_ID = "c1285959-d322-4024-9a2b-ff6f18415439"
GOOD_SUM = "ab" * 32


def test_our_formats_pass_unchanged() -> None:
    assert check_id(GOOD_ID) == GOOD_ID
    assert check_id("user_0001") == "user_0001"
    assert check_checksum(GOOD_SUM) == GOOD_SUM


@pytest.mark.parametrize(
    "value",
    ["", "short", "../../etc", "a" * 65, "-leading-dash", "has/slash-0000", "has space 0000", GOOD_ID + "\n", "ids\x00null00"],
)
def test_bad_ids_are_refused(value: str) -> None:
    with pytest.raises(StorageError):
        check_id(value)


@pytest.mark.parametrize("value", ["", "AB" * 32, "ab" * 31, "ab" * 33, GOOD_SUM + "\n", "zz" * 32])
def test_bad_checksums_are_refused(value: str) -> None:
    with pytest.raises(StorageError):
        check_checksum(value)
