"""Helpers shared by checks: scratch brains with archives, and 'nothing changed' asserts."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from contract.conformance.archives import brain_archive, sha256_hex
from contract.conformance.context import UserClient
from contract.conformance.registry import expect_status, json_body, require

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
HEX64_RE = re.compile(r"^[0-9a-f]{64}$")
RECORD_FIELDS = ("id", "name", "size_bytes", "file_count", "checksum", "last_synced_at", "created_at")


def quoted(checksum: str) -> str:
    """An entity tag for a checksum."""
    return f'"{checksum}"'


def is_rfc3339(value: object) -> bool:
    """True for an RFC 3339 date-time string with a time zone."""
    if not isinstance(value, str) or "T" not in value.upper():
        return False
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return parsed.tzinfo is not None


def check_record(record: Any, where: str) -> dict[str, Any]:
    """Fail unless ``record`` has the brain record's members with the right types."""
    require(isinstance(record, dict), f"{where}: brain record must be an object, got {record!r}")
    missing = [k for k in RECORD_FIELDS if k not in record]
    require(not missing, f"{where}: brain record lacks {missing}: {record!r}")
    require(isinstance(record["id"], str) and UUID_RE.match(record["id"]), f"{where}: id must be a lower-case UUID: {record['id']!r}")
    require(isinstance(record["name"], str), f"{where}: name must be a string")
    for key in ("size_bytes", "file_count"):
        require(isinstance(record[key], int) and not isinstance(record[key], bool) and record[key] >= 0, f"{where}: {key} must be an integer >= 0: {record[key]!r}")
    require(record["checksum"] is None or (isinstance(record["checksum"], str) and HEX64_RE.match(record["checksum"])), f"{where}: checksum must be null or 64 lower-case hex: {record['checksum']!r}")
    require(record["last_synced_at"] is None or is_rfc3339(record["last_synced_at"]), f"{where}: last_synced_at must be null or RFC 3339: {record['last_synced_at']!r}")
    require(is_rfc3339(record["created_at"]), f"{where}: created_at must be RFC 3339: {record['created_at']!r}")
    return record


def brain_with_archive(client: UserClient, tag: str, n_files: int = 3) -> tuple[str, bytes]:
    """A scratch brain holding one uploaded archive; returns (id, archive)."""
    brain_id = client.create_brain(f"conformance-{tag}")["id"]
    archive = brain_archive(tag, n_files)
    resp = client.upload(brain_id, archive)
    expect_status(resp, 200)
    return brain_id, archive


def assert_live(client: UserClient, brain_id: str, archive: bytes, why: str) -> None:
    """Fail unless the live archive is exactly ``archive`` (bytes, ETag, X-Checksum, record)."""
    resp = client.download(brain_id)
    require(resp.status_code == 200, f"{why}: download failed", resp)
    require(resp.content == archive, f"{why}: stored archive changed ({len(resp.content)} bytes, sha {sha256_hex(resp.content)[:12]}, expected sha {sha256_hex(archive)[:12]})", resp)
    checksum = sha256_hex(archive)
    require(resp.headers.get("etag") == quoted(checksum), f"{why}: ETag does not match the body", resp)
    require(resp.headers.get("x-checksum") == checksum, f"{why}: X-Checksum does not match the body", resp)
    record = json_body(expect_status(client.record(brain_id), 200))
    require(record.get("checksum") == checksum, f"{why}: record checksum {record.get('checksum')!r} != archive {checksum}")


def assert_no_archive(client: UserClient, brain_id: str, why: str) -> None:
    """Fail unless the brain still has no archive."""
    resp = client.download(brain_id)
    require(resp.status_code == 404, f"{why}: brain should still have no archive", resp)


def versions_of(client: UserClient, brain_id: str) -> list[dict[str, Any]]:
    """The snapshot listing's entries (validated shape)."""
    resp = expect_status(client.versions(brain_id), 200)
    body = json_body(resp)
    require(isinstance(body, dict) and isinstance(body.get("versions"), list) and isinstance(body.get("total"), int), 'versions listing must be {"versions": [...], "total": N}', resp)
    for entry in body["versions"]:
        require(isinstance(entry, dict) and isinstance(entry.get("version"), str) and is_rfc3339(entry.get("date")), f"bad version entry {entry!r}", resp)
    require(body["total"] == len(body["versions"]), f"total {body['total']} != {len(body['versions'])} entries", resp)
    return list(body["versions"])

