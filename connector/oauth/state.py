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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.docstore import DocumentStore
from connector.oauth.client_files import ClientDocs, ClientFiles
from connector.state.collection import DocCollection, JsonCollection
from connector.state.files import ensure_private_dir
from connector.state.once import OnceDocs, OnceMarkers
from connector.state.sealed import SealedDocs, SealedRecords
from connector.state.sealing import SecretBox

log = logging.getLogger("connector.oauth.state")

# How stale a replica's copies of the revocations and of the chosen brains may be with the state
# in a bucket: both are read on every tool call, from memory, refreshed in the background by a
# conditional GET this often (docs/replicas.md). A request to S3 on every call would cost more
# than the whole call (~20 ms on a loaded machine).
REVOCATIONS_FRESH_S = 0.5
BRAINS_FRESH_S = 0.5
# Pruning passes over a bucket read every document of a kind: rarer than on a directory.
BUCKET_PRUNE_EVERY_S = 300.0


class OAuthState:
    """The connector's persisted OAuth state.

    ``clients``: client id -> registration (one file each); ``families``: refresh-token family id
    -> family record; ``refresh``: sha256(refresh token) -> token record;
    ``brains``: subject -> chosen brain id; ``revoked``: family id -> until when
    access tokens naming it must be refused; ``once``: markers of sign-ins finished
    (connector/state/once.py). Provider renewal secrets are sealed
    inside family records with ``box``.

    Where it lives: ``docs`` (the state in a bucket, from ``connector.state.open_state``), else
    ``state_dir`` (files, flock and rename), else this process's memory. ``sealed`` gives the
    expiring sealed records (codes, web sessions, ...) in the same place.
    """

    def __init__(self, state_dir: Path | None, state_key: bytes, *, docs: DocumentStore | None = None) -> None:
        self.state_dir = None if docs is not None else state_dir
        self.docs = docs
        self.key = state_key
        self.box = SecretBox(state_key)
        self.clients: ClientFiles | ClientDocs
        self.families: JsonCollection | DocCollection
        self.refresh: JsonCollection | DocCollection
        self.brains: JsonCollection | DocCollection
        self.revoked: JsonCollection | DocCollection
        self.once: OnceMarkers | OnceDocs
        if docs is not None:
            self.clients = ClientDocs(docs, "clients")
            self.families = DocCollection(docs, "families.json")
            self.refresh = DocCollection(docs, "refresh.json")
            self.brains = DocCollection(docs, "brains.json", fresh_s=BRAINS_FRESH_S)
            self.revoked = DocCollection(docs, "revoked.json", fresh_s=REVOCATIONS_FRESH_S)
            self.once = OnceDocs(docs, "once", prune_every_s=BUCKET_PRUNE_EVERY_S)
            return
        state_dir = self.state_dir
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

    def sealed(self, place: str, kind: str, *, ttl_s: float, capacity: int,
               clock: Callable[[], float] = time.time) -> SealedRecords | SealedDocs:
        """Expiring sealed records of ``kind`` kept at ``place`` (a directory name) in this state."""
        if self.docs is not None:
            return SealedDocs(self.docs, place, self.box, kind, ttl_s=ttl_s, capacity=capacity, clock=clock,
                              prune_every_s=BUCKET_PRUNE_EVERY_S)
        directory = self.state_dir / place if self.state_dir is not None else None
        return SealedRecords(directory, self.box, kind, ttl_s=ttl_s, capacity=capacity, clock=clock)

    @property
    def persistent(self) -> bool:
        """True when the state survives a restart."""
        return self.state_dir is not None or self.docs is not None

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
