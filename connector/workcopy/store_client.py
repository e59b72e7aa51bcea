"""An async client for the store's HTTP contract (version 1.1), as the connector uses it.

Every call carries the user's store credential (a static ``bst_`` token or an
OIDC ID token). Failures surface as typed errors so the working-copy manager
can tell "you are not allowed" from "the store is down" from "someone else
pushed first". The credential is never logged or put in an error message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from common.http_failure import no_answer

_MAX_ERROR_TEXT = 200
# The roles a shared brain's record may carry (contract 4.8); anything else is ignored.
ROLES = ("owner", "editor", "viewer")
_MAX_OWNER_CHARS = 200


class StoreError(Exception):
    """The store answered with an unexpected status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class StoreUnauthorized(StoreError):
    """The credential was refused (401/403 on authentication)."""


class StoreUnreachable(StoreError):
    """The store could not be reached, timed out, or failed on its side (5xx, 429)."""


class StoreNotFound(StoreError):
    """The brain (or its archive) does not exist for this user."""


class StoreForbidden(StoreError):
    """The store refused an action for this account (e.g. no more brains allowed)."""


class PreconditionFailed(StoreError):
    """A conditional upload lost: the stored archive is not the one we based on."""

    def __init__(self, current_checksum: str | None) -> None:
        super().__init__("the brain changed at the store since it was pulled", 412)
        self.current_checksum = current_checksum


@dataclass(frozen=True)
class BrainRecord:
    """One brain as the store lists it."""

    id: str
    name: str
    size_bytes: int
    file_count: int
    checksum: str | None
    last_synced_at: str | None
    created_at: str
    # Extension members of a store that shares brains (contract 4.8): the caller's role and
    # the creator's name. None from a store without sharing (the caller owns every brain).
    role: str | None = None
    owner: str | None = None

    @property
    def read_only(self) -> bool:
        """True when the caller may only read this brain (a viewer)."""
        return self.role == "viewer"

    @classmethod
    def from_json(cls, data: Any) -> BrainRecord:
        """Parse a record, tolerating extra members; raises StoreError when malformed."""
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise StoreError("the store sent a malformed brain record")
        return cls(
            id=data["id"].lower(),
            name=str(data.get("name") or "default"),
            size_bytes=_int(data.get("size_bytes")),
            file_count=_int(data.get("file_count")),
            checksum=data.get("checksum") if isinstance(data.get("checksum"), str) else None,
            last_synced_at=data.get("last_synced_at") if isinstance(data.get("last_synced_at"), str) else None,
            created_at=str(data.get("created_at") or ""),
            role=data.get("role") if data.get("role") in ROLES else None,
            owner=data["owner"][:_MAX_OWNER_CHARS] if isinstance(data.get("owner"), str) else None,
        )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class Download:
    """A pulled archive: its bytes and checksum (None bytes when 304 / not modified)."""

    data: bytes | None
    checksum: str | None

    @property
    def not_modified(self) -> bool:
        """True when the store said our copy is current."""
        return self.data is None


@dataclass(frozen=True)
class UploadResult:
    """What the store answered to an accepted upload."""

    checksum: str
    size_bytes: int
    file_count: int


@dataclass(frozen=True)
class VersionRecord:
    """One snapshot of a brain as the store lists it."""

    name: str
    date: str  # when a newer version replaced it (the snapshot was taken)
    size_bytes: int | None
    file_count: int | None
    written: str = ""  # when it was written ([extension] written_at; "" from a store without it)

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> VersionRecord:
        """Parse a listing item (extra members ignored; missing numbers are None)."""
        def number(key: str) -> int | None:
            value = item.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        date, written = item.get("date"), item.get("written_at")
        return cls(item["version"], date if isinstance(date, str) else "", number("size_bytes"), number("file_count"),
                   written if isinstance(written, str) else "")


class StoreClient:
    """Talks to one store. Share one instance (and its connection pool) per process."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 15.0,
        max_archive_bytes: int = 256 * 1024 * 1024,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._timeout_s = timeout_s
        self._max_archive = max_archive_bytes
        self._http = httpx.AsyncClient(
            base_url=self._base,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            transport=transport,
            follow_redirects=False,
        )

    @property
    def base_url(self) -> str:
        """The store's base URL."""
        return self._base

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _request(self, method: str, path: str, credential: str | None, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        if credential is not None:
            headers["Authorization"] = f"Bearer {credential}"
        try:
            return await self._http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise self._unanswered(exc) from None

    @property
    def _where(self) -> str:
        return f"the store at {self._base}"

    def _unanswered(self, exc: httpx.HTTPError) -> StoreUnreachable:
        """The error for a request the store gave no answer to, in plain words (people read it)."""
        return StoreUnreachable(no_answer(exc, self._where, self._timeout_s))

    @staticmethod
    def _fail(response: httpx.Response, what: str) -> StoreError:
        status = response.status_code
        detail = ""
        try:
            body = response.json()
            if isinstance(body, dict) and isinstance(body.get("error"), str):
                detail = body["error"][:_MAX_ERROR_TEXT]
        except ValueError:
            pass
        suffix = f": {detail}" if detail else ""
        if status == 401:
            return StoreUnauthorized(f"the store refused the credential while trying to {what}", status)
        if status == 404:
            return StoreNotFound(f"not found at the store while trying to {what}", status)
        if status == 403:
            return StoreForbidden(f"the store refused to {what}{suffix}", status)
        if status == 429:
            # A rate limit, not an outage: "unavailable" would have the model tell the user the store is down.
            return StoreUnreachable(f"the store asked the connector to slow down ({status}{suffix}) while trying "
                                    f"to {what}", status)
        if status >= 500:
            return StoreUnreachable(f"the store is unavailable ({status}) while trying to {what}", status)
        return StoreError(f"the store answered {status} while trying to {what}{suffix}", status)

    async def health(self) -> bool:
        """True when the store answers ``GET /health`` with 200."""
        try:
            response = await self._request("GET", "/health", None)
        except StoreUnreachable:
            return False
        return response.status_code == 200

    async def me(self, credential: str, forwarded_for: str | None = None) -> dict[str, Any]:
        """``GET /auth/me``: who the credential belongs to; ``forwarded_for`` (a parsed address) names
        the person presenting it, so the store counts a wrong one against them (STORE_TRUST_PROXY)."""
        headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
        response = await self._request("GET", "/auth/me", credential, headers=headers)
        if response.status_code == 403:
            raise StoreUnauthorized("the store refused the credential", 403)
        if response.status_code != 200:
            raise self._fail(response, "identify the account")
        body = response.json()
        if not isinstance(body, dict):
            raise StoreError("the store sent a malformed /auth/me answer")
        return body

    async def list_brains(self, credential: str) -> list[BrainRecord]:
        """``GET /api/brains``: the account's brains, as the store orders them (oldest first)."""
        response = await self._request("GET", "/api/brains", credential)
        if response.status_code != 200:
            raise self._fail(response, "list brains")
        try:
            body = response.json()
        except ValueError:
            raise StoreError("the store sent a malformed brain list") from None
        if not isinstance(body, list):
            raise StoreError("the store sent a malformed brain list")
        return [BrainRecord.from_json(item) for item in body]

    async def create_brain(self, credential: str, name: str | None = None) -> BrainRecord:
        """``POST /api/brains``: a new, empty brain."""
        payload = {"name": name} if name else {}
        response = await self._request("POST", "/api/brains", credential, json=payload)
        if response.status_code not in (200, 201):
            raise self._fail(response, "create a brain")
        return BrainRecord.from_json(response.json())

    async def rename_brain(self, credential: str, brain_id: str, name: str) -> BrainRecord:
        """``PATCH /api/brains/{id}`` (this store's extension): the brain under a new name."""
        response = await self._request("PATCH", f"/api/brains/{brain_id}", credential, json={"name": name})
        if response.status_code != 200:
            raise self._fail(response, "rename the brain")
        return BrainRecord.from_json(response.json())

    async def trash_brain(self, credential: str, brain_id: str) -> None:
        """``POST /api/brains/{id}/trash`` (this store's extension): deleted for every client, its
        archive and snapshots kept by the store."""
        response = await self._request("POST", f"/api/brains/{brain_id}/trash", credential)
        if response.status_code not in (200, 204):
            raise self._fail(response, "delete the brain")

    async def download(
        self, credential: str, brain_id: str, known_checksum: str | None = None, *, version: str | None = None
    ) -> Download:
        """``GET /api/brains/{id}/sync``, conditional on ``known_checksum`` (304 → not modified).

        A brain with no archive yet raises StoreNotFound, like a missing brain;
        callers tell them apart with the brain list. ``version`` names one of the
        store's snapshots (``?version=``) instead of the current archive.
        """
        headers = {"If-None-Match": f'"{known_checksum}"', "Authorization": f"Bearer {credential}"}
        if not known_checksum:
            del headers["If-None-Match"]
        params = {"version": version} if version else None
        request = self._http.build_request("GET", f"/api/brains/{brain_id}/sync", headers=headers, params=params)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._unanswered(exc) from None
        try:
            if response.status_code == 304:
                return Download(data=None, checksum=known_checksum)
            if response.status_code != 200:
                await response.aread()
                raise self._fail(response, "download the brain")
            # Read with a cap: an archive larger than we accept is never held whole in memory.
            chunks: list[bytes] = []
            size = 0
            try:
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > self._max_archive:
                        raise StoreError("the brain's archive is larger than the connector accepts")
                    chunks.append(chunk)
            except httpx.HTTPError as exc:
                raise StoreUnreachable(f"the download was interrupted: {no_answer(exc, self._where, self._timeout_s)}") from None
            data = b"".join(chunks)
        finally:
            await response.aclose()
        checksum = response.headers.get("X-Checksum") or response.headers.get("ETag", "").strip('"') or None
        return Download(data=data, checksum=checksum.lower() if checksum else None)

    async def list_versions(self, credential: str, brain_id: str) -> list[VersionRecord]:
        """``GET /api/brains/{id}/versions``: the brain's snapshots, newest first."""
        response = await self._request("GET", f"/api/brains/{quote(brain_id, safe='')}/versions", credential)
        if response.status_code != 200:
            raise self._fail(response, "list the brain's snapshots")
        try:
            items = response.json().get("versions")
        except (ValueError, AttributeError):
            items = None
        if not isinstance(items, list):
            raise StoreError("the store sent a malformed snapshot list")
        return [VersionRecord.from_json(item) for item in items
                if isinstance(item, dict) and isinstance(item.get("version"), str)]

    async def restore_version(self, credential: str, brain_id: str, name: str) -> None:
        """``POST /api/brains/{id}/versions/{name}/restore``: make a snapshot live (the store keeps the current one)."""
        path = f"/api/brains/{quote(brain_id, safe='')}/versions/{quote(name, safe='')}/restore"
        response = await self._request("POST", path, credential)
        if response.status_code != 200:
            raise self._fail(response, "restore the snapshot")

    async def upload(
        self,
        credential: str,
        brain_id: str,
        archive: bytes,
        *,
        if_match: str | None = None,
        if_none_match_any: bool = False,
    ) -> UploadResult:
        """``PUT /api/brains/{id}/sync`` with the archive in the multipart field ``brain``.

        ``if_match`` sends ``If-Match: "<checksum>"``; ``if_none_match_any`` sends
        ``If-None-Match: *`` (first push). 412 raises PreconditionFailed carrying
        the store's current checksum.
        """
        headers: dict[str, str] = {}
        if if_match:
            headers["If-Match"] = f'"{if_match}"'
        if if_none_match_any:
            headers["If-None-Match"] = "*"
        files = {"brain": ("brain.tar.gz", archive, "application/gzip")}
        response = await self._request("PUT", f"/api/brains/{brain_id}/sync", credential, headers=headers, files=files)
        if response.status_code == 412:
            current = None
            try:
                body = response.json()
                if isinstance(body, dict) and isinstance(body.get("current_checksum"), str):
                    current = body["current_checksum"]
            except ValueError:
                pass
            raise PreconditionFailed(current)
        if response.status_code != 200:
            raise self._fail(response, "upload the brain")
        body = response.json()
        checksum = body.get("checksum") if isinstance(body, dict) else None
        if not isinstance(checksum, str):
            checksum = response.headers.get("ETag", "").strip('"')
        return UploadResult(
            checksum=checksum.lower(),
            size_bytes=_int(body.get("size_bytes")) if isinstance(body, dict) else len(archive),
            file_count=_int(body.get("file_count")) if isinstance(body, dict) else 0,
        )
