"""Persisted OAuth state: what the authorization server keeps, in the connector's state.

Everything the authorization server must remember across a restart lives in
``CONNECTOR_STATE_DIR`` or, with ``CONNECTOR_STATE_URL``, in a bucket: client
registrations, refresh-token families (only hashes of our tokens), each user's chosen
brain, and the identity provider's renewal secrets, the latter sealed with AES-256-GCM
under the state key. With neither everything stays in memory (and a restart signs
everyone out, which is said at start-up).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.docstore import DirectoryStore, DocumentStore, open_document_store
from common.files import is_temporary
from connector.oauth.client_files import ClientDocs
from connector.state.collection import DocCollection
from connector.state.files import ensure_private_dir
from connector.state.memory import MemoryStore
from connector.state.once import OnceDocs
from connector.state.sealed import SealedDocs
from connector.state.sealing import SecretBox

log = logging.getLogger("connector.oauth.state")

# How stale a replica's copies of the revocations and of the chosen brains may be with the state
# in a bucket: both are read on every tool call, from memory, refreshed in the background by a
# conditional GET this often (docs/replicas.md). A request to S3 on every call would cost more
# than the whole call (~20 ms on a loaded machine).
REVOCATIONS_FRESH_S = 0.5
BRAINS_FRESH_S = 0.5
# Pruning passes read every document of a kind: rarer over a bucket than on a directory.
BUCKET_PRUNE_EVERY_S = 300.0
PRUNE_EVERY_S = 30.0
STALE_TEMPORARY_S = 3600.0


class OAuthState:
    """The connector's persisted OAuth state.

    ``clients``: client id -> registration (one document each); ``families``: refresh-token family id
    -> family record; ``refresh``: sha256(refresh token) -> token record;
    ``brains``: subject -> chosen brain id; ``revoked``: family id -> until when
    access tokens naming it must be refused; ``once``: markers of sign-ins finished
    (connector/state/once.py). Provider renewal secrets are sealed
    inside family records with ``box``.

    Where it lives: ``docs`` (the state in a bucket, from ``connector.state.open_state``), else
    a ``DirectoryStore`` on ``state_dir`` (files, flock and rename; the same keys as the file
    names of earlier versions, so an existing state directory keeps working), else a
    ``MemoryStore`` in this process: the same code over each. ``sealed`` gives the expiring
    sealed records (codes, web sessions, ...) in the same place.
    """

    def __init__(self, state_dir: Path | None, state_key: bytes, *, docs: DocumentStore | None = None) -> None:
        self.key = state_key
        self.box = SecretBox(state_key)
        # Sealed records and once-markers are short-lived: on a directory they are written
        # without fsync (a crash forgets a sign-in in flight, nothing more).
        volatile: DocumentStore
        in_bucket = docs is not None
        if docs is not None:
            volatile, prune_every_s = docs, BUCKET_PRUNE_EVERY_S
        elif state_dir is not None:
            ensure_private_dir(state_dir)
            self._remove_stale_temporaries(state_dir)
            docs, volatile = open_document_store(state_dir), open_document_store(state_dir, fsync=False)
            prune_every_s = PRUNE_EVERY_S
        else:
            docs = volatile = MemoryStore()
            prune_every_s = PRUNE_EVERY_S
        self.docs = docs
        self._volatile = volatile
        self._prune_every_s = prune_every_s
        self._persistent = state_dir is not None or not isinstance(docs, MemoryStore)
        # A file can be damaged in place: keep a copy of the last good records next to it.
        good_copy = isinstance(docs, DirectoryStore)
        self.clients = ClientDocs(docs, "clients")
        moved = self.clients.import_collection("clients.json")
        if moved:
            log.info("moved %d registered clients from clients.json to clients/", moved)
        self.families = DocCollection(docs, "families.json", good_copy=good_copy)
        self.refresh = DocCollection(docs, "refresh.json", good_copy=good_copy)
        # Read on every tool call: from memory with a bucket; a directory or memory answers
        # "unchanged?" with one stat or one lookup, so those are read through.
        self.brains = DocCollection(docs, "brains.json", fresh_s=BRAINS_FRESH_S if in_bucket else 0.0,
                                    good_copy=good_copy)
        # A missing revocation list must not mean "nothing revoked": it falls back on its good
        # copy (kept in a bucket too).
        self.revoked = DocCollection(docs, "revoked.json", fresh_s=REVOCATIONS_FRESH_S if in_bucket else 0.0,
                                     keep_when_missing=True)
        self.once = OnceDocs(volatile, "once", prune_every_s=prune_every_s)

    def sealed(self, place: str, kind: str, *, ttl_s: float, capacity: int,
               clock: Callable[[], float] = time.time) -> SealedDocs:
        """Expiring sealed records of ``kind`` kept under ``place`` (a key prefix) in this state."""
        return SealedDocs(self._volatile, place, self.box, kind, ttl_s=ttl_s, capacity=capacity, clock=clock,
                          prune_every_s=self._prune_every_s)

    @property
    def persistent(self) -> bool:
        """True when the state survives a restart."""
        return self._persistent

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
        """Remove the temporary files a crash between write and rename left beside the collections
        and the client documents (old enough that no replica is still writing them)."""
        stale_before = time.time() - STALE_TEMPORARY_S
        for directory in (state_dir, *state_dir.glob("clients/*")):
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if is_temporary(entry.name) and entry.stat(follow_symlinks=False).st_mtime < stale_before:
                            os.unlink(entry.path)
            except OSError as exc:
                log.warning("could not remove stale temporary files in %s: %s", directory.name, exc)
