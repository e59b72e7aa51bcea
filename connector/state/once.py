"""What may happen only once, on every replica: a sign-in finished.

``OnceDocs.claim(value)`` is True for the first caller only: the claim creates the marker
``<prefix>/<sha256 of value>`` in the state's ``DocumentStore`` if absent (``O_EXCL`` link
in a directory, ``If-None-Match: *`` on S3), which exactly one replica wins, without a lock.
The marker is named by the hash (never the value itself), holds when it was made, and a
background pass removes markers older than ``keep_s`` (which must outlast whatever the claim
protects: a pending sign-in lives 10 minutes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable

from common.docstore import DocumentStore

log = logging.getLogger("connector.state.once")

KEEP_S = 600.0


def _name(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class OnceDocs:
    """First-claim-wins markers in ``docs`` under ``prefix``."""

    def __init__(self, docs: DocumentStore, prefix: str, *, keep_s: float = KEEP_S,
                 clock: Callable[[], float] = time.time, prune_every_s: float = 300.0) -> None:
        self._docs = docs
        self._prefix = prefix.rstrip("/") + "/"
        self._keep_s = keep_s
        self._clock = clock
        self._prune_every_s = prune_every_s
        self._lock = threading.Lock()
        self._pruned_at = 0.0
        self._pruning = False

    def claim(self, value: str) -> bool:
        """True when ``value`` had not been claimed by anyone; it is now."""
        now = self._clock()
        created = self._docs.create(self._prefix + _name(value), json.dumps({"t": now}).encode("ascii"))
        self._maybe_prune(now)
        return created is not None

    def _maybe_prune(self, now: float) -> None:
        with self._lock:
            if self._pruning or now - self._pruned_at < self._prune_every_s:
                return
            self._pruned_at, self._pruning = now, True
        threading.Thread(target=self._prune, name="prune-once", daemon=True).start()

    def _prune(self) -> None:
        """Remove markers older than ``keep_s`` (what they protect has expired by then)."""
        try:
            cutoff = self._clock() - self._keep_s
            for key in self._docs.list(self._prefix):
                document = self._docs.get(key)
                try:
                    made = float(json.loads(document.data)["t"]) if document is not None else None
                except (ValueError, KeyError, TypeError):
                    made = float("-inf")  # not ours: unreadable markers go too
                if made is not None and made < cutoff:
                    self._docs.delete(key)
        except Exception as exc:  # noqa: BLE001 - a failed pass is retried by the next
            log.warning("could not prune %s: %s", self._prefix, exc)
        finally:
            with self._lock:
                self._pruning = False
