"""Persisted OAuth state: JSON collections and what the authorization server keeps.

Everything the authorization server must remember across a restart lives in
``CONNECTOR_STATE_DIR``: client registrations, refresh-token families (only
hashes of our tokens), each user's chosen brain, and the identity provider's
renewal secrets, the latter sealed with AES-256-GCM under the state key. With
no state directory everything stays in memory (and a restart signs everyone
out, which is said at start-up).
"""

from __future__ import annotations

import copy
import fcntl
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from common.files import write_atomic
from connector.oauth.client_files import ClientFiles
from connector.oauth.once import OnceMarkers
from connector.state.files import StateError, ensure_private_dir
from connector.state.sealing import SecretBox

log = logging.getLogger("connector.oauth.state")
T = TypeVar("T")

class JsonCollection:
    """A dict of JSON records, written through to one file (0600) after each change.

    Writes are atomic (temporary file, fsync, rename, directory fsync), so a
    crash leaves the old or the new file, never a torn one. Several processes
    may share the file (replicas on one state directory): a change happens
    under an exclusive lock on a sibling ``.lock`` file after re-reading the
    file, and reads pick up another process's change when the file changed.
    Without a path the collection lives in memory only.

    A file damaged from outside (truncated, edited, a disk error) is never read as
    empty, which would revive what it revoked: the last good records stay in use
    (those in memory, or at start-up the ``.last-good`` copy written after every change),
    the file is named in the log and in ``damaged`` (``/health/ready`` says so), and
    the next change writes the good records back. With neither good records nor a
    good copy, start-up refuses (StateError) rather than guess.
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._records: dict[str, Any] = {}
        self._signature: tuple[int, int, int] | None = None
        self.damaged: str | None = None  # why the file could not be read, while it cannot
        self._reload(force=True)

    @property
    def name(self) -> str:
        """The file's name ("" in memory)."""
        return self._path.name if self._path is not None else ""

    @property
    def _good_copy(self) -> Path:
        assert self._path is not None
        return self._path.with_name(self._path.name + ".last-good")

    def _stat_signature(self) -> tuple[int, int, int] | None:
        assert self._path is not None
        try:
            info = self._path.stat()
        except FileNotFoundError:
            return None
        return (info.st_mtime_ns, info.st_size, info.st_ino)

    @staticmethod
    def _parse(path: Path) -> dict[str, Any]:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data

    def _reload(self, force: bool = False) -> None:
        if self._path is None:
            return
        signature = self._stat_signature()
        if not force and signature == self._signature:
            return
        if signature is None:
            self._records, self._signature, self.damaged = {}, None, None
            return
        try:
            self._records, self._signature, self.damaged = self._parse(self._path), signature, None
            return
        except (OSError, ValueError, RecursionError) as exc:
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        self._signature = signature  # reported once per damaged version, not on every read
        if force:  # start-up: nothing in memory yet, so the copy of the last good records
            try:
                self._records = self._parse(self._good_copy)
            except (OSError, ValueError, RecursionError):
                raise StateError(
                    f"cannot read {self._path} ({reason}) and there is no good copy ({self._good_copy.name}): "
                    "restore it from a backup; deleting it forgets what it holds (sign-ins, revocations)"
                ) from None
        self.damaged = reason
        log.error("state file damaged: the last good records stay in use and are written back at the next change",
                  extra={"file": self._path.name, "reason": reason})

    @property
    def records(self) -> dict[str, Any]:
        """The current records (re-read when another process changed the file). Do not mutate."""
        with self._lock:
            self._reload()
            return self._records

    def get(self, key: str) -> Any:
        """The record under ``key`` or None."""
        return self.records.get(key)

    def __len__(self) -> int:
        return len(self.records)

    def mutate(self, change: Callable[[dict[str, Any]], T]) -> T:
        """Apply ``change`` to the latest records and persist the result; returns what ``change`` returned.

        If ``change`` raises, nothing is written.
        """
        with self._lock:
            if self._path is None:
                return change(self._records)
            lock_fd = os.open(self._path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
                self._reload()
                working = copy.deepcopy(self._records)
                result = change(working)
                self._flush(working)
                self._records = working
                self._signature = self._stat_signature()
                if self.damaged is not None:
                    log.warning("state file written back from the last good records", extra={"file": self._path.name})
                    self.damaged = None
                return result
            finally:
                os.close(lock_fd)  # closing releases the lock

    def _flush(self, records: dict[str, Any]) -> None:
        assert self._path is not None
        payload = json.dumps(records, separators=(",", ":"), sort_keys=True).encode("utf-8")
        write_atomic(self._path, payload)
        # The copy a restart falls back on if the file is damaged later (its own inode: a
        # file truncated in place leaves it whole). The file above is the durable one.
        write_atomic(self._good_copy, payload, fsync=False)


class OAuthState:
    """The connector's persisted OAuth state.

    ``clients``: client id -> registration (one file each); ``families``: refresh-token family id
    -> family record; ``refresh``: sha256(refresh token) -> token record;
    ``brains``: subject -> chosen brain id; ``revoked``: family id -> until when
    access tokens naming it must be refused; ``once``: markers of sign-ins finished
    (connector/oauth/once.py). Provider renewal secrets are sealed
    inside family records with ``box``.
    """

    def __init__(self, state_dir: Path | None, state_key: bytes) -> None:
        self.state_dir = state_dir
        self.key = state_key
        self.box = SecretBox(state_key)
        if state_dir is not None:
            ensure_private_dir(state_dir)
            self._remove_stale_temporaries(state_dir)

        def path(name: str) -> Path | None:
            return None if state_dir is None else state_dir / name

        self.clients = ClientFiles(path("clients"))
        old_clients = path("clients.json")
        if old_clients is not None and old_clients.exists():
            moved = self.clients.import_collection(old_clients)
            log.info("moved %d registered clients from clients.json to clients/", moved)
        self.families = JsonCollection(path("families.json"))
        self.refresh = JsonCollection(path("refresh.json"))
        self.brains = JsonCollection(path("brains.json"))
        self.revoked = JsonCollection(path("revoked.json"))
        self.once = OnceMarkers(path("once"))

    @property
    def persistent(self) -> bool:
        """True when the state survives a restart."""
        return self.state_dir is not None

    def damaged(self) -> dict[str, str]:
        """The state files that cannot be read right now (their last good records are in use): name -> why."""
        found = {}
        for collection in (self.families, self.refresh, self.brains, self.revoked):
            collection.records  # noqa: B018 - a read notices a file damaged since the last one
            if collection.damaged is not None:
                found[collection.name] = collection.damaged
        return found

    def get_brain(self, subject: str) -> str | None:
        """The brain id ``subject`` chose with brain_use, or None."""
        value = self.brains.get(subject)
        return value if isinstance(value, str) else None

    def set_brain(self, subject: str, brain_id: str | None) -> None:
        """Remember (or with None, forget) the brain ``subject`` chose."""

        def change(records: dict[str, Any]) -> None:
            if brain_id is None:
                records.pop(subject, None)
            else:
                records[subject] = brain_id

        self.brains.mutate(change)

    @staticmethod
    def _remove_stale_temporaries(state_dir: Path) -> None:
        # A crash between mkstemp and rename leaves ".<name>.xxxx" files behind.
        for leftover in state_dir.glob(".*.json.*"):
            try:
                leftover.unlink()
            except OSError:
                log.warning("could not remove stale temporary file %s", leftover.name)
