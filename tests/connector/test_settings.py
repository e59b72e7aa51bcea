"""The connector's settings: environment names, flags winning, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.settings import TOOL_NAMES, ConnectorSettings, SettingsError

STORE = {"CONNECTOR_STORE_URL": "http://127.0.0.1:8787"}


def test_store_url_is_required_and_never_defaulted() -> None:
    with pytest.raises(SettingsError, match="CONNECTOR_STORE_URL"):
        ConnectorSettings.load({})


def test_alias_and_defaults() -> None:
    settings = ConnectorSettings.load({"BRAIN_CLOUD_API_URL": "https://store.example/"})
    assert settings.store_url == "https://store.example"
    assert (settings.host, settings.port) == ("127.0.0.1", 8788)
    assert settings.repull_ttl_ms == 120_000 and settings.idle_purge_ms == 900_000
    assert settings.refresh_grace_ms == 60_000 and settings.refresh_ttl_ms == 30 * 24 * 3600 * 1000
    assert settings.tools == TOOL_NAMES
    assert settings.trust_proxy == ("loopback",)
    assert settings.idp is None and not settings.dev


def test_primary_name_wins_over_alias() -> None:
    env = {"CONNECTOR_STORE_URL": "http://127.0.0.1:1", "BRAIN_CLOUD_API_URL": "http://127.0.0.1:2"}
    assert ConnectorSettings.load(env).store_url == "http://127.0.0.1:1"


def test_flags_win_over_environment(tmp_path: Path) -> None:
    env = {**STORE, "CONNECTOR_HOST": "127.0.0.2", "CONNECTOR_PORT": "9000", "CONNECTOR_STATE_DIR": str(tmp_path)}
    settings = ConnectorSettings.load(env, host="127.0.0.3", port=9001, dev=True)
    assert (settings.host, settings.port, settings.dev) == ("127.0.0.3", 9001, True)
    assert settings.state_dir == tmp_path
    # A flag of None means "not given".
    assert ConnectorSettings.load(env, host=None).host == "127.0.0.2"


@pytest.mark.parametrize("value", ["true", "1", "TRUE", "*", "0.0.0.0/0", "loopback, ::/0"])
def test_trust_proxy_everything_is_refused(value: str) -> None:
    with pytest.raises(SettingsError, match="CONNECTOR_TRUST_PROXY"):
        ConnectorSettings.load({**STORE, "CONNECTOR_TRUST_PROXY": value})


def test_trust_proxy_names_and_cidrs() -> None:
    settings = ConnectorSettings.load({**STORE, "CONNECTOR_TRUST_PROXY": "loopback, uniquelocal,10.0.0.0/8"})
    assert settings.trust_proxy == ("loopback", "uniquelocal", "10.0.0.0/8")
    # The store's words, read by the same parser: `private` is loopback, link-local and unique-local.
    assert ConnectorSettings.load({**STORE, "CONNECTOR_TRUST_PROXY": "private"}).trust_proxy == ("private",)
    assert ConnectorSettings.load({**STORE, "CONNECTOR_TRUST_PROXY": "none"}).trust_proxy == ()
    with pytest.raises(SettingsError):
        ConnectorSettings.load({**STORE, "CONNECTOR_TRUST_PROXY": "somewhere"})


def test_tools_allowlist() -> None:
    settings = ConnectorSettings.load({**STORE, "CONNECTOR_TOOLS": "brain_recall, brain_status"})
    assert settings.tools == ("brain_recall", "brain_status")
    with pytest.raises(SettingsError, match="brain_delete_everything"):
        ConnectorSettings.load({**STORE, "CONNECTOR_TOOLS": "brain_recall,brain_delete_everything"})


def test_recall_mode() -> None:
    assert ConnectorSettings.load(STORE).recall_mode == "hybrid", "hybrid is the default (issue 28)"
    assert ConnectorSettings.load({**STORE, "CONNECTOR_RECALL_MODE": " Exact "}).recall_mode == "exact"
    with pytest.raises(SettingsError, match="CONNECTOR_RECALL_MODE must be exact or hybrid"):
        ConnectorSettings.load({**STORE, "CONNECTOR_RECALL_MODE": "semantic"})


def test_recall_models_e5_and_the_judge() -> None:
    """Both on by default; each turned off alone; a value neither true nor false is refused, named."""
    default = ConnectorSettings.load(STORE)
    assert (default.recall_e5, default.recall_judge) == (True, True)
    off = ConnectorSettings.load({**STORE, "CONNECTOR_RECALL_JUDGE": "false"})
    assert (off.recall_e5, off.recall_judge) == (True, False)
    assert ConnectorSettings.load({**STORE, "CONNECTOR_RECALL_E5": "0"}).recall_e5 is False
    with pytest.raises(SettingsError, match="CONNECTOR_RECALL_JUDGE must be true or false, got 'maybe'"):
        ConnectorSettings.load({**STORE, "CONNECTOR_RECALL_JUDGE": "maybe"})


def test_log_level_is_read_as_the_stores_is() -> None:
    """One rule for CONNECTOR_LOG_LEVEL and STORE_LOG_LEVEL (common/logs.py): any case, and a bad
    value named with the levels allowed."""
    assert ConnectorSettings.load(STORE).log_level == "info"
    assert ConnectorSettings.load({**STORE, "CONNECTOR_LOG_LEVEL": " Warning "}).log_level == "warning"
    with pytest.raises(SettingsError, match=r"^CONNECTOR_LOG_LEVEL: expected debug, info, warning or error, got 'loud'$"):
        ConnectorSettings.load({**STORE, "CONNECTOR_LOG_LEVEL": "loud"})


def test_state_key_and_idp_and_oidc() -> None:
    key = "ab" * 32
    settings = ConnectorSettings.load({**STORE, "CONNECTOR_STATE_KEY": key, "CONNECTOR_IDP": "STATIC"})
    assert settings.state_key == bytes.fromhex(key) and settings.idp == "static"
    with pytest.raises(SettingsError, match="CONNECTOR_STATE_KEY"):
        ConnectorSettings.load({**STORE, "CONNECTOR_STATE_KEY": "abc"})
    with pytest.raises(SettingsError, match="CONNECTOR_IDP"):
        ConnectorSettings.load({**STORE, "CONNECTOR_IDP": "ldap"})
    with pytest.raises(SettingsError, match="OIDC_ISSUER"):
        ConnectorSettings.load({**STORE, "CONNECTOR_IDP": "oidc"})
    oidc = ConnectorSettings.load(
        {
            **STORE,
            "CONNECTOR_IDP": "oidc",
            "OIDC_ISSUER": "https://login.example",
            "OIDC_CLIENT_ID": "abc",
            "OIDC_AUTH_PARAMS": "prompt=select_account&hd=example.com",
            "OIDC_ALLOWED_DOMAINS": "example.com, example.org",
        }
    )
    assert oidc.oidc_auth_params == {"prompt": "select_account", "hd": "example.com"}
    assert oidc.oidc_allowed_domains == ("example.com", "example.org")
    assert oidc.oidc_scopes == "openid email profile offline_access"


def test_bad_numbers_and_urls() -> None:
    with pytest.raises(SettingsError, match="CONNECTOR_REPULL_TTL_MS"):
        ConnectorSettings.load({**STORE, "CONNECTOR_REPULL_TTL_MS": "soon"})
    with pytest.raises(SettingsError, match="CONNECTOR_STORE_URL"):
        ConnectorSettings.load({"CONNECTOR_STORE_URL": "ftp://x"})
    with pytest.raises(SettingsError, match="CONNECTOR_PUBLIC_URL"):
        ConnectorSettings.load({**STORE, "CONNECTOR_PUBLIC_URL": "not a url"})
    assert ConnectorSettings.load({**STORE, "CONNECTOR_REPULL_TTL_MS": "0"}).repull_ttl_s == 0


def test_working_copy_caps() -> None:
    settings = ConnectorSettings.load(STORE)
    assert (settings.max_working_copies, settings.max_working_copies_mb) == (256, 2048)
    capped = ConnectorSettings.load({**STORE, "CONNECTOR_MAX_WORKING_COPIES": "10", "CONNECTOR_MAX_WORKING_COPIES_MB": "0"})
    assert (capped.max_working_copies, capped.max_working_copy_bytes) == (10, 0)
    with pytest.raises(SettingsError, match="CONNECTOR_MAX_WORKING_COPIES"):
        ConnectorSettings.load({**STORE, "CONNECTOR_MAX_WORKING_COPIES": "many"})


def test_brain_size_and_load_limits() -> None:
    settings = ConnectorSettings.load(STORE)
    assert (settings.max_brain_mb, settings.max_concurrent_loads) == (128, 2)
    assert settings.max_brain_bytes == 128 * 1024 * 1024
    chosen = ConnectorSettings.load({**STORE, "CONNECTOR_MAX_BRAIN_MB": "16", "CONNECTOR_MAX_CONCURRENT_LOADS": "4"})
    assert (chosen.max_brain_bytes, chosen.max_concurrent_loads) == (16 * 1024 * 1024, 4)
    for name in ("CONNECTOR_MAX_BRAIN_MB", "CONNECTOR_MAX_CONCURRENT_LOADS"):
        with pytest.raises(SettingsError, match=name):
            ConnectorSettings.load({**STORE, name: "0"})
def test_sign_in_limits() -> None:
    defaults = ConnectorSettings.load(STORE)
    assert defaults.signin_attempts_per_min == 10 and defaults.unused_client_ttl_ms == 86_400_000
    custom = ConnectorSettings.load({**STORE, "CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN": "3",
                                     "CONNECTOR_UNUSED_CLIENT_TTL_MS": "0"})
    assert custom.signin_attempts_per_min == 3 and custom.unused_client_ttl_ms == 0
    for name in ("CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN", "CONNECTOR_UNUSED_CLIENT_TTL_MS"):
        with pytest.raises(SettingsError, match=name):
            ConnectorSettings.load({**STORE, name: "-1"})


def test_workers_bounds_and_state_dir(tmp_path: Path) -> None:
    assert ConnectorSettings.load(STORE).workers == 1
    env = {**STORE, "CONNECTOR_STATE_DIR": str(tmp_path)}
    assert ConnectorSettings.load({**env, "CONNECTOR_WORKERS": "4"}).workers == 4
    assert ConnectorSettings.load({**env, "CONNECTOR_WORKERS": "4"}, workers=2).workers == 2  # the flag wins
    for bad in ("0", "65", "-1", "two"):
        with pytest.raises(SettingsError, match="CONNECTOR_WORKERS"):
            ConnectorSettings.load({**env, "CONNECTOR_WORKERS": bad})
    # the workers share sign-ins, held writes and brain heads through the state directory
    with pytest.raises(SettingsError, match="CONNECTOR_STATE_DIR"):
        ConnectorSettings.load({**STORE, "CONNECTOR_WORKERS": "2"})


KEY = "ab" * 32


def test_state_url_names_a_bucket_and_needs_the_key() -> None:
    env = {**STORE, "CONNECTOR_STATE_URL": "s3://brains/connector/state", "CONNECTOR_STATE_KEY": KEY,
           "CONNECTOR_S3_ENDPOINT_URL": "http://127.0.0.1:8333", "CONNECTOR_S3_REGION": "eu-west-1"}
    settings = ConnectorSettings.load(env)
    assert settings.state_url == "s3://brains/connector/state"
    assert (settings.s3_endpoint_url, settings.s3_region) == ("http://127.0.0.1:8333", "eu-west-1")
    assert settings.state_dir is None
    # The bucket alone is enough for several workers.
    assert ConnectorSettings.load({**env, "CONNECTOR_WORKERS": "2"}).workers == 2
    # The key never lives beside what it seals, so it must be configured.
    with pytest.raises(SettingsError, match="CONNECTOR_STATE_KEY"):
        ConnectorSettings.load({**STORE, "CONNECTOR_STATE_URL": "s3://brains/connector"})
    for bad in ("http://brains/x", "s3://", "s3:///prefix", "s3://b/a/../c", "s3://b/x?y=1", "brains/x", "s3://u@b/x"):
        with pytest.raises(SettingsError, match="CONNECTOR_STATE_URL"):
            ConnectorSettings.load({**STORE, "CONNECTOR_STATE_URL": bad, "CONNECTOR_STATE_KEY": KEY})
    with pytest.raises(SettingsError, match="CONNECTOR_S3_ENDPOINT_URL"):
        ConnectorSettings.load({**env, "CONNECTOR_S3_ENDPOINT_URL": "127.0.0.1:8333"})
    # S3 client settings without a bucket to use them for are a mistake, said at once.
    with pytest.raises(SettingsError, match="CONNECTOR_STATE_URL"):
        ConnectorSettings.load({**STORE, "CONNECTOR_S3_ENDPOINT_URL": "http://127.0.0.1:8333"})


def test_hybrid_index_cache_directory(tmp_path: Path) -> None:
    assert ConnectorSettings.load(STORE).index_cache_path is None  # no state directory: memory only
    in_state = ConnectorSettings.load({**STORE, "CONNECTOR_STATE_DIR": str(tmp_path / "state")})
    assert in_state.index_cache_path == tmp_path / "state" / "index-cache" and in_state.index_cache_mb == 1024
    own = ConnectorSettings.load({**STORE, "CONNECTOR_STATE_DIR": str(tmp_path / "state"),
                                  "CONNECTOR_INDEX_CACHE_DIR": str(tmp_path / "local"), "CONNECTOR_INDEX_CACHE_MB": "64"})
    assert own.index_cache_path == tmp_path / "local" and own.index_cache_mb == 64
    off = ConnectorSettings.load({**STORE, "CONNECTOR_STATE_DIR": str(tmp_path / "state"), "CONNECTOR_INDEX_CACHE_MB": "0"})
    assert off.index_cache_path is None
    with pytest.raises(SettingsError, match="CONNECTOR_INDEX_CACHE_MB"):
        ConnectorSettings.load({**STORE, "CONNECTOR_INDEX_CACHE_MB": "lots"})
