"""The permission table and the sharing file: roles, key scopes, creator protection, hashing."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from store.auth.permissions import KEY_SCOPES, PERMISSIONS, ROLES, effective_role, permitted
from store.sharing.registry import SharingError, SharingRegistry, expiry

# Dates inside: tests/test_clock_ahead.py runs this module again with the clock a year ahead.
pytestmark = pytest.mark.clock

BRAIN = "6f1c0c2e-0000-4000-8000-000000000001"


def test_roles_and_scopes() -> None:
    allowed = {(a, r) for a in PERMISSIONS for r in ("owner", "editor", "viewer") if permitted(a, r)}
    assert {a for a, r in allowed if r == "viewer"} == {"list", "download", "snapshots", "members"}
    assert {a for a, r in allowed if r == "editor"} == {"list", "download", "snapshots", "members", "upload"}
    assert {a for a, r in allowed if r == "owner"} == set(PERMISSIONS)
    # a key narrows the role, never widens it
    assert permitted("upload", "owner", "write") and not permitted("upload", "owner", "read")
    assert not permitted("upload", "viewer", "write")
    assert not any(permitted(a, "owner", s) for s in KEY_SCOPES for a in ("restore", "delete", "manage"))
    assert not permitted("download", None) and not permitted("nonsense", "owner")
    assert not permitted("download", "admin") and not permitted("download", "owner", "all")


def test_effective_role_is_the_role_capped_by_the_scope() -> None:
    assert [effective_role(r) for r in ROLES] == list(ROLES)
    assert [effective_role(r, "read") for r in ROLES] == ["viewer", "viewer", "viewer"]
    assert [effective_role(r, "write") for r in ROLES] == ["viewer", "editor", "editor"]
    assert effective_role(None, "write") is None and effective_role("owner", "all") is None
    # what the effective role allows is exactly what the key may do
    for role in ROLES:
        for scope in KEY_SCOPES:
            capped = effective_role(role, scope)
            assert {a for a in KEY_SCOPES[scope] if permitted(a, role, scope)} == {
                a for a in KEY_SCOPES[scope] if permitted(a, capped)}


def test_members_and_the_creator(tmp_path: Path) -> None:
    reg = SharingRegistry(tmp_path, fsync=False)
    reg.set_member(BRAIN, "creator1", "bob", "viewer")
    reg.set_member(BRAIN, "creator1", "bob", "editor")
    assert reg.share(BRAIN).members == {"bob": "editor"}  # type: ignore[union-attr]
    with pytest.raises(SharingError):
        reg.set_member(BRAIN, "creator1", "creator1", "viewer")
    with pytest.raises(SharingError):
        reg.set_member(BRAIN, "creator1", "carol", "admin")
    with pytest.raises(SharingError):
        reg.remove_member(BRAIN, "creator1")
    assert reg.remove_member(BRAIN, "bob") == "editor"
    assert reg.share(BRAIN) is None  # the last member gone: not shared any more
    assert stat.S_IMODE((tmp_path / "sharing.json").stat().st_mode) == 0o600


def test_keys_are_hashed_expire_and_revoke(tmp_path: Path) -> None:
    reg = SharingRegistry(tmp_path, fsync=False)
    key, token = reg.create_key("bob", [BRAIN, BRAIN], "read", label="ci")
    assert key.brains == (BRAIN,) and token.startswith("bsk_") and len(token) == 47
    assert token not in (tmp_path / "sharing.json").read_text()
    other = SharingRegistry(tmp_path, fsync=False)  # another worker sees it
    altered = token[:-1] + ("B" if token.endswith("A") else "A")
    assert other.by_key(token) == key and other.by_key(altered) is None
    _, old = reg.create_key("bob", [BRAIN], "write", expires_at="2020-01-01T00:00:00.000000Z")
    assert other.by_key(old) is None
    with pytest.raises(SharingError):
        reg.revoke_key(key.prefix, "someone-else")
    reg.revoke_key(key.prefix, "bob")
    assert other.by_key(token) is None
    with pytest.raises(SharingError):
        reg.create_key("bob", [BRAIN], "admin")
    with pytest.raises(SharingError):
        reg.create_key("bob", [], "read")
    with pytest.raises(SharingError):
        reg.create_key("bob", [BRAIN], "read", label="bad\nlabel")


def test_corrupt_file_keeps_last_good_copy(tmp_path: Path) -> None:
    reg = SharingRegistry(tmp_path, fsync=False)
    reg.set_member(BRAIN, "creator1", "bob", "viewer")
    (tmp_path / "sharing.json").write_text("{not json")
    assert reg.share(BRAIN) is not None  # still serving
    with pytest.raises(SharingError):
        reg.set_member(BRAIN, "creator1", "carol", "viewer")  # never writes over it


def test_expiry() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert expiry("30d", now) == "2026-01-31T00:00:00.000000Z"
    assert expiry("12h", now) == "2026-01-01T12:00:00.000000Z"
    for bad in ("", "30", "d", "-1d", "0m", "5y", "99999d"):
        with pytest.raises(SharingError):
            expiry(bad, now)
