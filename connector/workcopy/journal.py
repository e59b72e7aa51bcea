"""The held-write journal: writes the store has not accepted yet, kept in the shared state.

When a push fails (store down, sign-in expired) the copy's pending writes are
held in memory and retried. The tool tells the user the write is held; to keep
that promise through a restart or a crash, every held copy is written to the
connector's state (`connector.state.open_state`: the state directory, or S3 with
``CONNECTOR_STATE_URL``), one document per copy, ``held/<name>.held``, before the
tool answers: the pending operations (with the ids they drew), the brain they
belong to, the store checksum they were based on, and the account that wrote them
(its store credential included, so the writes can be pushed at start-up). The
document is sealed with AES-256-GCM under the state key (`SecretBox`, bound to its
name) and written with the store's durable write (directory: temporary file,
fsync, rename; S3: the PUT has succeeded), so a held write is acknowledged only
once it is stored. A document is removed once its writes are pushed (or refused
for good). At start-up the manager reads every document back and replays the
writes on the store's current brain, as after a lost race (412).

A document that cannot be opened (another state key, altered, unreadable) is
logged and left where it is, untouched: it may be recovered with the right key.

Several processes share the state (`serve --workers N`, replicas). Each document
is claimed by exactly one of them with a lease, ``held/<name>.claim``
(`leases.py`): created before the document is first written, renewed on every
maintenance pass while the process lives, deleted after the document. A process
reading the journal back takes only documents whose lease is free, expired or held
by a dead process of its own host (`WorkingCopyManager.recover`, every maintenance
pass), taking the lease over with a conditional replace, so a held write is
replayed by one process, never two, also after a SIGKILL.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from common.docstore import DocumentStore, DocumentStoreError
from connector.engine.kinds import operation_from_dict
from connector.state.sealing import SecretBox
from connector.workcopy.leases import DEFAULT_LEASE_S, LeaseKeeper
from connector.workcopy.model import Account, PendingWrite

log = logging.getLogger("connector.workcopy.journal")

_PREFIX = "held/"
_SUFFIX = ".held"
_CLAIM_SUFFIX = ".claim"
_VERSION = 1


class JournalError(Exception):
    """A copy's held writes could not be stored (they are in memory only)."""


@dataclass
class JournalEntry:
    """One copy's held writes as read back from the state."""

    name: str
    account: Account
    brain_id: str | None
    brain_name: str
    base_checksum: str | None
    pending: list[PendingWrite]


def new_entry_name() -> str:
    """A fresh document name for a copy that starts holding writes (random: names reveal nothing)."""
    return secrets.token_hex(16)


def _document_key(name: str) -> str:
    return _PREFIX + name + _SUFFIX


def _claim_key(name: str) -> str:
    return _PREFIX + name + _CLAIM_SUFFIX


class HeldWriteJournal:
    """Held writes of every copy, one sealed document each under ``held/`` in ``state``."""

    def __init__(self, state: DocumentStore, state_key: bytes, *, lease_s: float = DEFAULT_LEASE_S) -> None:
        self.state = state
        self._box = SecretBox(state_key)
        self._leases = LeaseKeeper(state, lease_s)
        # Documents that would not open (logged once, left alone, not claimed again).
        self._unreadable: set[str] = set()

    def claim(self, name: str) -> bool:
        """Hold the document ``name`` for this process (until `remove`); False when a live process holds it. Blocking."""
        try:
            return self._leases.acquire(_claim_key(name))
        except (DocumentStoreError, ValueError, OSError):
            return False

    def _context(self, name: str) -> str:
        # Binds a sealed document to its name: one copied over another's name does not open.
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
        """Store (replace) the document ``name`` durably, claiming it first; raises JournalError when it cannot.

        Blocking (fsync, or an S3 PUT): call it from a worker thread.
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
            if not self._leases.acquire(_claim_key(name)):  # never: names are random, ours stay claimed
                raise JournalError("the held-write journal document is held by another process")
            self.state.put(_document_key(name), sealed.encode("ascii"))
        except JournalError:
            raise
        except Exception as exc:
            raise JournalError(f"the held-write journal could not be written ({type(exc).__name__})") from None

    def remove(self, name: str) -> None:
        """Delete the document ``name`` (its writes were pushed or dropped) and let go of it; missing is fine. Blocking."""
        try:
            self.state.delete(_document_key(name))
        except (DocumentStoreError, OSError) as exc:
            log.error("could not remove a held-write journal document", extra={"file": name, "error": type(exc).__name__})
            return  # still held: another process must not replay what this one holds
        try:
            self._leases.release(_claim_key(name))
        except (DocumentStoreError, OSError):
            # Its document is gone: a claim left behind guards nothing and is cleared by `load`.
            self._leases.forget(_claim_key(name))

    def load(self) -> list[JournalEntry]:
        """Every document no live process holds that opens with this key, now held by this one. Blocking.

        Also renews this process's leases. The others are left alone: documents a live
        process holds, and documents that do not open (logged once). Raises
        DocumentStoreError when the state cannot be listed.
        """
        self._leases.renew()
        keys = set(self.state.list(_PREFIX))
        entries: list[JournalEntry] = []
        for key in sorted(keys):
            if not key.endswith(_SUFFIX):
                continue
            name = key[len(_PREFIX) : -len(_SUFFIX)]
            if _claim_key(name) in self._leases or name in self._unreadable or not self.claim(name):
                continue
            entry = self._read(name)
            if entry is None:
                self._unreadable.add(name)
                self._release(name)
            elif entry == "gone":  # pushed and removed by its holder just before we claimed it
                self._release(name)
            else:
                entries.append(entry)
        for key in keys:  # a process died between removing a document and its claim
            if key.endswith(_CLAIM_SUFFIX):
                name = key[len(_PREFIX) : -len(_CLAIM_SUFFIX)]
                if _document_key(name) not in keys and key not in self._leases and self.claim(name):
                    if self.state.get(_document_key(name)) is None:
                        self._release(name)
                    else:
                        self._leases.release(key)  # written meanwhile: its writer's; our next pass decides
        return entries

    def _release(self, name: str) -> None:
        try:
            self._leases.release(_claim_key(name))
        except (DocumentStoreError, OSError):
            self._leases.forget(_claim_key(name))

    def _read(self, name: str) -> JournalEntry | str | None:
        try:
            found = self.state.get(_document_key(name))
            if found is None:
                return "gone"
            sealed = found.data.decode("ascii")
        except (DocumentStoreError, OSError, UnicodeError) as exc:
            log.error(
                "a held-write journal document could not be read; it is left as it is",
                extra={"file": name, "error": type(exc).__name__},
            )
            return None
        opened = self._box.open(sealed.strip(), self._context(name))
        if opened is None:
            log.error(
                "a held-write journal document does not open with this connector's state key (was "
                "CONNECTOR_STATE_KEY or state.key changed?) or was altered; its writes are not "
                "replayed and the document is left as it is",
                extra={"file": name},
            )
            return None
        try:
            return _entry(name, json.loads(opened))
        except Exception as exc:  # a sealed document of a future or broken format: keep it, say so
            log.error(
                "a held-write journal document could not be understood; it is left as it is",
                extra={"file": name, "error": type(exc).__name__},
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
