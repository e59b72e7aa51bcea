"""A JSON document kept as one object in the bucket, shared by every replica and the CLI.

Changes are compare-and-swap PUTs (``If-Match`` on the ETag read, ``If-None-Match: *`` for
the first document) retried on conflict, so writers on different hosts never lose each
other's edits. A serving replica does no I/O on the request path: a background thread
asks S3 every ``poll_seconds`` with a conditional GET (an empty 304 when nothing
changed) and hands a changed document to ``on_change``. A corrupt or missing object
keeps the last good copy serving and is logged loudly. The users registry and the
sharing registry are kept this way on S3.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec
from botocore.exceptions import ClientError

from common.s3client import is_conflict, is_not_found, is_not_modified
from store.storage.s3client import Bucket

D = TypeVar("D")
T = TypeVar("T")
_EDIT_ATTEMPTS = 30


class S3JsonObject(Generic[D]):
    """One document type ``D`` (a msgspec Struct) in the object ``name`` of ``bucket``."""

    def __init__(self, client: Any, bucket: Bucket, name: str, doc_type: type[D], on_change: Callable[[D], None],
                 *, log: logging.Logger, what: str, poll_seconds: float = 1.0) -> None:
        self._client = client
        self._bucket = bucket
        self.key = bucket.key(name)
        self.path = Path(f"s3://{bucket.name}/{self.key}")  # for messages only
        self._type = doc_type
        self._decoder = msgspec.json.Decoder(doc_type)
        self._encoder = msgspec.json.Encoder()
        self._on_change = on_change
        self._log = log
        self._what = what
        self._poll_seconds = poll_seconds
        self.lock = threading.Lock()
        self._etag: str | None = None
        self._bad_etag: str | None = None
        self.damaged: str | None = None  # why the object is not installed (corrupt), else None
        self._missing_logged = False
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self.last_fetch = 0.0

    @property
    def polling(self) -> bool:
        """True once ``start_polling`` ran (a serving replica)."""
        return self._poller is not None

    def fetch(self) -> None:
        """Conditional GET of the object; hand it to ``on_change`` when it changed and parses."""
        with self.lock:
            self.last_fetch = time.monotonic()
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
                        self._log.error("%s %s disappeared; keeping the last good copy", self._what, self.path)
                        self._missing_logged = True
                    return
                raise
            with reply["Body"] as body:
                data = body.read()
            etag = str(reply["ETag"])
            self._missing_logged = False
            try:
                doc = self._decoder.decode(data)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
                if etag != self._bad_etag:
                    self.damaged = f"{self._what} {self.path} is corrupt ({exc}); still serving the last good copy"
                    self._log.critical("%s", self.damaged)
                    self._bad_etag = etag
                return
            self.damaged = None
            self._on_change(doc)
            self._etag = etag

    def start_polling(self, name: str) -> None:
        """Start the background poller (servers); idempotent."""
        if self._poller is not None:
            return
        self._poller = threading.Thread(target=self._poll_loop, name=name, daemon=True)
        self._poller.start()

    def stop_polling(self) -> None:
        """Stop the poller (tests, shutdown)."""
        self._stop.set()

    def _poll_loop(self) -> None:
        failures = 0
        while not self._stop.wait(self._poll_seconds):
            try:
                self.fetch()
                failures = 0
            except Exception as exc:  # keep serving the last good copy; never die
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    self._log.warning("cannot poll the %s (%s failures): %s", self._what, failures, exc)

    def edit(self, change: Callable[[D], T], corrupt: Callable[[str], Exception]) -> T:
        """Read, change and conditionally write the document; retried when another writer won.

        A corrupt object raises ``corrupt(message)`` and is never written over.
        """
        for attempt in range(_EDIT_ATTEMPTS):
            try:
                reply = self._client.get_object(Bucket=self._bucket.name, Key=self.key)
            except ClientError as exc:
                if not is_not_found(exc):
                    raise
                etag, doc = None, self._type()
            else:
                with reply["Body"] as body:
                    data = body.read()
                etag = str(reply["ETag"])
                try:
                    doc = self._decoder.decode(data)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    raise corrupt(f"{self.path} is corrupt ({exc}); fix or restore it first") from exc
            result = change(doc)
            cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                put = self._client.put_object(
                    Bucket=self._bucket.name, Key=self.key, Body=self._encoder.encode(doc),
                    ContentType="application/json", **cond,
                )
            except ClientError as exc:
                if is_conflict(exc):
                    time.sleep(min(0.2, 0.01 * (attempt + 1)))
                    continue
                raise
            with self.lock:
                self._on_change(doc)
                self._etag = str(put["ETag"])
            return result
        raise corrupt(f"the {self._what} keeps changing under us; try again")
