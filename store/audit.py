"""The opt-in audit log: who did what to which brain, and how it ended.

One JSON object per line in a file per UTC day (``audit-YYYY-MM-DD.jsonl``) inside the audit
directory; files older than the retention are deleted when a new day's file is opened.
Entries carry the time, the user id (and the listed prefix of the agent key a caller used),
the client address, the action, the brain id (and snapshot name), the status and an outcome
word: never tokens, headers, query strings or memory content. The routes of this project's
extensions (rename, trash, members, the sharing audit log, agent keys) are audited too;
their handlers ``note`` what the path does not say (the member's user id and role, an agent
key's shown prefix, scope and brains), never a key itself.

Several worker processes may write the same day's file: each line is written with a
single ``write`` on an ``O_APPEND`` descriptor, so lines never interleave.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from store.sharing.registry import SHOWN_CHARS

log = logging.getLogger("store.audit")

PREFIX = "audit-"
SUFFIX = ".jsonl"

# (method, route template) -> action name. Health, metrics and the OpenAPI document are not audited.
ACTIONS: dict[tuple[str, str], str] = {
    ("GET", "/auth/me"): "whoami",
    ("GET", "/api/brains"): "list_brains",
    ("POST", "/api/brains"): "create_brain",
    ("GET", "/api/brains/{id}"): "get_brain",
    ("DELETE", "/api/brains/{id}"): "delete_brain",
    ("GET", "/api/brains/{id}/sync"): "download",
    ("HEAD", "/api/brains/{id}/sync"): "download_head",
    ("PUT", "/api/brains/{id}/sync"): "upload",
    ("GET", "/api/brains/{id}/versions"): "list_versions",
    ("POST", "/api/brains/{id}/versions/{name}/restore"): "restore_version",
    # This project's extensions: who renamed or trashed a brain, shared it, made or revoked its keys.
    ("PATCH", "/api/brains/{id}"): "rename_brain",
    ("POST", "/api/brains/{id}/trash"): "trash_brain",
    ("GET", "/api/brains/{id}/members"): "list_members",
    ("PUT", "/api/brains/{id}/members"): "set_member",
    ("DELETE", "/api/brains/{id}/members/{user}"): "remove_member",
    ("GET", "/api/brains/{id}/audit"): "read_audit",
    ("POST", "/api/keys"): "create_key",
    ("GET", "/api/keys"): "list_keys",
    ("DELETE", "/api/keys/{prefix}"): "revoke_key",
}
# Where a handler's notes wait in the request's ASGI scope state for the audit entry.
_NOTES = "audit_notes"
_encoder = msgspec.json.Encoder()


_KEYS_PATH = "/api/keys/"


def logged_path(path: str) -> str:
    """``path`` as the request log and error lines show it: a key's path segment cut to the prefix
    a key is listed by (a whole agent key pasted there by mistake is never written out)."""
    if path.startswith(_KEYS_PATH) and len(path) > len(_KEYS_PATH) + SHOWN_CHARS:
        return path[: len(_KEYS_PATH) + SHOWN_CHARS] + "\u2026"
    return path


def outcome(status: int) -> str:
    """``ok`` (2xx/304), ``denied`` (401/403/429), ``refused`` (other 4xx) or ``error`` (5xx)."""
    if status < 400:
        return "ok"
    if status in (401, 403, 429):
        return "denied"
    return "refused" if status < 500 else "error"


def note(scope: Any, /, **fields: str | list[str]) -> None:
    """Add to the request's audit entry what its path does not say (a member's user id, an agent
    key's shown prefix): ids and words the store checked, never a key, a token or a user's text."""
    scope.setdefault("state", {}).setdefault(_NOTES, {}).update(fields)


def notes(scope: Any) -> dict[str, Any] | None:
    """What the request's handler noted for its audit entry, if anything."""
    return scope.get("state", {}).get(_NOTES)  # type: ignore[no-any-return]


# Where ``context`` notes the caller in a request's ASGI scope state, for its log line and audit entry.
CALLER_USER = "user_id"
CALLER_KEY = "key_prefix"


def caller(scope: Any) -> tuple[str | None, str | None]:
    """Who made the request, as authentication noted it: the user id, and the listed prefix of the
    agent key they used (None with their own token), never more of a key; (None, None) for no caller."""
    state = scope.get("state", {})
    key = state.get(CALLER_KEY)
    return state.get(CALLER_USER), key[:SHOWN_CHARS] if key else None


def audit_event(
    method: str, route: str, path: str, status: int, user_id: str | None, noted: dict[str, Any] | None = None,
    *, key: str | None = None,
) -> dict[str, Any] | None:
    """The audit entry of one request (with its handler's ``noted`` fields), or None when the
    request is not audited; ``key``: the listed prefix of the agent key the caller used."""
    action = ACTIONS.get((method, route))
    if action is None:
        return None
    event: dict[str, Any] = {
        "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "user": user_id,
        "action": action,
        "status": status,
        "outcome": outcome(status),
    }
    if key:
        event["key"] = key[:SHOWN_CHARS]  # the prefix keys are listed by, never more of a key
    if route.startswith("/api/brains/{id}"):
        parts = path.split("/")
        event["brain"] = parts[3][:64]  # a malformed id is cut short; never more than a path segment
        if action == "restore_version":
            event["version"] = parts[5][:64]
    if noted:
        event.update({k: v for k, v in noted.items() if k not in event})  # never replaces what the request says
    return event


def day_file(directory: Path, day: str) -> Path:
    """The file of one UTC day (``YYYY-MM-DD``)."""
    return directory / f"{PREFIX}{day}{SUFFIX}"


def expired_files(directory: Path, today: datetime, retention_days: int) -> list[Path]:
    """Day files older than the retention (0 keeps everything)."""
    if retention_days <= 0:
        return []
    cutoff = (today - timedelta(days=retention_days)).strftime("%Y-%m-%d")
    old = []
    for path in directory.glob(f"{PREFIX}*{SUFFIX}"):
        day = path.name[len(PREFIX) : -len(SUFFIX)]
        if len(day) == 10 and day < cutoff:
            old.append(path)
    return sorted(old)


class AuditLog:
    """Appends audit entries to the current day's file and prunes old days."""

    def __init__(self, directory: Path, retention_days: int) -> None:
        self.directory = directory
        self.retention_days = retention_days
        self._lock = threading.Lock()
        self._day = ""
        self._fd: int | None = None
        self._failed_at = 0.0
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _open(self, now: datetime) -> int:
        day = now.strftime("%Y-%m-%d")
        if self._fd is not None and day == self._day:
            return self._fd
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._fd = os.open(day_file(self.directory, day), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._day = day
        for path in expired_files(self.directory, now, self.retention_days):
            path.unlink(missing_ok=True)
        return self._fd

    def write(self, event: dict[str, Any]) -> None:
        """Append one entry; a failing disk is logged (at most once a minute), never raised."""
        line = _encoder.encode(event) + b"\n"
        try:
            with self._lock:
                os.write(self._open(datetime.now(UTC)), line)
        except OSError as exc:
            now = time.monotonic()
            if now - self._failed_at > 60:
                self._failed_at = now
                log.error("cannot write the audit log in %s: %s", self.directory, exc)

    def close(self) -> None:
        """Close the current file."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
