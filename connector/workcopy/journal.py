"""The held-write journal: writes the store has not accepted yet, kept on disk across restarts.

When a push fails (store down, sign-in expired) the copy's pending writes are
held in memory and retried. The tool tells the user the write is held; to keep
that promise through a restart or a crash, every held copy is written here,
one file per copy under ``CONNECTOR_STATE_DIR/held/``, before the tool answers:
the pending operations (with the ids they drew), the brain they belong to, the
store checksum they were based on, and the account that wrote them (its store
credential included, so the writes can be pushed at start-up). The file is
sealed with AES-256-GCM under the state key (`SecretBox`, bound to the file's
name), written to a temporary file, fsynced, renamed and the directory fsynced;
files are 0600 and the directory 0700. A file is removed once its writes are
pushed (or refused for good). At start-up the manager reads every file back and
replays the writes on the store's current brain, as after a lost race (412).

A file that cannot be opened (another state key, altered, unreadable) is logged
and left where it is, untouched: it may be recovered with the right key.

Several processes may share the directory (`serve --workers N`, replicas on one
state directory). Each file is claimed by exactly one of them: an exclusive
``flock`` on a sibling ``NAME.lock``, taken before the file is first written and
held for as long as the process holds those writes. A process reading the
journal back takes only the files nobody holds, so a held write is replayed by
one process, never two; when a process dies the kernel drops its locks and the
others take its files over on their next pass (`WorkingCopyManager.recover`).
A lock file goes only after its journal file is gone: names are random and
never reused, so a lock path is never unlinked while someone may still need it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from common.files import fsync_dir, write_atomic
from connector.engine.ops import operation_from_dict
from connector.state.files import ensure_private_dir
from connector.state.sealing import SecretBox
from connector.workcopy.model import Account, PendingWrite

log = logging.getLogger("connector.workcopy.journal")

_SUFFIX = ".held"
_LOCK_SUFFIX = ".lock"
_VERSION = 1
# A temporary file older than this was left by a crash between write and rename (a live
# process renames its own within milliseconds; younger ones may be another process's).
_STALE_TEMP_S = 60.0


class JournalError(Exception):
    """A copy's held writes could not be written to disk (they are in memory only)."""


@dataclass
class JournalEntry:
    """One copy's held writes as read back from disk."""

    name: str
    account: Account
    brain_id: str | None
    brain_name: str
    base_checksum: str | None
    pending: list[PendingWrite]


def new_entry_name() -> str:
    """A fresh file name for a copy that starts holding writes (random: names reveal nothing)."""
    return secrets.token_hex(16)


class HeldWriteJournal:
    """Held writes of every copy, one sealed file each, in ``directory``."""

    def __init__(self, directory: Path, state_key: bytes) -> None:
        self.directory = directory
        self._box = SecretBox(state_key)
        # Files this process holds: name -> the open lock file carrying its flock.
        self._claims: dict[str, int] = {}
        # Files that would not open (logged once, left alone, not claimed again).
        self._unreadable: set[str] = set()

    def claim(self, name: str) -> bool:
        """Hold the file ``name`` for this process (until `remove`); False when another process holds it. Blocking."""
        if name in self._claims:
            return True
        ensure_private_dir(self.directory)
        fd = os.open(self.directory / (name + _LOCK_SUFFIX), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._claims[name] = fd
        return True

    def _release(self, name: str, *, gone: bool) -> None:
        """Let go of ``name``; its lock file is deleted only when its journal file is ``gone``."""
        fd = self._claims.pop(name, None)
        if fd is None:
            return
        if gone:
            (self.directory / (name + _LOCK_SUFFIX)).unlink(missing_ok=True)
        os.close(fd)

    def _context(self, name: str) -> str:
        # Binds a sealed file to its name: a file copied over another's name does not open.
        return f"held-writes/{name}"

    def record(
        self,
        name: str,
        account: Account,
        brain_id: str | None,
        brain_name: str,
        base_checksum: str | None,
        pending: list[PendingWrite],
    ) -> None:
        """Write (replace) the file ``name`` durably, claiming it first; raises JournalError when it cannot.

        Blocking (fsync): call it from a worker thread.
        """
        try:
            operations = [{"op": item.op.to_dict(), "at": item.at.isoformat(), "label": item.label} for item in pending]  # type: ignore[attr-defined]
        except AttributeError:
            raise JournalError("an operation cannot be written to the journal") from None
        document = {
            "v": _VERSION,
            "account": {
                "subject": account.subject,
                "credential": account.credential,
                "kind": account.kind,
                "client_name": account.client_name,
            },
            "brain_id": brain_id,
            "brain_name": brain_name,
            "base_checksum": base_checksum,
            "pending": operations,
        }
        sealed = self._box.seal(json.dumps(document, separators=(",", ":")), self._context(name))
        try:
            if not self.claim(name):  # never: names are random, and ours stay claimed while we hold them
                raise JournalError("the held-write journal file is held by another process")
            write_atomic(self.directory / (name + _SUFFIX), sealed.encode("ascii"))
        except JournalError:
            raise
        except Exception as exc:
            raise JournalError(f"the held-write journal could not be written ({type(exc).__name__})") from None

    def remove(self, name: str) -> None:
        """Delete the file ``name`` (its writes were pushed or dropped) and let go of it; missing is fine. Blocking."""
        try:
            (self.directory / (name + _SUFFIX)).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("could not remove a held-write journal file", extra={"file": name, "error": type(exc).__name__})
            return  # still held: another process must not replay what this one holds
        else:
            fsync_dir(self.directory)
        self._release(name, gone=True)

    def load(self) -> list[JournalEntry]:
        """Every file no process holds that opens with this key, now held by this one. Blocking.

        The others are left alone: files another process holds, and files that do not
        open (logged once).
        """
        if not self.directory.is_dir():
            return []
        ensure_private_dir(self.directory)
        now = time.time()
        for leftover in self.directory.glob(".*.tmp"):  # a crash between write and rename
            with contextlib.suppress(OSError):
                if now - leftover.stat().st_mtime > _STALE_TEMP_S:
                    leftover.unlink()
        entries: list[JournalEntry] = []
        for path in sorted(self.directory.glob("*" + _SUFFIX)):
            name = path.name[: -len(_SUFFIX)]
            if name in self._claims or name in self._unreadable or not self.claim(name):
                continue
            if not path.exists():  # pushed and removed by its holder just before we claimed it
                self._release(name, gone=True)
                continue
            entry = self._read(path, name)
            if entry is None:
                self._unreadable.add(name)
                self._release(name, gone=False)
            else:
                entries.append(entry)
        for lock in self.directory.glob("*" + _LOCK_SUFFIX):  # a process died between removing a file and its lock
            name = lock.name[: -len(_LOCK_SUFFIX)]
            if name not in self._claims and not (self.directory / (name + _SUFFIX)).exists() and self.claim(name):
                self._release(name, gone=not (self.directory / (name + _SUFFIX)).exists())
        return entries

    def _read(self, path: Path, name: str) -> JournalEntry | None:
        try:
            sealed = path.read_text(encoding="ascii")
        except (OSError, UnicodeError) as exc:
            log.error(
                "a held-write journal file could not be read; it is left as it is",
                extra={"file": path.name, "error": type(exc).__name__},
            )
            return None
        opened = self._box.open(sealed.strip(), self._context(name))
        if opened is None:
            log.error(
                "a held-write journal file does not open with this connector's state key (was "
                "CONNECTOR_STATE_KEY or state.key changed?) or was altered; its writes are not "
                "replayed and the file is left as it is",
                extra={"file": path.name},
            )
            return None
        try:
            return _entry(name, json.loads(opened))
        except Exception as exc:  # a sealed file of a future or broken format: keep it, say so
            log.error(
                "a held-write journal file could not be understood; it is left as it is",
                extra={"file": path.name, "error": type(exc).__name__},
            )
            return None


def _entry(name: str, document: dict[str, Any]) -> JournalEntry:
    if document.get("v") != _VERSION:
        raise ValueError("unknown journal version")
    who = document["account"]
    account = Account(
        subject=str(who["subject"]),
        credential=str(who["credential"]),
        kind=str(who.get("kind") or "static"),
        client_name=str(who.get("client_name") or ""),
    )
    pending = [
        PendingWrite(op=operation_from_dict(item["op"]), at=datetime.fromisoformat(item["at"]), label=str(item["label"]))
        for item in document["pending"]
    ]
    if not pending:
        raise ValueError("no writes in the file")
    brain_id = document.get("brain_id")
    return JournalEntry(
        name=name,
        account=account,
        brain_id=str(brain_id) if brain_id else None,
        brain_name=str(document.get("brain_name") or "default"),
        base_checksum=document.get("base_checksum") or None,
        pending=pending,
    )
