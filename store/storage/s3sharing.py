"""The sharing registry kept in the bucket (``sharing.json``), shared by every replica and the CLI.

Same document and rules as the local sharing file (``store.sharing.registry``), stored as
one object (``store.storage.s3doc``): compare-and-swap edits, and a serving replica polls
it every ``poll_seconds``, so a share, role change or revocation made anywhere is seen by
every replica within about one poll interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from store.sharing.registry import SharingDocument, SharingError, SharingRegistry, _Index
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

    def start_polling(self) -> None:
        """Start the background poller (servers); idempotent."""
        self._object.start_polling("sharing-poller")

    def stop_polling(self) -> None:
        """Stop the poller (tests, shutdown)."""
        self._object.stop_polling()

    def _edit(self, change: Callable[[SharingDocument], T]) -> T:
        return self._object.edit(change, SharingError)
