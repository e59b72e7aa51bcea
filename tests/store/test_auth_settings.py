"""Tokens, the users registry, the authenticator, settings and conditional headers (no server)."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from store.auth.authenticate import Authenticator, bearer_token
from store.auth.tokens import hash_token, is_static_token, new_token
from store.auth.users import UserRegistry, UsersFileError
from store.conditional import Preconditions, parse_tag_list
from store.errors import ServiceError
from common.limits import TokenBucketLimiter
from store.settings import MIB, SettingsError, StoreSettings


def test_token_shape_and_hash() -> None:
    token = new_token()
    assert re.fullmatch(r"bst_[A-Za-z0-9_-]{43}", token) and is_static_token(token)
    assert hash_token(token) == hash_token(token) and len(hash_token(token)) == 64
    assert new_token() != token


def test_registry_add_rotate_remove_and_file_mode(tmp_path: Path) -> None:
    reg = UserRegistry(tmp_path)
    user, token = reg.add("alice", "a@example.com")
    assert oct((tmp_path / "users.json").stat().st_mode & 0o777) == "0o600"
    assert token not in (tmp_path / "users.json").read_text()  # only the hash is stored
    assert hash_token(token) in (tmp_path / "users.json").read_text()
    assert reg.by_token(token) == user
    with pytest.raises(UsersFileError):
        reg.add("alice")
    with pytest.raises(UsersFileError):
        reg.add("../evil")
    _, new = reg.rotate("alice")
    assert reg.by_token(token) is None and reg.by_token(new) is not None
    reg.remove(user.id)
    assert reg.by_token(new) is None and reg.users() == []


def test_registry_reloads_changes_from_another_process(tmp_path: Path) -> None:
    server_view = UserRegistry(tmp_path)
    cli_view = UserRegistry(tmp_path)
    _, token = cli_view.add("bob")
    assert server_view.by_token(token) is not None
    cli_view.remove("bob")
    assert server_view.by_token(token) is None


def test_corrupt_users_file_keeps_last_good_copy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reg = UserRegistry(tmp_path)
    _, token = reg.add("carol")
    assert reg.by_token(token) is not None
    (tmp_path / "users.json").write_text("{ not json")
    with caplog.at_level("CRITICAL"):
        assert reg.by_token(token) is not None
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    with pytest.raises(UsersFileError):
        UserRegistry(tmp_path).add("dave")  # never overwrite a corrupt file blindly
    # a process starting on a corrupt file serves the last good copy written (never an empty
    # file: issue 24), and without one serves nobody, no crash
    assert UserRegistry(tmp_path).by_token(token) is not None
    (tmp_path / "users.json.last-good").unlink()
    assert UserRegistry(tmp_path).by_token(token) is None


def test_oidc_users_and_deny_records(tmp_path: Path) -> None:
    reg = UserRegistry(tmp_path)
    user = reg.add_oidc("oidc_abcdef0123456789abcdef01", "https://issuer", "sub-1", "e@x.org", "e")
    assert user is not None and reg.by_oidc("https://issuer", "sub-1") == user
    assert reg.add_oidc(user.id, "https://issuer", "sub-1", "e@x.org", "e") == user
    reg.remove(user.name)
    assert reg.is_denied("https://issuer", "sub-1")
    assert reg.add_oidc(user.id, "https://issuer", "sub-1", "e@x.org", "e") is None


def test_bearer_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer abc") == "abc"
    for bad in (None, "", "Bearer", "Bearer ", "Basic abc", "Bearer a b", "Bearer " + "x" * 20000):
        assert bearer_token(bad) is None


async def _status(auth: Authenticator, header: str | None, address: str) -> int:
    try:
        await auth.authenticate(header, address)
        return 200
    except ServiceError as exc:
        return exc.status


def test_authenticator_blocks_address_after_failed_logins(tmp_path: Path) -> None:
    reg = UserRegistry(tmp_path)
    _, token = reg.add("erin")
    clock = [1000.0]
    failed = TokenBucketLimiter(3, 3, clock=lambda: clock[0])
    auth = Authenticator(reg, failed_logins=failed)

    async def attempt(header: str | None, address: str = "10.0.0.1") -> int:
        return await _status(auth, header, address)

    async def scenario() -> list[int]:
        out = [await attempt("Bearer bst_" + "A" * 43) for _ in range(5)]
        out.append(await attempt(f"Bearer {token}"))  # blocked before any credential work
        out.append(await attempt(f"Bearer {token}", "10.0.0.2"))  # other addresses unaffected
        clock[0] += 120
        out.append(await attempt(f"Bearer {token}"))
        return out

    assert asyncio.run(scenario()) == [401, 401, 401, 429, 429, 429, 200, 200]


def test_failed_logins_from_one_ipv6_slash_64_block_all_of_it(tmp_path: Path) -> None:
    reg = UserRegistry(tmp_path)
    _, token = reg.add("erin")
    auth = Authenticator(reg, failed_logins=TokenBucketLimiter(3, 3))

    async def scenario() -> list[int]:
        wrong = "Bearer bst_" + "A" * 43
        out = [await _status(auth, wrong, f"2001:db8:5:5::{n}") for n in range(1, 5)]
        out.append(await _status(auth, f"Bearer {token}", "2001:db8:5:5:ffff::1"))  # same /64: blocked
        out.append(await _status(auth, f"Bearer {token}", "2001:db8:5:6::1"))  # the next /64: fine
        return out

    assert asyncio.run(scenario()) == [401, 401, 401, 429, 429, 200]


def test_settings_from_env_and_overrides(tmp_path: Path) -> None:
    s = StoreSettings.from_env({})
    assert (s.port, s.max_upload_bytes, s.max_user_bytes, s.max_brains, s.snapshots) == (8787, 50 * MIB, 0, 10, 5)
    assert s.host == "127.0.0.1" and s.rate_limits and not s.encryption
    env = {
        "STORE_DATA_DIR": str(tmp_path),
        "STORE_PORT": "9000",
        "STORE_ENCRYPTION_KEY": "ab" * 32,
        "STORE_MAX_UPLOAD_MB": "2",
        "STORE_RATE_LIMITS": "off",
        "STORE_TRUST_PROXY": "loopback, 10.0.0.0/8",
        "STORE_SNAPSHOTS": "9",
    }
    s = StoreSettings.from_env(env, port=9100)
    assert s.port == 9100 and s.data_dir == tmp_path and s.encryption_key == bytes([0xAB]) * 32
    assert s.max_upload_bytes == 2 * MIB and not s.rate_limits and s.snapshots == 9
    assert StoreSettings.from_env(s.to_env()) == s
    assert (s.inspect_limits.max_ratio, StoreSettings.from_env({"STORE_INSPECT_MAX_RATIO": "0"}).inspect_limits.max_ratio) == (200, 0)
    import base64

    b64 = base64.b64encode(bytes(32)).decode()
    assert StoreSettings.from_env({"STORE_ENCRYPTION_KEY": b64}).encryption_key == bytes(32)
    for bad in (
        {"STORE_PORT": "http"},
        {"STORE_PORT": "70000"},
        {"STORE_ENCRYPTION_KEY": "short"},
        {"STORE_RATE_LIMITS": "maybe"},
        {"STORE_TRUST_PROXY": "not-an-ip"},
        {"STORE_OIDC_ISSUER": "https://x"},
        {"STORE_INSPECT_MAX_RATIO": "-1"},
        {"STORE_S3_ENDPOINT_URL": "127.0.0.1:8333"},  # boto3 raised ValueError: a traceback
    ):
        with pytest.raises(SettingsError) as info:
            StoreSettings.from_env(bad)
        assert next(iter(bad)) in str(info.value) or "STORE_OIDC" in str(info.value)


def test_conditional_headers() -> None:
    c = "a" * 64
    assert Preconditions.from_headers(f'"{c}"', None).holds(c)
    assert not Preconditions.from_headers(f'W/"{c}"', None).holds(c)
    assert Preconditions.from_headers(f'"x", "{c}"', None).holds(c)
    assert not Preconditions.from_headers("*", None).holds(None)
    assert Preconditions.from_headers("*", None).holds(c)
    assert Preconditions.from_headers(None, "*").holds(None)
    assert not Preconditions.from_headers(None, "*").holds(c)
    assert not Preconditions.from_headers("garbage", None).holds(c)
    tags = parse_tag_list(f'W/"{c}"')
    assert tags is not None and tags.weak_match(c) and not tags.strong_match(c)


def test_env_is_read_only_in_settings() -> None:
    # every STORE_* name is read in store/settings.py and nowhere else in store/
    root = Path(__file__).resolve().parents[2] / "store"
    offenders = [
        p for p in root.rglob("*.py")
        if p.name != "settings.py" and "os.environ" in p.read_text() and p.name != "app.py"
    ]
    assert offenders == [], offenders
    assert os.environ is not None
