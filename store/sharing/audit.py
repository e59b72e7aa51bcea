"""The per-brain sharing audit log: who uploaded, restored, or changed members and keys.

On disk (``BrainAudit``): one JSON line per event in ``sharing-audit/<brain id>.jsonl`` (mode
0600), appended with a single ``write`` on an ``O_APPEND`` descriptor so worker processes never
interleave lines. On S3 (``S3BrainAudit``): one small object per event (no appends on S3).
Entries carry time, actor (user id and name, and the agent key's prefix when one was
used), action and details such as a member's role: never a key or a token.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from common.files import write_atomic
from store.auth.users import now_rfc3339

if TYPE_CHECKING:
    from store.storage.s3 import S3Backend

log = logging.getLogger("store.sharing")

MAX_READ_BYTES = 4 * 1024 * 1024
_encoder = msgspec.json.Encoder()


class AuditLog(Protocol):
    """Where a store keeps per-brain audit events: ``BrainAudit`` (disk), ``S3BrainAudit``."""

    def record(self, brain_id: str, actor_id: str, actor_name: str, action: str, **details: Any) -> None:
        """Store one event, never raising."""
        ...

    def events(self, brain_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The latest events, oldest first."""
        ...

    def forget(self, brain_id: str) -> None:
        """Remove a deleted brain's log."""
        ...

    def replace(self, brain_id: str, events: list[dict[str, Any]]) -> None:
        """Make the brain's log exactly ``events`` (restores)."""
        ...


def audit_event(brain_id: str, actor_id: str, actor_name: str, action: str, **details: Any) -> dict[str, Any]:
    """One audit entry (empty details left out)."""
    return {"ts": now_rfc3339(), "brain": brain_id, "actor": actor_id, "actor_name": actor_name,
            "action": action, **{k: v for k, v in details.items() if v not in (None, "")}}


class BrainAudit:
    """Appends to and reads the audit files of brains in one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.directory = Path(data_dir) / "sharing-audit"

    def _path(self, brain_id: str) -> Path:
        return self.directory / f"{brain_id}.jsonl"  # brain ids are canonical UUIDs here

    def record(self, brain_id: str, actor_id: str, actor_name: str, action: str, **details: Any) -> None:
        """Append one event; a failing disk is logged, never raised (the change itself happened)."""
        event = audit_event(brain_id, actor_id, actor_name, action, **details)
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self._path(brain_id), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, _encoder.encode(event) + b"\n")
            finally:
                os.close(fd)
        except OSError as exc:
            log.error("cannot write the sharing audit log of brain %s: %s", brain_id, exc)

    def events(self, brain_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The brain's latest ``limit`` events, oldest first (a damaged line is skipped)."""
        try:
            with open(self._path(brain_id), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - MAX_READ_BYTES))
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines[-limit:]:
            try:
                events.append(msgspec.json.decode(line))
            except msgspec.DecodeError:
                continue
        return events

    def forget(self, brain_id: str) -> None:
        """Remove a deleted brain's log."""
        self._path(brain_id).unlink(missing_ok=True)

    def replace(self, brain_id: str, events: list[dict[str, Any]]) -> None:
        """Make the brain's log exactly ``events`` (restores): one atomic write, mode 0600."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(self._path(brain_id), b"".join(_encoder.encode(e) + b"\n" for e in events))


class S3BrainAudit:
    """The per-brain sharing audit log on S3: one small object per event under
    ``sharing-audit/<brain>/``, named by time so a listing is in order (no appends on S3)."""

    MAX_EVENTS = 200  # one GET per event: an S3 listing answers the latest 200

    def __init__(self, backend: S3Backend) -> None:
        self._backend = backend

    def _prefix(self, brain_id: str) -> str:
        return self._backend.bucket.key("sharing-audit", brain_id, "")

    def _put(self, brain_id: str, event: dict[str, Any], suffix: str) -> None:
        name = str(event.get("ts", "")).replace("-", "").replace(":", "") + "-" + suffix + ".json"
        self._backend.client.put_object(Bucket=self._backend.bucket.name, Key=self._prefix(brain_id) + name,
                                        Body=msgspec.json.encode(event), ContentType="application/json")

    def record(self, brain_id: str, actor_id: str, actor_name: str, action: str, **details: Any) -> None:
        """Store one event; a failing bucket is logged, never raised (the change itself happened)."""
        try:
            self._put(brain_id, audit_event(brain_id, actor_id, actor_name, action, **details), uuid.uuid4().hex[:8])
        except Exception as exc:
            log.error("cannot write the sharing audit log of brain %s: %s", brain_id, exc)

    def replace(self, brain_id: str, events: list[dict[str, Any]]) -> None:
        """Make the brain's log exactly ``events`` (restores); names keep their order."""
        self.forget(brain_id)
        for i, event in enumerate(events):
            self._put(brain_id, event, f"r{i:08d}")

    def events(self, brain_id: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The brain's latest events (at most ``MAX_EVENTS``), oldest first."""
        from botocore.exceptions import ClientError

        keys = sorted(item["Key"] for item in self._backend._list(self._prefix(brain_id)))
        events = []
        for key in keys[-min(limit, self.MAX_EVENTS):]:
            try:
                reply = self._backend.client.get_object(Bucket=self._backend.bucket.name, Key=key)
                with reply["Body"] as body:
                    events.append(msgspec.json.decode(body.read()))
            except (ClientError, msgspec.DecodeError):
                continue  # removed meanwhile, or damaged: skipped
        return events

    def forget(self, brain_id: str) -> None:
        """Remove a deleted brain's log."""
        self._backend._delete_prefix(self._prefix(brain_id))
