"""Brain records: create, default name, list order, get, unknown and malformed ids, limit, delete."""

from __future__ import annotations

from contract.conformance.archives import brain_archive
from contract.conformance.checks._common import brain_with_archive, check_record, versions_of
from contract.conformance.context import Context, random_uuid
from contract.conformance.registry import check, expect_error, expect_status, json_body, require

BRAIN_LIMIT_PROBE = 30  # stop looking for the per-account limit after this many creates


@check("brains.list", "GET /api/brains -> 200 bare JSON array of well-formed brain records")
def brains_list(ctx: Context) -> None:
    resp = expect_status(ctx.user.request("GET", "/api/brains"), 200)
    body = json_body(resp)
    require(isinstance(body, list), "the listing must be a bare JSON array", resp)
    for record in body:
        check_record(record, "GET /api/brains")


@check("brains.create_default", "POST /api/brains without a body (and with {}) -> 201, name 'default', empty record")
def brains_create_default(ctx: Context) -> None:
    for kwargs in ({}, {"json": {}}):
        resp = expect_status(ctx.user.request("POST", "/api/brains", **kwargs), 201)
        record = check_record(json_body(resp), "POST /api/brains")
        ctx.user.created.append(record["id"])
        require(record["name"] == "default", f"default name must be 'default', got {record['name']!r}", resp)
        require(record["checksum"] is None and record["last_synced_at"] is None, "checksum and last_synced_at must be null before the first upload", resp)
        require(record["file_count"] == 0 and record["size_bytes"] == 0, "an empty brain has size_bytes 0 and file_count 0", resp)


@check("brains.create_named", 'POST /api/brains {"name": "..."} -> 201 with that name')
def brains_create_named(ctx: Context) -> None:
    record = ctx.user.create_brain("conformance-work")
    check_record(record, "POST /api/brains")
    require(record["name"] == "conformance-work", f"name not kept: {record['name']!r}")


@check("brains.list_order", "GET /api/brains lists brains oldest first and includes new ones")
def brains_list_order(ctx: Context) -> None:
    first = ctx.user.create_brain("conformance-first")["id"]
    second = ctx.user.create_brain("conformance-second")["id"]
    resp = expect_status(ctx.user.request("GET", "/api/brains"), 200)
    body = json_body(resp)
    ids = [r.get("id") for r in body]
    require(first in ids and second in ids, "new brains missing from the listing", resp)
    require(ids.index(first) < ids.index(second), "listing must be oldest first", resp)
    created = [r["created_at"] for r in body]
    require(created == sorted(created), f"created_at must not decrease along the listing: {created}", resp)


@check("brains.get", "GET /api/brains/{id} -> 200 the same record; upper-case id accepted, answered lower-case")
def brains_get(ctx: Context) -> None:
    made = ctx.user.create_brain("conformance-get")
    for brain_id in (made["id"], made["id"].upper()):
        resp = expect_status(ctx.user.record(brain_id), 200)
        record = check_record(json_body(resp), "GET /api/brains/{id}")
        for key in ("id", "name", "created_at"):
            require(record[key] == made[key], f"{key} differs from the created record", resp)


@check("brains.unknown", "an unknown brain id -> 404 JSON error on every brain endpoint")
def brains_unknown(ctx: Context) -> None:
    missing = random_uuid()
    archive = brain_archive("unknown")
    expect_error(ctx.user.record(missing), 404)
    expect_error(ctx.user.download(missing), 404)
    expect_error(ctx.user.upload(missing, archive), 404)
    expect_error(ctx.user.versions(missing), 404)
    expect_error(ctx.user.request("POST", f"/api/brains/{missing}/versions/x/restore"), 404)
    expect_error(ctx.user.request("DELETE", f"/api/brains/{missing}"), 404)
    # An upload to an unknown id must not create it.
    expect_error(ctx.user.record(missing), 404)


@check("brains.bad_id", "a malformed brain id -> 400 or 404 JSON error (never 500)")
def brains_bad_id(ctx: Context) -> None:
    for bad in ("not-a-uuid", "1234", "00000000-0000-0000-0000-00000000000g", "x" * 300):
        expect_error(ctx.user.record(bad), 400, 404)
        expect_error(ctx.user.download(bad), 400, 404)
        expect_error(ctx.user.versions(bad), 400, 404)


@check("brains.limit", "creating brains past the account limit -> 403 JSON error (probe stops at 30)")
def brains_limit(ctx: Context) -> str | None:
    for _ in range(BRAIN_LIMIT_PROBE):
        resp = ctx.user.request("POST", "/api/brains", json={"name": "conformance-limit"})
        if resp.status_code == 403:
            expect_error(resp, 403)
            return f"limit reached after {len(ctx.user.created)} new brains"
        expect_status(resp, 201)
        ctx.user.created.append(json_body(resp)["id"])
    return f"no limit within {BRAIN_LIMIT_PROBE} brains"


@check("brains.delete", "DELETE -> 204/200; afterwards record, download, versions -> 404 and the list omits it")
def brains_delete(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "delete")
    expect_status(ctx.user.upload(brain_id, brain_archive("delete-2")), 200)  # makes a snapshot too
    require(versions_of(ctx.user, brain_id), "expected a snapshot before deleting")
    expect_status(ctx.user.delete(brain_id), 200, 204)
    expect_error(ctx.user.record(brain_id), 404)
    expect_error(ctx.user.download(brain_id), 404)
    expect_error(ctx.user.versions(brain_id), 404)
    listing = json_body(expect_status(ctx.user.request("GET", "/api/brains"), 200))
    require(brain_id not in [r.get("id") for r in listing], "deleted brain still listed")
    expect_error(ctx.user.request("DELETE", f"/api/brains/{brain_id}"), 404)
