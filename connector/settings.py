"""The connector's settings: one typed object, built in one place.

Command-line flags win over the environment. No other connector module reads
``os.environ``: everything they need is a field here, passed down from
``cli/connector/serve.py`` (or from a test).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from common.connection_guard import HttpLimits
from common.host_guard import host_name
from common.limits.address import TrustedProxies
from common.logs import parse_log_level
from connector.engine.recall.hybrid import MODES as RECALL_MODES
from connector.public_path import path_problem, public_path

# The connector's tools (the brain_* tools, and ChatGPT's search and fetch over the same recall
# and reads); CONNECTOR_TOOLS may name a subset.
TOOL_NAMES: tuple[str, ...] = (
    "brain_recall",
    "brain_status",
    "brain_read",
    "brain_use",
    "brain_memorize",
    "brain_pin",
    "brain_unpin",
    "brain_forget",
    "brain_verify",
    "search",
    "fetch",
    "brain_reflect",
    "brain_extract",
    "brain_mental_model",
)
IDENTITY_PROVIDERS = ("static", "oidc")
MAX_WORKERS = 64  # as for the store: more processes than that would only compete for the cores
DEFAULT_OIDC_SCOPES = "openid email profile offline_access"


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names it."""


@dataclass(frozen=True)
class ConnectorSettings:
    """Everything configurable about one connector process."""

    store_url: str
    host: str = "127.0.0.1"
    port: int = 8788
    # Worker processes serving together (`serve --workers N`); they share CONNECTOR_STATE_DIR.
    workers: int = 1
    # With several workers, each user's /mcp requests go to one of them (connector/affinity.py).
    worker_affinity: bool = True
    idp: str | None = None
    dev: bool = False
    dev_store_token: str | None = None
    state_dir: Path | None = None
    # CONNECTOR_STATE_URL: "s3://bucket/prefix" keeps the shared state in a bucket instead of
    # state_dir (connector/state); the S3 client settings are the store's (credentials from AWS_*).
    state_url: str | None = None
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    state_key: bytes | None = None
    public_url: str | None = None
    # Host names answered besides the public URL's and the loopback names (DNS rebinding,
    # common/host_guard.py); with neither set and no --dev, any Host is answered.
    allowed_hosts: tuple[str, ...] = ()
    trust_proxy: tuple[str, ...] = ("loopback",)
    repull_ttl_ms: int = 120_000
    idle_purge_ms: int = 900_000
    # Caps on working copies held in memory (0 = no cap); least recently used clean copies go first.
    max_working_copies: int = 256
    max_working_copies_mb: int = 2048
    # What one brain may unpack to (its files are all held in memory), and loads at once.
    max_brain_mb: int = 128
    max_concurrent_loads: int = 2
    refresh_ttl_ms: int = 30 * 24 * 3600 * 1000
    refresh_grace_ms: int = 60_000
    # Tokens checked on the sign-in page per client address (IPv6: per /64) and minute; 0 = no limit.
    signin_attempts_per_min: int = 10
    # A registered client never used for a sign-in is forgotten after this long; 0 = never.
    unused_client_ttl_ms: int = 24 * 3600 * 1000
    tools: tuple[str, ...] = TOOL_NAMES
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    oidc_scopes: str = DEFAULT_OIDC_SCOPES
    oidc_auth_params: Mapping[str, str] = field(default_factory=dict)
    oidc_allowed_domains: tuple[str, ...] = ()
    oidc_allowed_emails: tuple[str, ...] = ()
    mcp_rate_per_min: int = 300  # POST /mcp per client address and minute; 0 = no limit (benchmarks)
    store_timeout_s: float = 15.0
    log_level: str = "info"
    metrics: bool = True  # GET /metrics (Prometheus); labels never carry ids or tokens
    metrics_token: str | None = None  # when set, /metrics needs "Authorization: Bearer <token>"
    # Where the workers of `serve --workers N` leave their metric totals for /metrics to add up
    # (serve sets a private temporary directory; None: this process's own series only).
    metrics_dir: Path | None = None
    # This replica's own cache of hybrid indexes (connector/workcopy/indexdisk.py), so that a
    # restart need not rebuild them: CONNECTOR_INDEX_CACHE_DIR; None: ``index-cache`` in the
    # state directory, or none without one. A cache, never shared state; sealed with the state key.
    index_cache_dir: Path | None = None
    index_cache_mb: int = 1024  # what that cache may hold; the least recently used go first; 0 = off
    # Where the workers of `serve --workers N` keep the sign-in attempt buckets they share
    # (CONNECTOR_LIMITS_DIR: serve sets a private temporary directory; None: this process's memory).
    limits_dir: Path | None = None
    # What one client connection may hold (common/connection_guard.py); 0 turns a bound off.
    http_max_header_kb: int = 64  # request line and headers; beyond: 431
    http_header_timeout_s: int = 10  # a request's head must be in within this; else 408
    http_body_timeout_s: int = 30  # longest pause in a body (or in reading a response)
    http_body_min_bytes_per_s: int = 1024  # average body rate required after the first pause allowance
    http_max_connections: int = 512  # open connections; beyond: 503
    webapp: bool = True  # the web app at /app (docs/webapp.md)
    webapp_session_ttl_ms: int = 8 * 3600 * 1000  # a web sign-in ends after this, whatever happens
    recall_mode: str = "hybrid"  # brain_recall's and the web search's mode when none is named (exact or hybrid)
    recall_e5: bool = True  # hybrid recall's second model (e5), its vectors computed in the background
    recall_judge: bool = True  # the judge (a third model): a channel of English queries, read by the answer gate
    # The operator's model for brain_reflect and brain_extract (docs/thinking.md): an OpenAI-compatible
    # chat-completions endpoint; none set means "no model" (the tools hand the evidence to the host).
    model_url: str | None = None
    model: str | None = None
    model_api_key: str | None = field(default=None, repr=False)
    model_local_only: bool = False  # refuse endpoints outside loopback and private addresses
    model_timeout_s: int = 60  # one model call, whole
    model_max_tokens: int = 4096  # output tokens of one answer (reflect asks 1024 at most, extract 4096)
    # Model calls one connector process runs at once, in all and per user; one more is answered "busy".
    model_max_calls: int = 4
    model_max_calls_per_user: int = 1

    @property
    def http_limits(self) -> HttpLimits:
        """What one client connection may hold (header size, timeouts, open connections)."""
        return HttpLimits.from_settings(self)

    @property
    def checks_host(self) -> bool:
        """Whether requests for other host names are refused (421): in --dev always, else once
        the connector knows its names (CONNECTOR_PUBLIC_URL or CONNECTOR_ALLOWED_HOSTS)."""
        return self.dev or bool(self.public_url) or bool(self.allowed_hosts)

    @property
    def public_path(self) -> str:
        """The path of CONNECTOR_PUBLIC_URL (``/brain`` for ``https://host/brain``), "" at a domain's root."""
        return public_path(self.public_url)

    @property
    def repull_ttl_s(self) -> float:
        """Freshness interval in seconds (0 means never re-check)."""
        return self.repull_ttl_ms / 1000.0

    @property
    def max_working_copy_bytes(self) -> int:
        """The working copies' byte budget (0 means none)."""
        return self.max_working_copies_mb * 1024 * 1024

    @property
    def max_brain_bytes(self) -> int:
        """What one brain may unpack to, in bytes."""
        return self.max_brain_mb * 1024 * 1024

    @property
    def index_cache_path(self) -> Path | None:
        """Where hybrid indexes are cached on this replica's disk, or None (cache off)."""
        if self.index_cache_mb <= 0:
            return None
        if self.index_cache_dir is not None:
            return self.index_cache_dir
        return self.state_dir / "index-cache" if self.state_dir is not None else None

    @property
    def idle_purge_s(self) -> float:
        """Idle time after which a working copy is dropped, in seconds."""
        return self.idle_purge_ms / 1000.0

    def with_overrides(self, **changes: Any) -> ConnectorSettings:
        """A copy with some fields replaced (None values are ignored), re-validated."""
        kept = {key: value for key, value in changes.items() if value is not None}
        return _validated(replace(self, **kept))

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, **flags: Any) -> ConnectorSettings:
        """Settings from ``env`` (default: the process environment) with ``flags`` winning.

        ``flags`` use the field names (``host``, ``port``, ``dev``, ...); a flag of
        None means "not given". Raises SettingsError for anything missing or invalid.
        """
        source = os.environ if env is None else env
        values = _from_env(source)
        values.update({key: value for key, value in flags.items() if value is not None})
        if not values.get("store_url"):
            raise SettingsError(
                "CONNECTOR_STORE_URL (or BRAIN_CLOUD_API_URL) is required: the connector never "
                "sends a credential to a default host"
            )
        unknown = set(values) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
        return _validated(cls(**values))


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = _env(env, name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, got {value!r}") from None
    if number < 0:
        raise SettingsError(f"{name} must not be negative")
    return number


def _csv(value: str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _path(env: Mapping[str, str], name: str) -> Path | None:
    value = _env(env, name)
    return Path(value).expanduser() if value else None


def _bool(env: Mapping[str, str], name: str) -> bool | None:
    value = _env(env, name)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{name} must be true or false, got {value!r}")


def parse_auth_params(text: str) -> dict[str, str]:
    """Extra authorization parameters: a JSON object or ``a=b&c=d``."""
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise SettingsError("OIDC_AUTH_PARAMS is not valid JSON") from None
        if not isinstance(data, dict):
            raise SettingsError("OIDC_AUTH_PARAMS must be a JSON object")
        return {str(key): str(value) for key, value in data.items()}
    return dict(parse_qsl(text, keep_blank_values=True))


def _check_state_url(settings: ConnectorSettings) -> None:
    """CONNECTOR_STATE_URL names a bucket (and the key that seals what goes there); the S3
    client settings make sense only with it."""
    if settings.state_url is None:
        if settings.s3_endpoint_url is not None or settings.s3_region is not None:
            raise SettingsError("CONNECTOR_S3_ENDPOINT_URL and CONNECTOR_S3_REGION need CONNECTOR_STATE_URL (s3://bucket/prefix)")
        return
    parts = urlsplit(settings.state_url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment or "@" in parts.netloc:
        raise SettingsError(f"CONNECTOR_STATE_URL must look like s3://bucket/prefix, got {settings.state_url!r}")
    prefix = parts.path.strip("/")
    if prefix and any(segment in ("", ".", "..") for segment in prefix.split("/")):
        raise SettingsError("CONNECTOR_STATE_URL's prefix must be /-separated names (no empty, . or .. parts)")
    if settings.state_key is None:
        # The key is never kept beside what it seals: whoever reads the bucket must not open it.
        raise SettingsError("CONNECTOR_STATE_URL needs CONNECTOR_STATE_KEY (64 hex characters, the same at every replica)")
    if settings.s3_endpoint_url is not None:
        _check_url("CONNECTOR_S3_ENDPOINT_URL", settings.s3_endpoint_url)


def parse_state_key(text: str) -> bytes:
    """CONNECTOR_STATE_KEY: 32 bytes written as 64 hex characters."""
    cleaned = text.strip()
    try:
        key = bytes.fromhex(cleaned)
    except ValueError:
        raise SettingsError("CONNECTOR_STATE_KEY must be 64 hex characters") from None
    if len(key) != 32:
        raise SettingsError("CONNECTOR_STATE_KEY must be 64 hex characters (32 bytes)")
    return key


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        if value is not None:
            values[key] = value

    put("host", _env(env, "CONNECTOR_HOST"))
    put("port", _int(env, "CONNECTOR_PORT"))
    put("workers", _int(env, "CONNECTOR_WORKERS"))
    put("worker_affinity", _bool(env, "CONNECTOR_WORKER_AFFINITY"))
    put("store_url", _env(env, "CONNECTOR_STORE_URL") or _env(env, "BRAIN_CLOUD_API_URL"))
    idp = _env(env, "CONNECTOR_IDP")
    put("idp", idp.lower() if idp else None)
    put("dev", _bool(env, "CONNECTOR_DEV"))
    put("dev_store_token", _env(env, "CONNECTOR_DEV_STORE_TOKEN"))
    put("state_dir", _path(env, "CONNECTOR_STATE_DIR"))
    put("state_url", _env(env, "CONNECTOR_STATE_URL"))
    put("s3_endpoint_url", _env(env, "CONNECTOR_S3_ENDPOINT_URL"))
    put("s3_region", _env(env, "CONNECTOR_S3_REGION"))
    state_key = _env(env, "CONNECTOR_STATE_KEY")
    put("state_key", parse_state_key(state_key) if state_key else None)
    put("public_url", _env(env, "CONNECTOR_PUBLIC_URL"))
    put("allowed_hosts", _csv(_env(env, "CONNECTOR_ALLOWED_HOSTS")))
    put("trust_proxy", _csv(_env(env, "CONNECTOR_TRUST_PROXY")))
    put("repull_ttl_ms", _int(env, "CONNECTOR_REPULL_TTL_MS"))
    put("idle_purge_ms", _int(env, "CONNECTOR_IDLE_PURGE_MS"))
    put("max_working_copies", _int(env, "CONNECTOR_MAX_WORKING_COPIES"))
    put("max_working_copies_mb", _int(env, "CONNECTOR_MAX_WORKING_COPIES_MB"))
    put("max_brain_mb", _int(env, "CONNECTOR_MAX_BRAIN_MB"))
    put("max_concurrent_loads", _int(env, "CONNECTOR_MAX_CONCURRENT_LOADS"))
    put("refresh_ttl_ms", _int(env, "CONNECTOR_REFRESH_TTL_MS"))
    put("refresh_grace_ms", _int(env, "CONNECTOR_REFRESH_GRACE_MS"))
    put("signin_attempts_per_min", _int(env, "CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN"))
    put("unused_client_ttl_ms", _int(env, "CONNECTOR_UNUSED_CLIENT_TTL_MS"))
    put("tools", _csv(_env(env, "CONNECTOR_TOOLS")))
    put("oidc_issuer", _env(env, "OIDC_ISSUER"))
    put("oidc_client_id", _env(env, "OIDC_CLIENT_ID"))
    put("oidc_client_secret", _env(env, "OIDC_CLIENT_SECRET"))
    put("oidc_scopes", _env(env, "OIDC_SCOPES"))
    auth_params = _env(env, "OIDC_AUTH_PARAMS")
    put("oidc_auth_params", parse_auth_params(auth_params) if auth_params else None)
    put("oidc_allowed_domains", _csv(_env(env, "OIDC_ALLOWED_DOMAINS")))
    put("oidc_allowed_emails", _csv(_env(env, "OIDC_ALLOWED_EMAILS")))
    put("mcp_rate_per_min", _int(env, "CONNECTOR_MCP_RATE_PER_MIN"))
    put("log_level", _env(env, "CONNECTOR_LOG_LEVEL"))
    put("metrics", _bool(env, "CONNECTOR_METRICS"))
    put("metrics_token", _env(env, "CONNECTOR_METRICS_TOKEN"))
    put("metrics_dir", _path(env, "CONNECTOR_METRICS_DIR"))
    put("limits_dir", _path(env, "CONNECTOR_LIMITS_DIR"))
    put("index_cache_dir", _path(env, "CONNECTOR_INDEX_CACHE_DIR"))
    put("index_cache_mb", _int(env, "CONNECTOR_INDEX_CACHE_MB"))
    put("http_max_header_kb", _int(env, "CONNECTOR_HTTP_MAX_HEADER_KB"))
    put("http_header_timeout_s", _int(env, "CONNECTOR_HTTP_HEADER_TIMEOUT_S"))
    put("http_body_timeout_s", _int(env, "CONNECTOR_HTTP_BODY_TIMEOUT_S"))
    put("http_body_min_bytes_per_s", _int(env, "CONNECTOR_HTTP_BODY_MIN_BYTES_PER_S"))
    put("http_max_connections", _int(env, "CONNECTOR_HTTP_MAX_CONNECTIONS"))
    put("webapp", _bool(env, "CONNECTOR_WEBAPP"))
    put("webapp_session_ttl_ms", _int(env, "CONNECTOR_WEBAPP_SESSION_TTL_MS"))
    recall_mode = _env(env, "CONNECTOR_RECALL_MODE")
    put("recall_mode", recall_mode.strip().lower() if recall_mode else None)
    put("recall_e5", _bool(env, "CONNECTOR_RECALL_E5"))
    put("recall_judge", _bool(env, "CONNECTOR_RECALL_JUDGE"))
    put("model_url", _env(env, "CONNECTOR_MODEL_URL"))
    put("model", _env(env, "CONNECTOR_MODEL"))
    put("model_api_key", _env(env, "CONNECTOR_MODEL_API_KEY"))
    put("model_local_only", _bool(env, "CONNECTOR_MODEL_LOCAL_ONLY"))
    put("model_timeout_s", _int(env, "CONNECTOR_MODEL_TIMEOUT_S"))
    put("model_max_tokens", _int(env, "CONNECTOR_MODEL_MAX_TOKENS"))
    put("model_max_calls", _int(env, "CONNECTOR_MODEL_MAX_CALLS"))
    put("model_max_calls_per_user", _int(env, "CONNECTOR_MODEL_MAX_CALLS_PER_USER"))
    return values


def _check_url(name: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(f"{name} must be an absolute http(s) URL, got {url!r}")
    if parts.query or parts.fragment:
        raise SettingsError(f"{name} must not carry a query or fragment")
    return url.rstrip("/")


def _check_proxy(entries: tuple[str, ...]) -> tuple[str, ...]:
    """The trusted proxies as the store reads them (``TrustedProxies.parse``: keywords such as
    ``loopback`` or ``private``, addresses, CIDRs); a value trusting every forwarder (``true``,
    ``*``, ``0.0.0.0/0``), which would let anyone choose the address they are limited by, is refused."""
    try:
        trusted = TrustedProxies.parse(entries)
    except ValueError as exc:
        raise SettingsError(f"CONNECTOR_TRUST_PROXY: {exc}") from None
    return entries if trusted else ()


def _check_model(settings: ConnectorSettings) -> str | None:
    """CONNECTOR_MODEL_* checked together (the endpoint's locality is checked when the model is built)."""
    if settings.model_url is None:
        if settings.model or settings.model_api_key:
            raise SettingsError("CONNECTOR_MODEL and CONNECTOR_MODEL_API_KEY need CONNECTOR_MODEL_URL (the endpoint)")
        return None
    if not settings.model:
        raise SettingsError("CONNECTOR_MODEL_URL needs CONNECTOR_MODEL: the model's name at that endpoint")
    if not 1 <= settings.model_timeout_s <= 600:
        raise SettingsError("CONNECTOR_MODEL_TIMEOUT_S must be 1-600 seconds")
    if not 16 <= settings.model_max_tokens <= 32_768:
        raise SettingsError("CONNECTOR_MODEL_MAX_TOKENS must be 16-32768")
    if not 1 <= settings.model_max_calls <= 256:
        raise SettingsError("CONNECTOR_MODEL_MAX_CALLS must be 1-256")
    if not 1 <= settings.model_max_calls_per_user <= settings.model_max_calls:
        raise SettingsError("CONNECTOR_MODEL_MAX_CALLS_PER_USER must be 1 to CONNECTOR_MODEL_MAX_CALLS")
    return _check_url("CONNECTOR_MODEL_URL", settings.model_url)


def _validated(settings: ConnectorSettings) -> ConnectorSettings:
    store_url = _check_url("CONNECTOR_STORE_URL", settings.store_url)
    public_url = _check_url("CONNECTOR_PUBLIC_URL", settings.public_url) if settings.public_url else None
    if (problem := path_problem(public_path(public_url))) is not None:
        raise SettingsError(f"CONNECTOR_PUBLIC_URL: {problem}, got {public_url!r}")
    if not 0 < settings.port < 65536:
        raise SettingsError(f"port must be 1-65535, got {settings.port}")
    if not 1 <= settings.workers <= MAX_WORKERS:
        raise SettingsError(f"CONNECTOR_WORKERS (--workers) must be 1-{MAX_WORKERS}, got {settings.workers}")
    if settings.workers > 1 and settings.state_dir is None and settings.state_url is None:
        raise SettingsError(
            "several workers (CONNECTOR_WORKERS / --workers) share sign-ins, held writes and what each "
            "brain's newest version is through CONNECTOR_STATE_DIR or CONNECTOR_STATE_URL: set one, or run one worker"
        )
    _check_state_url(settings)
    if settings.idp is not None and settings.idp not in IDENTITY_PROVIDERS:
        raise SettingsError(f"CONNECTOR_IDP must be one of {', '.join(IDENTITY_PROVIDERS)}, got {settings.idp!r}")
    if settings.idp == "oidc" and not (settings.oidc_issuer and settings.oidc_client_id):
        raise SettingsError("CONNECTOR_IDP=oidc needs OIDC_ISSUER and OIDC_CLIENT_ID")
    unknown_tools = [name for name in settings.tools if name not in TOOL_NAMES]
    if unknown_tools:
        raise SettingsError(
            f"CONNECTOR_TOOLS names unknown tools: {', '.join(unknown_tools)} (known: {', '.join(TOOL_NAMES)})"
        )
    if settings.state_key is not None and len(settings.state_key) != 32:
        raise SettingsError("the state key must be 32 bytes")
    if settings.max_brain_mb < 1:
        raise SettingsError("CONNECTOR_MAX_BRAIN_MB must be at least 1")
    if settings.max_concurrent_loads < 1:
        raise SettingsError("CONNECTOR_MAX_CONCURRENT_LOADS must be at least 1")
    if settings.recall_mode not in RECALL_MODES:
        raise SettingsError(f"CONNECTOR_RECALL_MODE must be {' or '.join(RECALL_MODES)}, got {settings.recall_mode!r}")
    try:
        log_level = parse_log_level("CONNECTOR_LOG_LEVEL", settings.log_level)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    if not 60_000 <= settings.webapp_session_ttl_ms <= 30 * 24 * 3600 * 1000:
        raise SettingsError("CONNECTOR_WEBAPP_SESSION_TTL_MS must be between one minute and 30 days")
    bad_hosts = [host for host in settings.allowed_hosts if host_name(host) is None]
    if bad_hosts:
        raise SettingsError(f"CONNECTOR_ALLOWED_HOSTS must list host names (name or name:port), got {bad_hosts[0]!r}")
    model_url = _check_model(settings)
    return replace(
        settings,
        model_url=model_url,
        store_url=store_url,
        public_url=public_url,
        trust_proxy=_check_proxy(tuple(settings.trust_proxy)),
        tools=tuple(dict.fromkeys(settings.tools)),
        log_level=log_level,
    )
