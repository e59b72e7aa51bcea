"""Brain heads: a small file per brain that changes whenever a process pushes a new version.

Each worker process (`serve --workers N`), and each replica on a shared state
directory, keeps working copies of its own. Without a signal, a clean copy is
only re-checked with the store once the freshness interval has passed, so a user
who memorizes through one worker and recalls through another could miss the
memory for up to two minutes. So every successful push *publishes* the brain's
head: a fresh random token in ``CONNECTOR_STATE_DIR/heads/<hash of the brain id>``
(temporary file and rename; no fsync: after a crash the worst case is one
conditional download too many). Before serving a clean copy, a process reads the
token (one small read, a few microseconds) and compares it with the token it saw
before the copy last matched the store; when they differ it asks the store with a
conditional download (a 304 when nothing is new).

The token says "something changed", never what: the truth comes from the store,
so two pushes publishing in the other order cannot leave a copy stale. The one
shortcut is for the pushing copy itself: it takes its own new token as seen only
when the token it replaced is the one it had seen (checked under a lock), i.e.
when no other push was published meanwhile; otherwise its next call asks the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from common.files import write_atomic
from connector.oauth.state import ensure_private_dir

log = logging.getLogger("connector.workcopy.heads")

_LOCK_NAME = ".lock"


class BrainHeads:
    """The heads of every brain, one small file each in ``directory`` (shared by processes)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, brain_id: str) -> Path:
        # Hashed: file names say nothing about which brains exist.
        return self.directory / hashlib.sha256(brain_id.encode("utf-8")).hexdigest()[:32]

    def read(self, brain_id: str) -> str | None:
        """The brain's current token ("" when none was published yet); None when it cannot be read."""
        try:
            with open(self._path(brain_id), "rb") as handle:
                return handle.read(64).decode("ascii", "replace").strip()
        except FileNotFoundError:
            return ""
        except OSError:
            return None

    def publish(self, brain_id: str, seen: str | None) -> str | None:
        """Publish a new token for ``brain_id`` (after a push the store accepted).

        Returns the new token when the one it replaced is ``seen`` (the publisher's copy
        missed nothing published meanwhile), else None. Never raises: a head that cannot be
        written only means other processes notice the change when their interval passes.
        """
        token = secrets.token_hex(16)
        try:
            with self._locked():
                before = self.read(brain_id)
                write_atomic(self._path(brain_id), token.encode("ascii"), fsync=False)
        except (OSError, RuntimeError) as exc:  # RuntimeError: a state directory others may write
            log.warning("could not publish a brain head; other workers see the change later", extra={"error": type(exc).__name__})
            return None
        return token if before is not None and before == seen else None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One publisher at a time across processes (held for microseconds)."""
        ensure_private_dir(self.directory)
        fd = os.open(self.directory / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
