"""Upload validation (junk bodies -> 400, nothing changed) and the empty-push guard."""

from __future__ import annotations

import gzip
import os

from contract.conformance.archives import brain_archive, empty_archive, sha256_hex
from contract.conformance.checks._common import assert_live, assert_no_archive, brain_with_archive
from contract.conformance.context import Context
from contract.conformance.registry import check, expect_error, expect_status, json_body, require


@check("junk.not_gzip", "an upload that is not gzip -> 400 JSON error, stored archive unchanged")
def junk_not_gzip(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "junk-raw")
    expect_error(ctx.user.upload(brain_id, b"this is not an archive\n" + os.urandom(64)), 400)
    assert_live(ctx.user, brain_id, archive, "after a non-gzip upload")


@check("junk.gzip_not_tar", "gzip whose content is not a tar -> 400, unchanged")
def junk_gzip_not_tar(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "junk-gz")
    expect_error(ctx.user.upload(brain_id, gzip.compress(b"plain text, no tar header here\n" * 40)), 400)
    assert_live(ctx.user, brain_id, archive, "after a gzip-but-not-tar upload")


@check("junk.no_brain_field", "multipart without a 'brain' field -> 400, unchanged")
def junk_no_brain_field(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "junk-field")
    expect_error(ctx.user.upload(brain_id, brain_archive("junk-field-2"), field_name="archive"), 400)
    assert_live(ctx.user, brain_id, archive, "after an upload without the brain field")


@check("junk.filename_brain", "a field named otherwise whose filename is 'brain' is not the brain field -> 400")
def junk_filename_brain(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "junk-filename")
    expect_error(ctx.user.upload(brain_id, brain_archive("junk-filename-2"), field_name="file", filename="brain"), 400)
    assert_live(ctx.user, brain_id, archive, "after the filename-brain trick")


@check("junk.first_upload", "junk as the first upload -> 400 and the brain still has no archive")
def junk_first_upload(ctx: Context) -> None:
    brain_id = ctx.user.create_brain("conformance-junk-first")["id"]
    expect_error(ctx.user.upload(brain_id, b"\x1f\x8b garbage"), 400)
    assert_no_archive(ctx.user, brain_id, "after a junk first upload")
    record = json_body(expect_status(ctx.user.record(brain_id), 200))
    require(record.get("checksum") is None, "record checksum must stay null")


@check("guard.empty_push", "an archive with no files over one with 5 -> 409 JSON error, unchanged")
def guard_empty_push(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "guard", 5)
    expect_error(ctx.user.upload(brain_id, empty_archive()), 409)
    assert_live(ctx.user, brain_id, archive, "after a guarded empty push")


@check("guard.force", "the same empty push with ?force=true -> 200, file_count 0")
def guard_force(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "guard-force", 7)
    empty = empty_archive()
    resp = expect_status(ctx.user.upload(brain_id, empty, force=True), 200)
    body = json_body(resp)
    require(body.get("file_count") == 0 and body.get("checksum") == sha256_hex(empty), "forced empty upload result wrong", resp)
    assert_live(ctx.user, brain_id, empty, "after a forced empty push")


@check("guard.threshold", "an empty push over a brain with only 4 files is allowed (guard starts at 5)")
def guard_threshold(ctx: Context) -> None:
    brain_id, _ = brain_with_archive(ctx.user, "guard-4", 4)
    empty = empty_archive()
    expect_status(ctx.user.upload(brain_id, empty), 200)
    assert_live(ctx.user, brain_id, empty, "after an empty push over 4 files")
