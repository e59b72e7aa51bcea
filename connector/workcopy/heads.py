"""Brain heads: a small file per brain that changes whenever a process pushes a new version.

Each worker process (`serve --workers N`), and each replica on a shared state
directory, keeps working copies of its own. Without a signal, a clean copy is
only re-checked with the store once the freshness interval has passed, so a user
who memorizes through one worker and recalls through another could miss the
memory for up to two minutes. So every successful push *publishes* the brain's
head: a fresh random token in ``CONNECTOR_STATE_DIR/heads/<hash of the brain id>``
(no fsync: after a crash the worst case is one conditional download too many). Before serving a clean copy, a process reads the
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

import fcntl
import hashlib
import logging
import os
import secrets
from pathlib import Path

from connector.state.files import ensure_private_dir

log = logging.getLogger("connector.workcopy.heads")


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
            ensure_private_dir(self.directory)
            directory = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fcntl.flock(directory, fcntl.LOCK_EX)  # one publisher at a time, across processes
                before = self.read(brain_id)
                # Written in place (a temporary file and a rename cost ~10x more here): a reader
                # catching the write half done sees a token that matches nothing, so it asks the
                # store once more, which is always safe.
                head = os.open(self._path(brain_id), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    os.pwrite(head, token.encode("ascii"), 0)
                    os.ftruncate(head, len(token))
                finally:
                    os.close(head)
            finally:
                os.close(directory)  # drops the lock
        except (OSError, RuntimeError) as exc:  # RuntimeError: a state directory others may write
            log.warning("could not publish a brain head; other workers see the change later", extra={"error": type(exc).__name__})
            return None
        return token if before is not None and before == seen else None
