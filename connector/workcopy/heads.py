"""Brain heads: a small document per brain that changes whenever a process pushes a new version.

Each worker process (`serve --workers N`) and each replica keeps working copies of
its own. Without a signal, a clean copy is only re-checked with the store once the
freshness interval has passed, so a user who memorizes through one worker and
recalls through another could miss the memory for up to two minutes. So every
successful push *publishes* the brain's head: a fresh random token in the shared
state at ``heads/<hash of the brain id>``. Before serving a clean copy, a process
reads the token and compares it with the token it saw before the copy last matched
the store; when they differ it asks the store with a conditional download (a 304
when nothing is new).

The per-call read is kept cheap by a cache of ``max_age_s``: a token read less than
that long ago is used as it is, so a change published by another process is seen
at most ``max_age_s`` (plus one read) late. Over a state directory the cache is off
(``max_age_s`` 0: a read is a small local file, tens of microseconds); over S3 it is
1 second (`connector.app`), so a warm tool call asks S3 at most once a second per
brain, with a conditional GET (a 304 when the head has not moved).

The token says "something changed", never what: the truth comes from the store,
so two pushes publishing in the other order cannot leave a copy stale. The one
shortcut is for the pushing copy itself: it takes its own new token as seen only
when the token it replaced is the one it had seen (a conditional replace), i.e.
when no other push was published meanwhile; otherwise its next call asks the store.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from common.docstore import UNCHANGED, Document, DocumentStore

log = logging.getLogger("connector.workcopy.heads")

_PREFIX = "heads/"
# How stale a head read over S3 may be (seconds): a warm tool call asks S3 at most this often per brain.
S3_HEAD_MAX_AGE_S = 1.0
_MAX_CACHED = 10_000


class BrainHeads:
    """The heads of every brain, one small document each under ``heads/`` in ``state`` (shared by processes).

    ``max_age_s``: how stale a cached head may be (0: every read asks the state).
    ``inline``: reads that ask the state are cheap enough for the event loop (a local
    directory); otherwise the manager reads in a worker thread.
    """

    def __init__(self, state: DocumentStore, *, max_age_s: float = 0.0, inline: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self.max_age_s = max_age_s
        self.inline = inline
        self._clock = clock
        # brain key -> (token, document version, read at): bounded, least recently read out first.
        self._cache: OrderedDict[str, tuple[str, str | None, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _key(self, brain_id: str) -> str:
        # Hashed: document names say nothing about which brains exist.
        return _PREFIX + hashlib.sha256(brain_id.encode("utf-8")).hexdigest()[:32]

    def cached(self, brain_id: str) -> str | None:
        """The brain's token when a read younger than ``max_age_s`` knows it, else None (no I/O)."""
        if self.max_age_s <= 0:
            return None
        with self._lock:
            found = self._cache.get(self._key(brain_id))
        if found is not None and self._clock() - found[2] < self.max_age_s:
            return found[0]
        return None

    def read(self, brain_id: str) -> str | None:
        """The brain's current token ("" when none was published yet); None when it cannot be read.

        Served from the cache when younger than ``max_age_s``; otherwise asks the state
        (conditionally, when a version is known). Blocking when the state is remote.
        """
        fresh = self.cached(brain_id)
        if fresh is not None:
            return fresh
        key = self._key(brain_id)
        with self._lock:
            known = self._cache.get(key)
        try:
            if known is not None and known[1] is not None and self.max_age_s > 0:
                found = self.state.get_if_changed(key, known[1])
            else:
                found = self.state.get(key)
        except Exception as exc:  # a state that cannot be read only delays noticing a change
            log.warning("could not read a brain head", extra={"error": type(exc).__name__})
            return None
        if found == UNCHANGED:
            assert known is not None
            self._remember(key, known[0], known[1])
            return known[0]
        token = _token(found)
        self._remember(key, token, found.version if found is not None else None)
        return token

    def _remember(self, key: str, token: str, version: str | None) -> None:
        if self.max_age_s <= 0:
            return
        with self._lock:
            self._cache[key] = (token, version, self._clock())
            self._cache.move_to_end(key)
            while len(self._cache) > _MAX_CACHED:
                self._cache.popitem(last=False)

    def publish(self, brain_id: str, seen: str | None) -> str | None:
        """Publish a new token for ``brain_id`` (after a push the store accepted). Blocking.

        Returns the new token when the one it replaced is ``seen`` (the publisher's copy
        missed nothing published meanwhile), else None. Never raises: a head that cannot be
        written only means other processes notice the change when their interval passes.
        """
        token = secrets.token_hex(16)
        key = self._key(brain_id)
        replaced: list[str] = []

        def change(before: bytes | None) -> bytes:
            replaced[:] = [_token_of(before)]
            return token.encode("ascii")

        try:
            self.state.update(key, change)
        except Exception as exc:  # a state others may write, or S3 away: others see the change later
            log.warning("could not publish a brain head; other workers see the change later", extra={"error": type(exc).__name__})
            return None
        self._remember(key, token, None)
        return token if replaced and replaced[0] == seen else None


def _token_of(data: bytes | None) -> str:
    return "" if data is None else data[:64].decode("ascii", "replace").strip()


def _token(found: Document | None) -> str:
    return _token_of(found.data if found is not None else None)
