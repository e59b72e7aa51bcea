"""Snapshots: listing order, snapshot download, unknown and hostile names, restore."""

from __future__ import annotations

from contract.conformance.archives import brain_archive, sha256_hex
from contract.conformance.checks._common import assert_live, brain_with_archive, quoted, versions_of
from contract.conformance.context import Context, UserClient
from contract.conformance.registry import check, expect_error, expect_status, json_body, require

# Version names that must never resolve to anything (sent raw, already URL-encoded).
HOSTILE_VERSION_QUERIES = (
    "../meta.json",
    "..%2F..%2Fusers.json",
    "..%2Fmeta.json",
    "../../users.json",
    "%2E%2E%2F%2E%2E%2Fusers.json",
    "..%252F..%252Fusers.json",
    "..",
    ".",
    "/etc/passwd",
    "%2Fetc%2Fpasswd",
    "..%5C..%5Cusers.json",
    "snapshots%2F..%2F..%2Fmeta.json",
)


def _three_uploads(client: UserClient, tag: str) -> tuple[str, list[bytes]]:
    brain_id, first = brain_with_archive(client, f"{tag}-a", 2)
    archives = [first]
    for step, n in (("b", 3), ("c", 4)):
        archive = brain_archive(f"{tag}-{step}", n)
        expect_status(client.upload(brain_id, archive), 200)
        archives.append(archive)
    return brain_id, archives


@check("versions.empty", "a new brain lists no snapshots: {versions: [], total: 0}")
def versions_empty(ctx: Context) -> None:
    brain_id = ctx.user.create_brain("conformance-nover")["id"]
    require(versions_of(ctx.user, brain_id) == [], "a brain that was never uploaded has no snapshots")


@check("versions.listing", "after uploads A, B, C the snapshots are B then A (newest first, names sorting descending)")
def versions_listing(ctx: Context) -> None:
    brain_id, (a, b, c) = _three_uploads(ctx.user, "list")
    entries = versions_of(ctx.user, brain_id)
    require(len(entries) == 2, f"expected 2 snapshots (the replaced A and B), got {len(entries)}: {entries}")
    names = [e["version"] for e in entries]
    require(names == sorted(names, reverse=True) and len(set(names)) == 2, f"names must sort descending (newest first): {names}")
    dates = [e["date"] for e in entries]
    require(dates == sorted(dates, reverse=True), f"dates must not increase down the list: {dates}")
    for entry, expected, label in ((entries[0], b, "B"), (entries[1], a, "A")):
        resp = expect_status(ctx.user.download(brain_id, version=entry["version"]), 200)
        require(resp.content == expected, f"snapshot {entry['version']} must hold archive {label}", resp)
    assert_live(ctx.user, brain_id, c, "live archive after three uploads")


@check("versions.download", "GET .../sync?version=NAME -> 200 application/gzip with the snapshot's bytes")
def versions_download(ctx: Context) -> None:
    brain_id, first = brain_with_archive(ctx.user, "vdl-a")
    expect_status(ctx.user.upload(brain_id, brain_archive("vdl-b")), 200)
    (entry,) = versions_of(ctx.user, brain_id)
    resp = expect_status(ctx.user.download(brain_id, version=entry["version"]), 200)
    require(resp.content == first, "snapshot bytes differ from the replaced archive", resp)
    require(resp.headers.get("content-type", "").split(";")[0].strip() == "application/gzip", "Content-Type must be application/gzip", resp)


@check("versions.unknown", "a snapshot name the store never issued -> 400 or 404 JSON error")
def versions_unknown(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "vunk")
    expect_status(ctx.user.upload(brain_id, brain_archive("vunk-2")), 200)
    (entry,) = versions_of(ctx.user, brain_id)
    for name in ("20990101T000000Z", entry["version"] + "0", "nope", "0" * 200):
        expect_error(ctx.user.download(brain_id, version=name), 400, 404)


@check("versions.traversal", "traversal names (../meta.json, ..%2F..%2Fusers.json, ...) never reach a file: 400/404")
def versions_traversal(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "vtrav")
    live = brain_archive("vtrav-2")
    expect_status(ctx.user.upload(brain_id, live), 200)
    for raw in HOSTILE_VERSION_QUERIES:
        resp = ctx.user.request("GET", f"/api/brains/{brain_id}/sync?version={raw}")
        expect_error(resp, 400, 404)
    for raw in ("..%2Fmeta.json", "..%2F..%2Fusers.json", "%2E%2E"):
        resp = ctx.user.request("POST", f"/api/brains/{brain_id}/versions/{raw}/restore")
        expect_error(resp, 400, 404)
    assert_live(ctx.user, brain_id, live, "after hostile restore names")


@check("versions.restore", "restore makes a snapshot live (200 {restored_version} + ETag), keeping the current archive as a snapshot")
def versions_restore(ctx: Context) -> None:
    brain_id, first = brain_with_archive(ctx.user, "rest-a")
    second = brain_archive("rest-b", 5)
    expect_status(ctx.user.upload(brain_id, second), 200)
    (entry,) = versions_of(ctx.user, brain_id)
    resp = expect_status(ctx.user.request("POST", f"/api/brains/{brain_id}/versions/{entry['version']}/restore"), 200)
    body = json_body(resp)
    require(body.get("restored_version") == entry["version"], "restored_version must name the snapshot", resp)
    require(resp.headers.get("etag") == quoted(sha256_hex(first)), "restore must answer the ETag of the restored archive", resp)
    assert_live(ctx.user, brain_id, first, "after restore")
    entries = versions_of(ctx.user, brain_id)
    newest = expect_status(ctx.user.download(brain_id, version=entries[0]["version"]), 200)
    require(newest.content == second, "the archive live before the restore must be the newest snapshot", newest)
    record = json_body(expect_status(ctx.user.record(brain_id), 200))
    require(record.get("file_count") == 3 and record.get("size_bytes") == len(first), f"record must describe the restored archive: {record}")


@check("versions.restore_unknown", "restoring an unknown snapshot -> 404 JSON error, nothing changed")
def versions_restore_unknown(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "rest-unk")
    expect_error(ctx.user.request("POST", f"/api/brains/{brain_id}/versions/20990101T000000Z/restore"), 404)
    assert_live(ctx.user, brain_id, archive, "after restoring an unknown snapshot")


@check("versions.restore_if_match", "restore honours If-Match: stale -> 412 with current_checksum (unchanged); current -> 200")
def versions_restore_if_match(ctx: Context) -> None:
    brain_id, first = brain_with_archive(ctx.user, "rest-im-a")
    second = brain_archive("rest-im-b")
    expect_status(ctx.user.upload(brain_id, second), 200)
    (entry,) = versions_of(ctx.user, brain_id)
    url = f"/api/brains/{brain_id}/versions/{entry['version']}/restore"
    body = expect_error(ctx.user.request("POST", url, headers={"If-Match": quoted(sha256_hex(first))}), 412)
    require(body.get("current_checksum") == sha256_hex(second), "412 must carry current_checksum of the live archive")
    assert_live(ctx.user, brain_id, second, "after a refused restore")
    expect_status(ctx.user.request("POST", url, headers={"If-Match": quoted(sha256_hex(second))}), 200)
    assert_live(ctx.user, brain_id, first, "after a conditional restore")
