"""Small expiring records that every replica sees: one sealed file each in the state directory.

Used for what a client's next request needs wherever it lands: authorization
codes, and the web app's sessions, sign-ins at the issuer and checked imports. A record lives in ``<directory>/<name>``
where the name is the SHA-256 of its kind and key (the key itself, e.g. a cookie
value, is never written), sealed with AES-256-GCM under the state key and bound
to that name, written atomically with mode 0600. A lookup reads the file, so a
record deleted at one replica (a sign-out) is gone at every replica at once.
``take`` hands a record out once across replicas: it renames the file to a
unique name first, and the file system lets exactly one rename succeed.

Every record expires at most ``ttl_s`` after it was written, so files older
than that are removed by whichever replica next writes (at most every 30 s);
beyond ``capacity`` files the oldest go first. Without a directory the records
live in a bounded dict in this process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.files import write_atomic
from connector.state.files import ensure_private_dir
from connector.state.sealing import SecretBox

log = logging.getLogger("connector.oauth.sealed_files")

_PRUNE_EVERY_S = 30.0
_TAKEN = ".taken"
_MAX_FILE_BYTES = 64 * 1024 * 1024


class SealedRecords:
    """Records of one ``kind`` by key, each with its own expiry; shared through ``directory``."""

    def __init__(self, directory: Path | None, box: SecretBox, kind: str, *, ttl_s: float, capacity: int,
                 clock: Callable[[], float] = time.time) -> None:
        self._dir = directory
        self._box = box
        self._kind = kind
        self._ttl_s = ttl_s
        self._capacity = capacity
        self._clock = clock
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._pruned_at = 0.0
        self._written_since_prune = 0
        if directory is not None:
            ensure_private_dir(directory)

    def _name(self, key: str) -> str:
        return hashlib.sha256(f"{self._kind}\0{key}".encode()).hexdigest()

    def put(self, key: str, record: dict[str, Any], expires_at: float) -> None:
        """Store ``record`` under ``key`` until ``expires_at`` (at most ``ttl_s`` from now)."""
        now = self._clock()
        expires_at = min(expires_at, now + self._ttl_s)
        name = self._name(key)
        if self._dir is None:
            with self._lock:
                self._memory[name] = (expires_at, record)
                self._memory.move_to_end(name)
                while len(self._memory) > self._capacity:
                    self._memory.popitem(last=False)
            return
        self._prune(now)
        sealed = self._box.seal(json.dumps({"e": expires_at, "r": record}, separators=(",", ":")), self._context(name))
        write_atomic(self._dir / name, sealed.encode("ascii"), fsync=False)

    def get(self, key: str) -> dict[str, Any] | None:
        """The live record under ``key``, else None (unknown, expired, deleted, or not ours)."""
        name = self._name(key)
        if self._dir is None:
            with self._lock:
                held = self._memory.get(name)
            return self._live(held, name)
        return self._live(self._read(self._dir / name, name), name)

    def take(self, key: str) -> dict[str, Any] | None:
        """The live record under ``key``, removed: of two replicas taking it at once, one gets it."""
        name = self._name(key)
        if self._dir is None:
            with self._lock:
                held = self._memory.pop(name, None)
            return self._live(held, name)
        claimed = self._dir / f"{name}.{secrets.token_hex(8)}{_TAKEN}"
        try:
            os.rename(self._dir / name, claimed)
        except FileNotFoundError:
            return None
        try:
            held = self._read(claimed, name)
        finally:
            claimed.unlink(missing_ok=True)
        # Expired: nothing to remove (the name may already hold a newer record).
        return held[1] if held is not None and held[0] > self._clock() else None

    def delete(self, key: str) -> bool:
        """Remove the record under ``key`` everywhere; True when there was one."""
        name = self._name(key)
        if self._dir is None:
            with self._lock:
                return self._memory.pop(name, None) is not None
        try:
            os.unlink(self._dir / name)
        except FileNotFoundError:
            return False
        return True

    def __len__(self) -> int:
        if self._dir is None:
            return len(self._memory)
        with os.scandir(self._dir) as entries:
            return sum(1 for entry in entries if not entry.name.startswith("."))

    # ----- internals ---------------------------------------------------------------

    def _context(self, name: str) -> str:
        # Binds a sealed file to its kind and name: a file copied over another's name does not open.
        return f"{self._kind}/{name}"

    def _live(self, held: tuple[float, dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
        if held is None:
            return None
        expires_at, record = held
        if expires_at <= self._clock():
            if self._dir is None:
                with self._lock:
                    self._memory.pop(name, None)
            else:
                (self._dir / name).unlink(missing_ok=True)
            return None
        return record

    def _read(self, path: Path, name: str) -> tuple[float, dict[str, Any]] | None:
        try:
            with open(path, "rb") as handle:
                data = handle.read(_MAX_FILE_BYTES + 1)
        except OSError:
            return None
        opened = self._box.open(data.decode("ascii", errors="replace").strip(), self._context(name))
        if opened is None:
            return None
        try:
            document = json.loads(opened)
            return float(document["e"]), dict(document["r"])
        except (ValueError, KeyError, TypeError):
            return None

    def _prune(self, now: float) -> None:
        """Drop files past ``ttl_s`` (and the oldest beyond ``capacity``); at most every 30 s
        unless this process alone wrote ``capacity`` records since."""
        assert self._dir is not None
        self._written_since_prune += 1
        if now - self._pruned_at < _PRUNE_EVERY_S and self._written_since_prune < self._capacity:
            return
        self._pruned_at, self._written_since_prune = now, 0
        cutoff = now - self._ttl_s
        kept: list[tuple[float, str]] = []
        try:
            with os.scandir(self._dir) as entries:
                for entry in entries:
                    try:
                        modified = entry.stat(follow_symlinks=False).st_mtime
                        if modified < cutoff:
                            os.unlink(entry.path)
                        elif not entry.name.startswith("."):
                            kept.append((modified, entry.path))
                    except FileNotFoundError:
                        continue  # another replica removed it first
            kept.sort()
            for _, path in kept[: max(0, len(kept) - self._capacity + 1)]:
                Path(path).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("could not prune %s: %s", self._dir, exc)
