"""A small in-memory store speaking contract 1.1 over httpx.MockTransport, with switchable faults.

Only for testing the conformance suite itself: with no fault the suite must pass (core
checks), and each fault must make the checks that guard against it fail.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

import httpx
import multipart

UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
FAULTS = ("foreign-403", "ignore-if-match", "no-challenge", "serve-traversal", "no-empty-guard", "accept-junk", "listing-oldest-last")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Brain:
    id: str
    owner: str
    name: str
    created_at: str
    archive: bytes | None = None
    file_count: int = 0
    synced_at: str | None = None
    snapshots: list[tuple[str, str, bytes]] = field(default_factory=list)

    def record(self) -> dict[str, object]:
        checksum = hashlib.sha256(self.archive).hexdigest() if self.archive is not None else None
        return {"id": self.id, "name": self.name, "size_bytes": len(self.archive or b""), "file_count": self.file_count,
                "checksum": checksum, "last_synced_at": self.synced_at, "created_at": self.created_at}


def _json(status: int, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(body).encode(), headers={"content-type": "application/json", **(headers or {})})


def _error(status: int, text: str, **extra: object) -> httpx.Response:
    return _json(status, {"error": text, **extra})


def _count_files(data: bytes) -> int | None:
    try:
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)), mode="r:") as tar:
            return sum(1 for m in tar.getmembers() if m.isfile())
    except (OSError, EOFError, tarfile.TarError):
        return None


class FakeStore:
    """Users ``token -> user id``; brains in memory; ``fault`` switches one misbehaviour on."""

    def __init__(self, tokens: dict[str, str], fault: str | None = None) -> None:
        self.tokens = tokens
        self.fault = fault
        self.brains: dict[str, Brain] = {}
        self.lock = threading.Lock()
        self.serial = 0

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            with self.lock:
                return self.handle(request)
        return httpx.MockTransport(handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/health":
            return _json(200, {"status": "ok", "contract": "1.1", "capabilities": ["static-token", "conditional-sync"]})
        auth = request.headers.get("authorization", "")
        user = self.tokens.get(auth[7:]) if auth.startswith("Bearer ") else None
        if user is None:
            headers = {} if self.fault == "no-challenge" else {"www-authenticate": "Bearer"}
            return httpx.Response(401, content=b'{"error": "unauthorized"}', headers={"content-type": "application/json", **headers})
        if path == "/auth/me":
            used = sum(len(b.archive or b"") + sum(len(s[2]) for s in b.snapshots) for b in self.brains.values() if b.owner == user)
            return _json(200, {"user": {"id": user, "email": ""}, "storage_used": used})
        if path == "/api/brains":
            if request.method == "POST":
                body = json.loads(request.content) if request.content else {}
                brain = Brain(str(uuid.uuid4()), user, (body or {}).get("name") or "default", _now())
                self.brains[brain.id] = brain
                return _json(201, brain.record())
            mine = [b.record() for b in self.brains.values() if b.owner == user]
            return _json(200, mine[::-1] if self.fault == "listing-oldest-last" else mine)
        match = re.fullmatch(r"/api/brains/([^/]+)(/sync|/versions|/versions/([^/]+)/restore)?", path)
        if not match:
            return _error(404, "no route")
        raw_id, tail, restore_name = match.groups()
        brain = self.brains.get(raw_id.lower()) if UUID_RE.match(raw_id) else None
        if brain is None or brain.owner != user:
            return _error(403 if brain is not None and self.fault == "foreign-403" else 404, "brain not found")
        if tail is None:
            if request.method == "DELETE":
                del self.brains[brain.id]
                return httpx.Response(204)
            return _json(200, brain.record())
        if tail == "/versions":
            listing = [{"version": n, "date": d} for n, d, _ in reversed(brain.snapshots)]
            return _json(200, {"versions": listing, "total": len(listing)})
        current = hashlib.sha256(brain.archive).hexdigest() if brain.archive is not None else None
        if restore_name is not None:
            found = [s for s in brain.snapshots if s[0] == restore_name]
            if not found:
                return _error(404, "no such version")
            if not self._precondition(request, current):
                return _error(412, "precondition failed", current_checksum=current)
            self._replace(brain, found[0][2], _count_files(found[0][2]) or 0)
            return _json(200, {"restored_version": restore_name}, {"etag": f'"{hashlib.sha256(found[0][2]).hexdigest()}"'})
        if request.method == "GET":
            return self._download(request, brain, current)
        return self._upload(request, brain, current)

    def _download(self, request: httpx.Request, brain: Brain, current: str | None) -> httpx.Response:
        version = request.url.params.get("version")
        if version is not None:
            if self.fault == "serve-traversal" and ".." in version:
                return httpx.Response(200, content=b'{"users": "leaked"}')
            found = [s for s in brain.snapshots if s[0] == version]
            if not found:
                return _error(404, "no such version")
            return httpx.Response(200, content=found[0][2], headers={"content-type": "application/gzip"})
        if brain.archive is None:
            return _error(404, "nothing uploaded")
        inm = request.headers.get("if-none-match")
        headers = {"etag": f'"{current}"', "x-checksum": current or ""}
        if inm is not None and (inm.strip() == "*" or f'"{current}"' in inm):
            return httpx.Response(304, headers=headers)
        return httpx.Response(200, content=brain.archive, headers={"content-type": "application/gzip", **headers})

    def _precondition(self, request: httpx.Request, current: str | None) -> bool:
        if self.fault == "ignore-if-match":
            return True
        if_match, if_none = request.headers.get("if-match"), request.headers.get("if-none-match")
        if if_match is not None and not (current is not None and (if_match.strip() == "*" or if_match.strip() == f'"{current}"')):
            return False
        return not (if_none is not None and if_none.strip() == "*" and current is not None)

    def _upload(self, request: httpx.Request, brain: Brain, current: str | None) -> httpx.Response:
        ctype = request.headers.get("content-type", "")
        boundary = multipart.parse_options_header(ctype)[1].get("boundary")
        if not ctype.startswith("multipart/form-data") or not boundary:
            return _error(400, "expected multipart")
        data = None
        for part in multipart.MultipartParser(io.BytesIO(request.content), boundary):
            if part.name == "brain":
                data = part.raw
        if data is None:
            return _error(400, "no brain field")
        count = _count_files(data)
        if count is None:
            if self.fault != "accept-junk":
                return _error(400, "not a tar.gz")
            count = 0
        if not self._precondition(request, current):
            return _error(412, "precondition failed", current_checksum=current)
        force = request.url.params.get("force") == "true"
        if count == 0 and brain.file_count >= 5 and not force and self.fault != "no-empty-guard":
            return _error(409, "refusing to replace a brain with an empty one")
        self._replace(brain, data, count)
        checksum = hashlib.sha256(data).hexdigest()
        return _json(200, {"size_bytes": len(data), "file_count": count, "checksum": checksum}, {"etag": f'"{checksum}"'})

    def _replace(self, brain: Brain, data: bytes, count: int) -> None:
        if brain.archive is not None:
            self.serial += 1
            brain.snapshots.append((f"v{self.serial:08d}", _now(), brain.archive))
        brain.archive, brain.file_count, brain.synced_at = data, count, _now()
