"""Uploading and downloading archives: results, headers, records, 304."""

from __future__ import annotations

from contract.conformance.archives import brain_archive, make_archive, sha256_hex
from contract.conformance.checks._common import HEX64_RE, assert_live, brain_with_archive, check_record, is_rfc3339, quoted
from contract.conformance.context import Context
from contract.conformance.registry import check, expect_error, expect_status, json_body, require


@check("sync.before_upload", "downloading a brain that was never uploaded -> 404 JSON error")
def sync_before_upload(ctx: Context) -> None:
    brain_id = ctx.user.create_brain("conformance-empty")["id"]
    expect_error(ctx.user.download(brain_id), 404)


@check("sync.upload", "PUT .../sync -> 200 {size_bytes, file_count, checksum} + ETag; file_count counts regular files only")
def sync_upload(ctx: Context) -> None:
    brain_id = ctx.user.create_brain("conformance-upload")["id"]
    archive = make_archive({"a.md": b"one", "dir/b.md": b"two", "dir/sub/c.json": b"{}"}, dirs=("dir", "dir/sub"))
    resp = expect_status(ctx.user.upload(brain_id, archive), 200)
    body = json_body(resp)
    checksum = sha256_hex(archive)
    require(isinstance(body, dict), "upload result must be an object", resp)
    require(body.get("checksum") == checksum, "checksum must be the SHA-256 of the uploaded bytes", resp)
    require(body.get("size_bytes") == len(archive), f"size_bytes must be {len(archive)}", resp)
    require(body.get("file_count") == 3, "file_count must count the 3 regular files (not the 2 directories)", resp)
    require(resp.headers.get("etag") == quoted(checksum), 'upload must answer ETag: "<checksum>"', resp)


@check("sync.download", "GET .../sync -> 200 the exact bytes, application/gzip, ETag and X-Checksum of the body")
def sync_download(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "download", 4)
    resp = expect_status(ctx.user.download(brain_id), 200)
    require(resp.content == archive, "downloaded bytes differ from the upload", resp)
    require(resp.headers.get("content-type", "").split(";")[0].strip() == "application/gzip", "Content-Type must be application/gzip", resp)
    require(resp.headers.get("etag") == quoted(sha256_hex(archive)), "ETag must be the quoted checksum", resp)
    require(resp.headers.get("x-checksum") == sha256_hex(archive), "X-Checksum must be the checksum", resp)


@check("sync.record", "after an upload the record carries checksum, size_bytes, file_count and last_synced_at")
def sync_record(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "record", 6)
    resp = expect_status(ctx.user.record(brain_id), 200)
    record = check_record(json_body(resp), "GET /api/brains/{id}")
    require(record["checksum"] == sha256_hex(archive), "record checksum must match the upload", resp)
    require(record["size_bytes"] == len(archive), "record size_bytes must match the upload", resp)
    require(record["file_count"] == 6, "record file_count must be 6", resp)
    require(is_rfc3339(record["last_synced_at"]), "last_synced_at must be set", resp)
    listing = json_body(expect_status(ctx.user.request("GET", "/api/brains"), 200))
    listed = [r for r in listing if r.get("id") == brain_id]
    require(listed and listed[0].get("checksum") == record["checksum"], "listing must show the same checksum")


@check("sync.replace", "an unconditional upload replaces the archive; downloads return the new bytes")
def sync_replace(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "replace-1")
    second = brain_archive("replace-2", 2)
    expect_status(ctx.user.upload(brain_id, second), 200)
    assert_live(ctx.user, brain_id, second, "after replacing")


@check("sync.not_modified", "If-None-Match with the stored checksum or * -> 304 empty body; another tag -> 200")
def sync_not_modified(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "304")
    checksum = sha256_hex(archive)
    for tag in (quoted(checksum), "*"):
        resp = ctx.user.download(brain_id, headers={"If-None-Match": tag})
        require(resp.status_code == 304, f"If-None-Match: {tag} must give 304", resp)
        require(resp.content == b"", "304 must have an empty body", resp)
    resp = expect_status(ctx.user.download(brain_id, headers={"If-None-Match": quoted("0" * 64)}), 200)
    require(resp.content == archive, "a non-matching If-None-Match must return the archive", resp)


@check("sync.storage_used", "after an upload /auth/me storage_used covers at least that archive")
def sync_storage_used(ctx: Context) -> None:
    _, archive = brain_with_archive(ctx.user, "storage", 3)
    body = json_body(expect_status(ctx.user.request("GET", "/auth/me"), 200))
    require(isinstance(body.get("storage_used"), int) and body["storage_used"] >= len(archive), f"storage_used {body.get('storage_used')} < archive size {len(archive)}")


@check("sync.extra_fields", "other multipart fields beside 'brain' are ignored")
def sync_extra_fields(ctx: Context) -> None:
    brain_id = ctx.user.create_brain("conformance-fields")["id"]
    archive = brain_archive("fields")
    files = [
        ("note", ("note.txt", b"ignore me", "text/plain")),
        ("brain", ("brain.tar.gz", archive, "application/gzip")),
        ("other", ("x.bin", b"\x00\x01", "application/octet-stream")),
    ]
    resp = ctx.user.request("PUT", f"/api/brains/{brain_id}/sync", files=files, data={"comment": "hello"})
    expect_status(resp, 200)
    require(json_body(resp).get("checksum") == sha256_hex(archive), "checksum must be that of the brain field", resp)
    assert_live(ctx.user, brain_id, archive, "after an upload with extra fields")


@check("sync.checksum_format", "checksums are 64 lower-case hex characters everywhere")
def sync_checksum_format(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "format")
    resp = expect_status(ctx.user.download(brain_id), 200)
    require(HEX64_RE.match(resp.headers.get("x-checksum", "")), "X-Checksum must be lower-case hex", resp)


@check("sync.uppercase_id", "upper-case brain ids work for upload, download and versions too")
def sync_uppercase_id(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "upper")
    second = brain_archive("upper-2")
    upper = brain_id.upper()
    expect_status(ctx.user.upload(upper, second), 200)
    resp = expect_status(ctx.user.download(upper), 200)
    require(resp.content == second, "download by upper-case id must return the archive", resp)
    expect_status(ctx.user.versions(upper), 200)
    assert_live(ctx.user, brain_id, second, "after an upload by upper-case id")
