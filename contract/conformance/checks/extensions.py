"""Checks of this project's extensions; each skips when the store plainly lacks the feature."""

from __future__ import annotations

from contract.conformance.archives import brain_archive, sha256_hex
from contract.conformance.checks._common import HEX64_RE, assert_live, brain_with_archive, quoted, versions_of
from contract.conformance.context import Context, random_uuid
from contract.conformance.registry import CheckSkipped, check, expect_error, expect_status, require

UNSUPPORTED_METHOD = (404, 405, 501)


@check("ext.health_probes", "GET /health/live and /health/ready -> 200 without a token", extension=True)
def ext_health_probes(ctx: Context) -> None:
    live = ctx.anonymous("GET", "/health/live")
    if live.status_code == 404:
        raise CheckSkipped("no /health/live")
    expect_status(live, 200)
    expect_status(ctx.anonymous("GET", "/health/ready"), 200)


@check("ext.openapi", "GET /openapi.yaml -> 200 OpenAPI document without a token", extension=True)
def ext_openapi(ctx: Context) -> None:
    resp = ctx.anonymous("GET", "/openapi.yaml")
    if resp.status_code == 404:
        raise CheckSkipped("no /openapi.yaml")
    expect_status(resp, 200)
    require(resp.text.lstrip().startswith("openapi:"), "document must start with 'openapi:'", resp)


@check("ext.head", "HEAD .../sync -> 200 with the GET's ETag/X-Checksum/Content-Length and no body", extension=True)
def ext_head(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "head")
    resp = ctx.user.request("HEAD", f"/api/brains/{brain_id}/sync")
    if resp.status_code in UNSUPPORTED_METHOD:
        raise CheckSkipped(f"HEAD answered {resp.status_code}")
    expect_status(resp, 200)
    checksum = sha256_hex(archive)
    require(resp.content == b"", "HEAD must not carry a body", resp)
    require(resp.headers.get("etag") == quoted(checksum), "HEAD ETag must equal the GET's", resp)
    require(resp.headers.get("x-checksum") == checksum, "HEAD X-Checksum must equal the GET's", resp)
    require(resp.headers.get("content-length") == str(len(archive)), "HEAD Content-Length must be the archive size", resp)
    nm = ctx.user.request("HEAD", f"/api/brains/{brain_id}/sync", headers={"If-None-Match": quoted(checksum)})
    require(nm.status_code == 304, "HEAD with a matching If-None-Match must give 304", nm)
    missing = ctx.user.request("HEAD", f"/api/brains/{random_uuid()}/sync")
    require(missing.status_code == 404, "HEAD on an unknown brain must give 404", missing)
    anon = ctx.anonymous("HEAD", f"/api/brains/{brain_id}/sync")
    require(anon.status_code == 401, "HEAD without a token must give 401", anon)


@check("ext.not_modified_etag", "a 304 carries the ETag of the stored archive", extension=True)
def ext_not_modified_etag(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "304-etag")
    resp = ctx.user.download(brain_id, headers={"If-None-Match": "*"})
    expect_status(resp, 304)
    require(resp.headers.get("etag") == quoted(sha256_hex(archive)), "304 must carry the current ETag", resp)


@check("ext.snapshot_etag", "snapshot downloads carry ETag/X-Checksum of their body and honour If-None-Match (304)", extension=True)
def ext_snapshot_etag(ctx: Context) -> None:
    brain_id, first = brain_with_archive(ctx.user, "snap-etag")
    expect_status(ctx.user.upload(brain_id, brain_archive("snap-etag-2")), 200)
    (entry,) = versions_of(ctx.user, brain_id)
    resp = expect_status(ctx.user.download(brain_id, version=entry["version"]), 200)
    if "etag" not in resp.headers:
        raise CheckSkipped("snapshot downloads carry no ETag")
    checksum = sha256_hex(first)
    require(resp.headers.get("etag") == quoted(checksum), "snapshot ETag must be its checksum", resp)
    require(resp.headers.get("x-checksum") == checksum, "snapshot X-Checksum must be its checksum", resp)
    nm = ctx.user.download(brain_id, version=entry["version"], headers={"If-None-Match": quoted(checksum)})
    require(nm.status_code == 304 and nm.content == b"", "matching If-None-Match on a snapshot must give 304", nm)
    other = ctx.user.download(brain_id, version=entry["version"], headers={"If-None-Match": quoted("c" * 64)})
    require(other.status_code == 200 and other.content == first, "non-matching If-None-Match must give the snapshot", other)
    head = ctx.user.request("HEAD", f"/api/brains/{brain_id}/sync", params={"version": entry["version"]})
    if head.status_code not in UNSUPPORTED_METHOD:
        require(head.status_code == 200 and head.content == b"", "HEAD on a snapshot must give 200 without a body", head)
        require(head.headers.get("etag") == quoted(checksum), "HEAD on a snapshot must carry its ETag", head)


@check("ext.versions_detail", "version listing entries carry size_bytes and checksum of the snapshot", extension=True)
def ext_versions_detail(ctx: Context) -> None:
    brain_id, first = brain_with_archive(ctx.user, "vdetail")
    expect_status(ctx.user.upload(brain_id, brain_archive("vdetail-2")), 200)
    (entry,) = versions_of(ctx.user, brain_id)
    if "checksum" not in entry and "size_bytes" not in entry:
        raise CheckSkipped("listing has no size/checksum")
    require(entry.get("checksum") == sha256_hex(first) and HEX64_RE.match(entry["checksum"]), f"entry checksum wrong: {entry}")
    require(entry.get("size_bytes") == len(first), f"entry size_bytes wrong: {entry}")


@check("ext.weak_if_match", 'If-Match: W/"<checksum>" never matches (strong comparison) -> 412, unchanged', extension=True)
def ext_weak_if_match(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "weak")
    resp = ctx.user.upload(brain_id, brain_archive("weak-2"), headers={"If-Match": f"W/{quoted(sha256_hex(archive))}"})
    expect_error(resp, 412)
    assert_live(ctx.user, brain_id, archive, "after a weak If-Match")


@check("ext.if_match_list", 'If-Match with a list of tags matches when one strong tag matches', extension=True)
def ext_if_match_list(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "im-list")
    new = brain_archive("im-list-2")
    header = f'{quoted("d" * 64)}, {quoted(sha256_hex(archive))}'
    expect_status(ctx.user.upload(brain_id, new, headers={"If-Match": header}), 200)
    assert_live(ctx.user, brain_id, new, "after a listed If-Match")


@check("ext.identical_reupload", "re-uploading the stored archive creates no new snapshot", extension=True)
def ext_identical_reupload(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "same")
    second = brain_archive("same-2")
    expect_status(ctx.user.upload(brain_id, second), 200)
    before = versions_of(ctx.user, brain_id)
    expect_status(ctx.user.upload(brain_id, second), 200)
    after = versions_of(ctx.user, brain_id)
    require(before == after, f"an identical re-upload changed the snapshots: {before} -> {after}")


@check("ext.bad_percent_escape", "malformed percent-escapes in the path or query -> 400 JSON error (never 500)", extension=True)
def ext_bad_percent_escape(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "pct")
    for raw in ("/api/brains/%zz", "/api/brains/%E0%A4%A/sync", f"/api/brains/{brain_id}/sync%", f"/api/brains/{brain_id}/versions/%G1/restore"):
        expect_error(ctx.user.request("GET" if "restore" not in raw else "POST", raw), 400)
    assert_live(ctx.user, brain_id, archive, "after malformed escapes")
