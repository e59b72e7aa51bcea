"""The users registry kept in the bucket (``users.json``), shared by every replica and the CLI.

Same document and behaviour as the local users file (``store.auth.users``), with the
storage swapped: changes are compare-and-swap PUTs (``If-Match`` on the ETag read,
``If-None-Match: *`` for the first document) retried on conflict, so CLI runs and
OIDC first sights on different hosts never lose each other's edits. A server
replica does no I/O on the request path: a background thread asks S3 every
``poll_seconds`` with a conditional GET (``If-None-Match: <etag>``, an empty 304
when nothing changed), so a user added, rotated or removed anywhere is seen by every
replica within about one poll interval. A corrupt or missing object keeps the last
good copy serving and is logged loudly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from botocore.exceptions import ClientError

from store.auth.users import User, UserRegistry, UsersDocument, UsersFileError, _Index
from store.storage.s3client import Bucket, is_conflict, is_not_found, is_not_modified

log = logging.getLogger("store.users")

T = TypeVar("T")
# An unknown token makes a serving replica look at S3 at once (at most this often), so a
# user created a moment ago can sign in on any replica without waiting for the poller.
MISS_REFRESH_SECONDS = 0.25
_EDIT_ATTEMPTS = 30
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(UsersDocument)


class S3UserRegistry(UserRegistry):
    """``UserRegistry`` whose document is an object in the bucket."""

    blocking = True

    def __init__(self, client: Any, bucket: Bucket, *, poll_seconds: float = 1.0) -> None:
        # The parent's constructor binds a local file; this registry binds an object instead.
        self._client = client
        self._bucket = bucket
        self.key = bucket.key("users.json")
        self.path = Path(f"s3://{bucket.name}/{self.key}")  # for messages only
        self.lock_path = self.path
        self._fsync = False
        self._index = _Index(UsersDocument())
        self._reload_lock = threading.Lock()
        self._etag: str | None = None
        self._bad_etag: str | None = None
        self._missing_logged = False
        self._poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._last_fetch = 0.0
        self._fetch()

    # -- reading -----------------------------------------------------------------------

    def _fetch(self) -> None:
        """Conditional GET of the users object; install it when it changed and parses."""
        with self._reload_lock:
            self._last_fetch = time.monotonic()
            try:
                if self._etag:
                    reply = self._client.get_object(Bucket=self._bucket.name, Key=self.key, IfNoneMatch=self._etag)
                else:
                    reply = self._client.get_object(Bucket=self._bucket.name, Key=self.key)
            except ClientError as exc:
                if is_not_modified(exc):
                    return
                if is_not_found(exc):
                    if self._etag is not None and not self._missing_logged:
                        log.error("users object %s disappeared; keeping the last good copy", self.path)
                        self._missing_logged = True
                    return
                raise
            with reply["Body"] as body:
                data = body.read()
            etag = str(reply["ETag"])
            self._missing_logged = False
            try:
                doc = _decoder.decode(data)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                if etag != self._bad_etag:
                    log.critical("users object %s is corrupt (%s); still serving the last good copy", self.path, exc)
                    self._bad_etag = etag
                return
            self._index = _Index(doc)
            self._etag = etag

    def refresh(self) -> None:
        """No I/O here (hot path): the poller thread installs changes as they appear."""

    def recheck_token(self, token: str) -> User | None:
        """An unknown token triggers one early look at S3 (rate-limited); blocking, so servers
        call it in a worker thread. ``by_token`` itself answers from memory only."""
        user = super().by_token(token)
        if user is None and self._poller is not None and time.monotonic() - self._last_fetch > MISS_REFRESH_SECONDS:
            try:
                self._fetch()
            except Exception as exc:
                log.warning("cannot refresh the users object: %s", exc)
                return None
            user = super().by_token(token)
        return user

    def start_polling(self) -> None:
        """Start the background poller (servers); idempotent."""
        if self._poller is not None:
            return
        self._poller = threading.Thread(target=self._poll_loop, name="users-poller", daemon=True)
        self._poller.start()

    def stop_polling(self) -> None:
        """Stop the poller (tests, shutdown)."""
        self._stop.set()

    def _poll_loop(self) -> None:
        failures = 0
        while not self._stop.wait(self._poll_seconds):
            try:
                self._fetch()
                failures = 0
            except Exception as exc:  # keep serving the last good copy; never die
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("cannot poll the users object (%s failures): %s", failures, exc)

    # -- changing ------------------------------------------------------------------------

    def _edit(self, change: Callable[[UsersDocument], T]) -> T:
        """Read, change and conditionally write the document; retried when another writer won."""
        for attempt in range(_EDIT_ATTEMPTS):
            try:
                reply = self._client.get_object(Bucket=self._bucket.name, Key=self.key)
            except ClientError as exc:
                if not is_not_found(exc):
                    raise
                etag, doc = None, UsersDocument()
            else:
                with reply["Body"] as body:
                    data = body.read()
                etag = str(reply["ETag"])
                try:
                    doc = _decoder.decode(data)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    raise UsersFileError(
                        f"{self.path} is corrupt ({exc}); fix or restore it before changing users"
                    ) from exc
            result = change(doc)
            cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                put = self._client.put_object(
                    Bucket=self._bucket.name, Key=self.key, Body=_encoder.encode(doc),
                    ContentType="application/json", **cond,
                )
            except ClientError as exc:
                if is_conflict(exc):
                    time.sleep(min(0.2, 0.01 * (attempt + 1)))
                    continue
                raise
            with self._reload_lock:
                self._index = _Index(doc)
                self._etag = str(put["ETag"])
            return result
        raise UsersFileError("the users object keeps changing under us; try again")
