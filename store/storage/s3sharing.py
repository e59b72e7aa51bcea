"""The sharing registry kept in the bucket (``sharing.json``), shared by every replica and the CLI.

Same document and rules as the local sharing file (``store.sharing.registry``), stored as
one object (``store.storage.s3doc``): compare-and-swap edits, and a serving replica polls
it every ``poll_seconds``, so a share, role change or revocation made anywhere is seen by
every replica within about one poll interval. The per-brain audit log is one object per
event (``S3BrainAudit``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from botocore.exceptions import ClientError

from store.sharing.audit import audit_event
from store.sharing.registry import SharingDocument, SharingError, SharingRegistry, _Index
from store.storage.s3 import S3Backend
from store.storage.s3client import Bucket
from store.storage.s3doc import S3JsonObject

log = logging.getLogger("store.sharing")
T = TypeVar("T")


class S3SharingRegistry(SharingRegistry):
    """``SharingRegistry`` whose document is an object in the bucket."""

    def __init__(self, client: Any, bucket: Bucket, *, poll_seconds: float = 1.0) -> None:
        # The parent's constructor binds a local file; this registry binds an object instead.
        self._index = _Index(SharingDocument())
        self._object = S3JsonObject(client, bucket, "sharing.json", SharingDocument, self._install, log=log,
                                    what="sharing object", poll_seconds=poll_seconds)
        self.path = self._object.path
        self._object.fetch()

    def _install(self, doc: SharingDocument) -> None:
        self._index = _Index(doc)

    def refresh(self) -> None:
        """No I/O here (hot path): the poller thread installs changes as they appear."""

    def damaged(self) -> str | None:
        """Why the object is not installed (corrupt: the last good copy serves), else None."""
        return self._object.damaged

    def start_polling(self) -> None:
        """Start the background poller (servers); idempotent."""
        self._object.start_polling("sharing-poller")

    def stop_polling(self) -> None:
        """Stop the poller (tests, shutdown)."""
        self._object.stop_polling()

    def _edit(self, change: Callable[[SharingDocument], T]) -> T:
        return self._object.edit(change, SharingError)


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
