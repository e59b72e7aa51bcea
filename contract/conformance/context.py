"""What a check gets: HTTP clients for one or two users and scratch-brain bookkeeping."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from contract.conformance.registry import CheckFailed, describe, expect_status, json_body

# 429 answers are retried after Retry-After; a rate-limited store is slow, not wrong.
MAX_RETRY_WAIT_S = 65.0
MAX_RETRIES = 6
UPLOAD_GAP_MARGIN_S = 0.1


@dataclass
class Pacer:
    """How a suite run respects the store's rate limits, shared by all of its clients.

    After a 429 nobody sends until its Retry-After has passed (instead of each client
    finding the limit again on its own). Uploads have their own, smaller budget at a
    store: once one is refused, uploads are spaced, by Retry-After at first and by a quarter
    more at each further refusal, so a long run settles at the store's upload
    rate after a few 429s instead of drawing one per upload.
    """

    not_before: float = 0.0
    upload_gap: float = 0.0
    last_upload: float = 0.0
    rate_limited: int = 0
    waited: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def wait(self, upload: bool = False) -> None:
        """Sleep until the store said requests (and uploads) may come again."""
        with self._lock:  # concurrent uploaders (the race checks) each take the next slot
            now = time.monotonic()
            until = self.not_before
            if upload and self.upload_gap:
                until = max(until, self.last_upload + self.upload_gap)
            if upload:
                self.last_upload = max(now, until)
            pause = until - now
            if pause > 0:
                self.waited += pause
        if pause > 0:
            time.sleep(pause)

    def refused(self, resp: httpx.Response, upload: bool = False) -> None:
        """Note a 429: pause everyone for its Retry-After (and space uploads by it)."""
        self.rate_limited += 1
        wait = min(MAX_RETRY_WAIT_S, _retry_after(resp))
        self.not_before = max(self.not_before, time.monotonic() + wait)
        if upload:
            # Retry-After names the wait for the next upload, not the store's upload rate: an
            # upload refused although spaced means the gap is too short, so it grows by a quarter.
            self.upload_gap = max(self.upload_gap * 1.25, wait + UPLOAD_GAP_MARGIN_S)


@dataclass
class UserClient:
    """Requests on behalf of one user (one bearer token) against one store."""

    http: httpx.Client
    token: str
    created: list[str] = field(default_factory=list)
    pacer: Pacer = field(default_factory=Pacer)

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send a request with this user's token; retry bounded times on 429."""
        all_headers = dict(headers or {})
        if auth and not any(k.lower() == "authorization" for k in all_headers):
            all_headers["Authorization"] = f"Bearer {self.token}"
        upload = method.upper() == "PUT"
        for _ in range(MAX_RETRIES):
            self.pacer.wait(upload)
            resp = self.http.request(method, path, headers=all_headers, **kwargs)
            if resp.status_code != 429:
                return resp
            self.pacer.refused(resp, upload)
        return resp

    def create_brain(self, name: str | None = None) -> dict[str, Any]:
        """Create a scratch brain (deleted after the check) and return its record."""
        resp = self.request("POST", "/api/brains", json={"name": name} if name is not None else None)
        if resp.status_code == 403:
            raise CheckFailed(f"cannot create a scratch brain: the account is at its brain limit [{describe(resp)}]")
        expect_status(resp, 201)
        record = json_body(resp)
        if not isinstance(record, dict) or not isinstance(record.get("id"), str):
            raise CheckFailed(f"POST /api/brains did not return a brain record [{describe(resp)}]")
        self.created.append(record["id"])
        return record

    def upload(
        self,
        brain_id: str,
        archive: bytes,
        *,
        headers: Mapping[str, str] | None = None,
        force: bool = False,
        field_name: str = "brain",
        filename: str = "brain.tar.gz",
    ) -> httpx.Response:
        """PUT an archive as the multipart field ``field_name``."""
        params = {"force": "true"} if force else None
        files = {field_name: (filename, archive, "application/gzip")}
        return self.request("PUT", f"/api/brains/{brain_id}/sync", headers=headers, files=files, params=params)

    def download(self, brain_id: str, *, version: str | None = None, headers: Mapping[str, str] | None = None) -> httpx.Response:
        """GET the live archive or one snapshot."""
        params = {"version": version} if version is not None else None
        return self.request("GET", f"/api/brains/{brain_id}/sync", headers=headers, params=params)

    def record(self, brain_id: str) -> httpx.Response:
        """GET one brain record."""
        return self.request("GET", f"/api/brains/{brain_id}")

    def versions(self, brain_id: str) -> httpx.Response:
        """GET the snapshot listing."""
        return self.request("GET", f"/api/brains/{brain_id}/versions")

    def delete(self, brain_id: str) -> httpx.Response:
        """DELETE a brain; forget it for cleanup."""
        resp = self.request("DELETE", f"/api/brains/{brain_id}")
        if resp.status_code in (200, 204) and brain_id in self.created:
            self.created.remove(brain_id)
        return resp

    def cleanup(self) -> list[str]:
        """Delete every brain this client created; return the ids that would not go."""
        left: list[str] = []
        for brain_id in list(self.created):
            try:
                resp = self.delete(brain_id)
            except httpx.HTTPError:
                left.append(brain_id)
                continue
            if resp.status_code not in (200, 204, 404):
                left.append(brain_id)
            elif brain_id in self.created:
                self.created.remove(brain_id)
        return left


def _retry_after(resp: httpx.Response) -> float:
    try:
        return max(0.5, float(resp.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0


@dataclass
class Context:
    """Everything a check needs: the base URL, user one, and user two when given."""

    base_url: str
    user: UserClient
    other: UserClient | None
    timeout: float
    transport: httpx.BaseTransport | None = None

    def anonymous(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request without any Authorization header."""
        return self.user.request(method, path, auth=False, **kwargs)

    def second(self) -> UserClient:
        """User two's client (checks needing it are skipped without --token2)."""
        if self.other is None:
            raise CheckFailed("this check needs a second token")
        return self.other

    def new_client(self) -> httpx.Client:
        """A fresh HTTP client on the same store (for concurrent requests)."""
        return httpx.Client(base_url=self.base_url, timeout=self.timeout, transport=self.transport)


def random_uuid() -> str:
    """A brain id that no store has issued."""
    return str(uuid.uuid4())
