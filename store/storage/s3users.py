"""The users registry kept in the bucket (``users.json``), shared by every replica and the CLI.

Same document and behaviour as the local users file (``store.auth.users``), with the
storage swapped for one object (``store.storage.s3doc``): changes are compare-and-swap
PUTs retried on conflict, so CLI runs and OIDC first sights on different hosts never
lose each other's edits, and a serving replica polls the object every ``poll_seconds``
(a conditional GET), so a user added, rotated or removed anywhere is seen by every
replica within about one poll interval. A corrupt or missing object keeps the last
good copy serving and is logged loudly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from store.auth.users import User, UserRegistry, UsersDocument, UsersFileError, _Index
from store.storage.s3client import Bucket
from store.storage.s3doc import S3JsonObject

log = logging.getLogger("store.users")

T = TypeVar("T")
# An unknown token makes a serving replica look at S3 at once (at most this often), so a
# user created a moment ago can sign in on any replica without waiting for the poller.
MISS_REFRESH_SECONDS = 0.25


class S3UserRegistry(UserRegistry):
    """``UserRegistry`` whose document is an object in the bucket."""

    blocking = True

    def __init__(self, client: Any, bucket: Bucket, *, poll_seconds: float = 1.0) -> None:
        # The parent's constructor binds a local file; this registry binds an object instead.
        self._index = _Index(UsersDocument())
        self._object = S3JsonObject(client, bucket, "users.json", UsersDocument, self._install, log=log,
                                    what="users object", poll_seconds=poll_seconds)
        self.key = self._object.key
        self.path = self._object.path  # for messages only
        self.lock_path = self.path
        self._fsync = False
        self._object.fetch()

    def _install(self, doc: UsersDocument) -> None:
        self._index = _Index(doc)

    # -- reading -----------------------------------------------------------------------

    def _fetch(self) -> None:
        self._object.fetch()

    def refresh(self) -> None:
        """No I/O here (hot path): the poller thread installs changes as they appear."""

    def damaged(self) -> str | None:
        """Why the object is not installed (corrupt: the last good copy serves), else None."""
        return self._object.damaged

    def recheck_token(self, token: str) -> User | None:
        """An unknown token triggers one early look at S3 (rate-limited); blocking, so servers
        call it in a worker thread. ``by_token`` itself answers from memory only."""
        user = super().by_token(token)
        if (user is None and self._object.polling
                and time.monotonic() - self._object.last_fetch > MISS_REFRESH_SECONDS):
            try:
                self._fetch()
            except Exception as exc:
                log.warning("cannot refresh the users object: %s", exc)
                return None
            user = super().by_token(token)
        return user

    def start_polling(self) -> None:
        """Start the background poller (servers); idempotent."""
        self._object.start_polling("users-poller")

    def stop_polling(self) -> None:
        """Stop the poller (tests, shutdown)."""
        self._object.stop_polling()

    # -- changing ------------------------------------------------------------------------

    def _edit(self, change: Callable[[UsersDocument], T]) -> T:
        """Read, change and conditionally write the document; retried when another writer won."""
        return self._object.edit(change, UsersFileError)
