"""The store's settings: one typed object, built from the environment in one place.

Every other module receives a ``StoreSettings`` and never reads ``os.environ``.
Command-line flags win over the environment: the CLI passes them as overrides.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.connection_guard import HttpLimits
from common.logs import parse_log_level

if TYPE_CHECKING:
    from store.archive.inspect import InspectLimits

MIB = 1024 * 1024


class SettingsError(ValueError):
    """A setting has a value the store cannot use; the message names the setting."""


def parse_key(text: str, name: str = "STORE_ENCRYPTION_KEY") -> bytes:
    """A 32-byte key given as 64 hex characters or as base64 (standard or url-safe)."""
    text = text.strip()
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    try:
        padded = text + "=" * (-len(text) % 4)
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise SettingsError(f"{name}: expected 32 bytes as 64 hex characters or base64")
    return raw


def _bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise SettingsError(f"{name}: expected on/off, true/false or 1/0, got {text!r}")


def _int(name: str, text: str, minimum: int = 0, maximum: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SettingsError(f"{name}: expected a whole number, got {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise SettingsError(f"{name}: must be {bound}, got {value}")
    return value


def _url(name: str, text: str) -> str:
    """An absolute http(s) URL (an S3 endpoint); anything else is named here, not by boto3's traceback."""
    from urllib.parse import urlsplit

    value = text.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SettingsError(f"{name}: expected an absolute http(s) URL, got {value!r}")
    return value


def _log_level(name: str, text: str) -> str:
    try:
        return parse_log_level(name, text)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def _list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _hosts(name: str, text: str) -> tuple[str, ...]:
    """Host names (``name`` or ``name:port``) answered besides the loopback names."""
    from common.host_guard import host_name

    items = _list(text)
    bad = [item for item in items if host_name(item) is None]
    if bad:
        raise SettingsError(f"{name} must list host names (name or name:port), got {bad[0]!r}")
    return items


def _proxies(name: str, text: str) -> tuple[str, ...]:
    """Trusted proxies: keywords (``loopback``, ``private``...), IP addresses or CIDR networks."""
    from common.limits.address import TrustedProxies

    items = _list(text)
    try:
        trusted = TrustedProxies.parse(items)
    except ValueError as exc:
        raise SettingsError(f"{name}: {exc}") from None
    return items if trusted else ()


@dataclass(frozen=True)
class StoreSettings:
    """Everything the store needs to know about its environment."""

    data_dir: Path = field(default_factory=lambda: Path("~/.brain-store").expanduser())
    host: str = "127.0.0.1"
    port: int = 8787
    encryption_key: bytes | None = None
    previous_keys: tuple[bytes, ...] = ()
    max_upload_bytes: int = 50 * MIB
    max_user_bytes: int = 0  # 0 = unlimited
    max_brains: int = 10
    snapshots: int = 5
    rate_limits: bool = True
    rate_requests_per_min: int = 300
    rate_uploads_per_min: int = 30
    rate_failed_logins_per_min: int = 30
    trust_proxy: tuple[str, ...] = ()
    # When set, only these host names (and the loopback names) are answered: 421 for any other
    # Host (DNS rebinding, common/host_guard.py). `brain-store dev` sets it to localhost.
    allowed_hosts: tuple[str, ...] = ()
    quiet: bool = False
    log_level: str = "info"  # the store's log lines but the request lines (those: quiet)
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_allowed_domains: tuple[str, ...] = ()
    oidc_allowed_emails: tuple[str, ...] = ()
    inspect_max_inflated: int = 1024 * MIB
    inspect_max_entries: int = 500_000
    inspect_max_header: int = 1 * MIB
    inspect_max_ratio: int = 200  # inflated / compressed bytes past 16 MiB inflated; 0 = not checked
    upload_threads: int = 0  # threads per process doing uploads' CPU work; 0 = automatic
    validation_memo_mb: int = 64  # per process: what validating each brain's last archive established; 0 = off
    # What one client connection may hold (common/connection_guard.py); 0 turns a bound off.
    http_max_header_kb: int = 64  # request line and headers; beyond: 431
    http_header_timeout_s: int = 10  # a request's head must be in within this; else 408
    http_body_timeout_s: int = 30  # longest pause in a body (or in reading a response)
    http_body_min_bytes_per_s: int = 1024  # average body rate required after the first pause allowance
    http_max_connections: int = 512  # open connections per process; beyond: 503
    fsync: bool = True
    backend: str = "local"  # "local" (data_dir) | "s3" (bucket; data_dir only holds temporary files)
    s3_bucket: str = ""
    s3_prefix: str = ""
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    s3_users_poll_seconds: int = 1  # how often a replica looks for changes to the users object
    # How often a replica looks for changes to the sharing object (members, roles, agent keys):
    # a conditional GET (an empty 304 when unchanged), often enough that a revocation or role
    # change applies on every replica within one second.
    s3_sharing_poll_ms: int = 250
    metrics: bool = True  # GET /metrics (Prometheus); labels are route templates, never ids
    metrics_token: str | None = None  # when set, /metrics needs "Authorization: Bearer <token>"
    metrics_dir: Path | None = None  # STORE_METRICS_DIR: set by serve for --workers N
    audit_log: str = "off"  # "off", "on" (DATA_DIR/audit) or a directory for the daily audit files
    audit_retention_days: int = 90  # 0 keeps audit files forever

    @property
    def encryption(self) -> bool:
        """True when archives are sealed at rest."""
        return self.encryption_key is not None

    @property
    def audit_dir(self) -> Path | None:
        """Where the audit log's daily files go, or None when the audit log is off."""
        value = self.audit_log.strip()
        if value.lower() in ("", "0", "off", "false", "no"):
            return None
        if value.lower() in ("1", "on", "true", "yes"):
            return self.data_dir / "audit"
        return Path(value).expanduser()

    @property
    def inspect_limits(self) -> InspectLimits:
        """The bounds every archive (upload or import) is inspected under."""
        from store.archive.inspect import InspectLimits

        return InspectLimits(
            max_inflated=self.inspect_max_inflated,
            max_entries=self.inspect_max_entries,
            max_header=self.inspect_max_header,
            max_ratio=self.inspect_max_ratio,
        )

    @property
    def http_limits(self) -> HttpLimits:
        """What one client connection may hold (header size, timeouts, open connections)."""
        return HttpLimits.from_settings(self)

    @property
    def oidc(self) -> bool:
        """True when OpenID Connect bearer tokens are accepted."""
        return bool(self.oidc_issuer)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> StoreSettings:
        """Build settings from ``STORE_*`` variables; ``overrides`` (CLI flags, not None) win."""

        def get(name: str) -> str | None:
            value = env.get(name)
            return value if value is not None and value.strip() != "" else None

        values: dict[str, Any] = {}
        if (v := get("STORE_DATA_DIR")) is not None:
            values["data_dir"] = Path(v).expanduser()
        if (v := get("STORE_HOST")) is not None:
            values["host"] = v.strip()
        if (v := get("STORE_PORT")) is not None:
            values["port"] = _int("STORE_PORT", v, 0, 65535)
        if (v := get("STORE_ENCRYPTION_KEY")) is not None:
            values["encryption_key"] = parse_key(v)
        if (v := get("STORE_ENCRYPTION_PREVIOUS_KEYS")) is not None:
            values["previous_keys"] = tuple(
                parse_key(item, "STORE_ENCRYPTION_PREVIOUS_KEYS") for item in _list(v)
            )
        if (v := get("STORE_MAX_UPLOAD_MB")) is not None:
            values["max_upload_bytes"] = _int("STORE_MAX_UPLOAD_MB", v, 1) * MIB
        if (v := get("STORE_MAX_USER_MB")) is not None:
            values["max_user_bytes"] = _int("STORE_MAX_USER_MB", v, 0) * MIB
        if (v := get("STORE_MAX_BRAINS")) is not None:
            values["max_brains"] = _int("STORE_MAX_BRAINS", v, 1)
        if (v := get("STORE_SNAPSHOTS")) is not None:
            values["snapshots"] = _int("STORE_SNAPSHOTS", v, 0, 10_000)
        if (v := get("STORE_RATE_LIMITS")) is not None:
            values["rate_limits"] = _bool("STORE_RATE_LIMITS", v)
        for attr, name in (
            ("rate_requests_per_min", "STORE_RATE_REQUESTS_PER_MIN"),
            ("rate_uploads_per_min", "STORE_RATE_UPLOADS_PER_MIN"),
            ("rate_failed_logins_per_min", "STORE_RATE_FAILED_LOGINS_PER_MIN"),
        ):
            if (v := get(name)) is not None:
                values[attr] = _int(name, v, 1)
        if (v := get("STORE_TRUST_PROXY")) is not None:
            values["trust_proxy"] = _proxies("STORE_TRUST_PROXY", v)
        if (v := get("STORE_ALLOWED_HOSTS")) is not None:
            values["allowed_hosts"] = _hosts("STORE_ALLOWED_HOSTS", v)
        if (v := get("STORE_QUIET")) is not None:
            values["quiet"] = _bool("STORE_QUIET", v)
        if (v := get("STORE_LOG_LEVEL")) is not None:
            values["log_level"] = _log_level("STORE_LOG_LEVEL", v)
        if (v := get("STORE_OIDC_ISSUER")) is not None:
            values["oidc_issuer"] = v.strip()
        if (v := get("STORE_OIDC_AUDIENCE")) is not None:
            values["oidc_audience"] = v.strip()
        if (v := get("STORE_OIDC_ALLOWED_DOMAINS")) is not None:
            values["oidc_allowed_domains"] = tuple(d.lower() for d in _list(v))
        if (v := get("STORE_OIDC_ALLOWED_EMAILS")) is not None:
            values["oidc_allowed_emails"] = tuple(e.lower() for e in _list(v))
        if (v := get("STORE_INSPECT_MAX_INFLATED_MB")) is not None:
            values["inspect_max_inflated"] = _int("STORE_INSPECT_MAX_INFLATED_MB", v, 1) * MIB
        if (v := get("STORE_INSPECT_MAX_ENTRIES")) is not None:
            values["inspect_max_entries"] = _int("STORE_INSPECT_MAX_ENTRIES", v, 1)
        if (v := get("STORE_INSPECT_MAX_HEADER_KB")) is not None:
            values["inspect_max_header"] = _int("STORE_INSPECT_MAX_HEADER_KB", v, 1) * 1024
        if (v := get("STORE_INSPECT_MAX_RATIO")) is not None:
            values["inspect_max_ratio"] = _int("STORE_INSPECT_MAX_RATIO", v, 0)
        if (v := get("STORE_UPLOAD_THREADS")) is not None:
            values["upload_threads"] = _int("STORE_UPLOAD_THREADS", v, 0, 64)
        if (v := get("STORE_VALIDATION_MEMO_MB")) is not None:
            values["validation_memo_mb"] = _int("STORE_VALIDATION_MEMO_MB", v, 0, 65536)
        for attr, name in (
            ("http_max_header_kb", "STORE_HTTP_MAX_HEADER_KB"),
            ("http_header_timeout_s", "STORE_HTTP_HEADER_TIMEOUT_S"),
            ("http_body_timeout_s", "STORE_HTTP_BODY_TIMEOUT_S"),
            ("http_body_min_bytes_per_s", "STORE_HTTP_BODY_MIN_BYTES_PER_S"),
            ("http_max_connections", "STORE_HTTP_MAX_CONNECTIONS"),
        ):
            if (v := get(name)) is not None:
                values[attr] = _int(name, v, 0)
        if (v := get("STORE_FSYNC")) is not None:
            values["fsync"] = _bool("STORE_FSYNC", v)
        if (v := get("STORE_BACKEND")) is not None:
            values["backend"] = v.strip().lower()
        if (v := get("STORE_S3_BUCKET")) is not None:
            values["s3_bucket"] = v.strip()
        if (v := get("STORE_S3_PREFIX")) is not None:
            values["s3_prefix"] = v.strip()
        if (v := get("STORE_S3_ENDPOINT_URL")) is not None:
            values["s3_endpoint_url"] = _url("STORE_S3_ENDPOINT_URL", v)
        if (v := get("STORE_S3_REGION")) is not None:
            values["s3_region"] = v.strip()
        if (v := get("STORE_S3_USERS_POLL_SECONDS")) is not None:
            values["s3_users_poll_seconds"] = _int("STORE_S3_USERS_POLL_SECONDS", v, 1, 300)
        if (v := get("STORE_S3_SHARING_POLL_MS")) is not None:
            values["s3_sharing_poll_ms"] = _int("STORE_S3_SHARING_POLL_MS", v, 50, 60000)
        if (v := get("STORE_METRICS")) is not None:
            values["metrics"] = _bool("STORE_METRICS", v)
        if (v := get("STORE_METRICS_TOKEN")) is not None:
            values["metrics_token"] = v.strip()
        if (v := get("STORE_METRICS_DIR")) is not None:
            values["metrics_dir"] = Path(v)
        if (v := get("STORE_AUDIT_LOG")) is not None:
            values["audit_log"] = v.strip()
        if (v := get("STORE_AUDIT_RETENTION_DAYS")) is not None:
            values["audit_retention_days"] = _int("STORE_AUDIT_RETENTION_DAYS", v, 0, 36_500)
        for key, value in overrides.items():
            if value is None:
                continue
            if key not in {f.name for f in dataclasses.fields(cls)}:
                raise SettingsError(f"unknown setting {key!r}")
            values[key] = Path(value).expanduser() if key == "data_dir" else value
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Cross-field checks; raises SettingsError."""
        if self.oidc_issuer and not self.oidc_audience:
            raise SettingsError("STORE_OIDC_AUDIENCE is required when STORE_OIDC_ISSUER is set")
        if self.previous_keys and not self.encryption_key:
            raise SettingsError("STORE_ENCRYPTION_PREVIOUS_KEYS needs STORE_ENCRYPTION_KEY")
        if self.backend not in ("local", "s3"):
            raise SettingsError(f"STORE_BACKEND: expected local or s3, got {self.backend!r}")
        if self.backend == "s3" and not self.s3_bucket:
            raise SettingsError("STORE_S3_BUCKET is required when STORE_BACKEND=s3")

    def to_env(self) -> dict[str, str]:
        """The environment that rebuilds these settings (for uvicorn worker processes)."""
        env = {
            "STORE_DATA_DIR": str(self.data_dir),
            "STORE_HOST": self.host,
            "STORE_PORT": str(self.port),
            "STORE_MAX_UPLOAD_MB": str(self.max_upload_bytes // MIB),
            "STORE_MAX_USER_MB": str(self.max_user_bytes // MIB),
            "STORE_MAX_BRAINS": str(self.max_brains),
            "STORE_SNAPSHOTS": str(self.snapshots),
            "STORE_RATE_LIMITS": "on" if self.rate_limits else "off",
            "STORE_RATE_REQUESTS_PER_MIN": str(self.rate_requests_per_min),
            "STORE_RATE_UPLOADS_PER_MIN": str(self.rate_uploads_per_min),
            "STORE_RATE_FAILED_LOGINS_PER_MIN": str(self.rate_failed_logins_per_min),
            "STORE_TRUST_PROXY": ",".join(self.trust_proxy),
            "STORE_QUIET": "1" if self.quiet else "0",
            "STORE_LOG_LEVEL": self.log_level,
            "STORE_INSPECT_MAX_INFLATED_MB": str(self.inspect_max_inflated // MIB),
            "STORE_INSPECT_MAX_ENTRIES": str(self.inspect_max_entries),
            "STORE_INSPECT_MAX_HEADER_KB": str(self.inspect_max_header // 1024),
            "STORE_INSPECT_MAX_RATIO": str(self.inspect_max_ratio),
            "STORE_UPLOAD_THREADS": str(self.upload_threads),
            "STORE_VALIDATION_MEMO_MB": str(self.validation_memo_mb),
            "STORE_FSYNC": "1" if self.fsync else "0",
            "STORE_HTTP_MAX_HEADER_KB": str(self.http_max_header_kb),
            "STORE_HTTP_HEADER_TIMEOUT_S": str(self.http_header_timeout_s),
            "STORE_HTTP_BODY_TIMEOUT_S": str(self.http_body_timeout_s),
            "STORE_HTTP_BODY_MIN_BYTES_PER_S": str(self.http_body_min_bytes_per_s),
            "STORE_HTTP_MAX_CONNECTIONS": str(self.http_max_connections),
            "STORE_BACKEND": self.backend,
            "STORE_S3_BUCKET": self.s3_bucket,
            "STORE_S3_PREFIX": self.s3_prefix,
            "STORE_S3_USERS_POLL_SECONDS": str(self.s3_users_poll_seconds),
            "STORE_S3_SHARING_POLL_MS": str(self.s3_sharing_poll_ms),
            "STORE_METRICS": "on" if self.metrics else "off",
            "STORE_AUDIT_LOG": self.audit_log,
            "STORE_AUDIT_RETENTION_DAYS": str(self.audit_retention_days),
        }
        if self.allowed_hosts:
            env["STORE_ALLOWED_HOSTS"] = ",".join(self.allowed_hosts)
        if self.metrics_token:
            env["STORE_METRICS_TOKEN"] = self.metrics_token
        if self.metrics_dir:
            env["STORE_METRICS_DIR"] = str(self.metrics_dir)
        if self.s3_endpoint_url:
            env["STORE_S3_ENDPOINT_URL"] = self.s3_endpoint_url
        if self.s3_region:
            env["STORE_S3_REGION"] = self.s3_region
        if self.encryption_key:
            env["STORE_ENCRYPTION_KEY"] = self.encryption_key.hex()
        if self.previous_keys:
            env["STORE_ENCRYPTION_PREVIOUS_KEYS"] = ",".join(k.hex() for k in self.previous_keys)
        if self.oidc_issuer:
            env["STORE_OIDC_ISSUER"] = self.oidc_issuer
        if self.oidc_audience:
            env["STORE_OIDC_AUDIENCE"] = self.oidc_audience
        if self.oidc_allowed_domains:
            env["STORE_OIDC_ALLOWED_DOMAINS"] = ",".join(self.oidc_allowed_domains)
        if self.oidc_allowed_emails:
            env["STORE_OIDC_ALLOWED_EMAILS"] = ",".join(self.oidc_allowed_emails)
        return env
