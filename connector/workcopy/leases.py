"""Leases on shared documents: which process holds a held-write journal file, across replicas.

A lease is a small JSON document beside the one it guards (``<name>.claim``), made
with ``create`` (create-if-absent: of N processes at most one gets it) and carrying
its holder and an expiry in wall-clock seconds. The holder renews it (``replace``
on the version it wrote) while it is alive; a lease whose expiry has passed belongs
to a dead or stuck process and is taken over with ``replace`` on the version read,
so of N processes trying, exactly one does.

A holder on this very host (same boot, host name and PID namespace) is known dead
at once when its process is gone (or its PID now names another process): that is
what ``flock`` gave on a shared directory, and what a restart on one machine needs.
A holder on another host is known dead only when its lease has expired, so clocks
must agree to well within the lease (NTP does); a holder that stalls longer than
the lease (paused VM, clock jump) may lose its claim: it notices at its next renewal
and logs it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.docstore import DocumentStore, DocumentStoreError

log = logging.getLogger("connector.workcopy.leases")

DEFAULT_LEASE_S = 30.0


def _process_start(pid: int) -> str | None:
    """The start time (clock ticks since boot) of process ``pid``, None when there is none (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None  # a killed process not yet reaped by its parent holds nothing
    return fields[19] if len(fields) > 19 else None


def _host_id() -> str:
    """This host as its processes see it: boot, host name and PID namespace (hashed)."""
    parts = [socket.gethostname()]
    for source in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            parts.append(os.readlink(source) if source.endswith("/pid") else Path(source).read_text().strip())
        except OSError:
            parts.append("?")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: a process (host, pid, start time) and a random token of its own."""

    token: str
    host: str
    pid: int
    start: str | None

    @classmethod
    def this_process(cls) -> Holder:
        """A holder for the calling process (one per lease keeper)."""
        pid = os.getpid()
        return cls(secrets.token_hex(16), _host_id(), pid, _process_start(pid))

    def gone(self) -> bool:
        """Whether this holder is a process of this host that no longer runs (False when unknown)."""
        if self.host != _HOST or self.start is None:
            return False  # another host, or no /proc to tell: only the lease's expiry says
        return _process_start(self.pid) != self.start


_HOST = _host_id()


class LeaseKeeper:
    """The leases this process holds in ``store``, renewed by `renew`; ``lease_s`` long."""

    def __init__(self, store: DocumentStore, lease_s: float = DEFAULT_LEASE_S, *, clock: Callable[[], float] = time.time,
                 holder: Holder | None = None) -> None:
        self.store = store
        self.lease_s = lease_s
        self._clock = clock
        self.holder = holder or Holder.this_process()
        self._held: dict[str, tuple[str, float]] = {}  # key -> (version, expiry written)

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def _document(self) -> bytes:
        holder = self.holder
        return json.dumps({"token": holder.token, "host": holder.host, "pid": holder.pid, "start": holder.start,
                           "expires": self._clock() + self.lease_s}, separators=(",", ":")).encode()

    def acquire(self, key: str) -> bool:
        """Take the lease ``key``: create it, or take it over from a dead or expired holder.

        False when a live holder has it. Raises DocumentStoreError when the store fails.
        """
        if key in self._held:
            return True
        for _ in range(3):
            data = self._document()
            version = self.store.create(key, data)
            if version is not None:
                self._held[key] = (version, self._clock() + self.lease_s)
                return True
            current = self.store.get(key)
            if current is None:
                continue  # released meanwhile: create again
            if not _expired(current.data, self._clock()):
                return False
            version = self.store.replace(key, data, current.version)
            if version is None:
                return False  # another process took it over first
            log.info("took over the lease of a stopped process", extra={"lease": key})
            self._held[key] = (version, self._clock() + self.lease_s)
            return True
        return False

    def renew(self) -> list[str]:
        """Renew the leases past half their time; returns those lost to another process (dropped)."""
        lost: list[str] = []
        now = self._clock()
        for key, (version, expires) in list(self._held.items()):
            if expires - now > self.lease_s / 2:
                continue
            try:
                renewed = self.store.replace(key, self._document(), version)
            except DocumentStoreError as exc:
                log.warning("could not renew a lease; trying again at the next pass", extra={"lease": key, "error": str(exc)})
                continue
            if renewed is None:
                log.error("a lease was taken over by another process (this one stalled past it)", extra={"lease": key})
                del self._held[key]
                lost.append(key)
            else:
                self._held[key] = (renewed, now + self.lease_s)
        return lost

    def release(self, key: str) -> None:
        """Give the lease ``key`` up (its document is deleted). Raises DocumentStoreError when the store fails."""
        if self._held.pop(key, None) is not None:
            self.store.delete(key)

    def forget(self, key: str) -> None:
        """Stop holding ``key`` without deleting it (its document may still be needed)."""
        self._held.pop(key, None)


def _expired(data: bytes, now: float) -> bool:
    """Whether a lease document's holder is gone: expired, or a dead process of this host (or unreadable)."""
    try:
        document = json.loads(data)
        holder = Holder(str(document["token"]), str(document["host"]), int(document["pid"]), document.get("start"))
        expires = float(document["expires"])
    except (ValueError, KeyError, TypeError):
        return True  # a damaged lease guards nothing
    return now >= expires or holder.gone()
