"""Two users: another user's brain is invisible (404 everywhere, never 403) and untouched."""

from __future__ import annotations

from contract.conformance.archives import brain_archive, empty_archive
from contract.conformance.checks._common import assert_live, brain_with_archive, versions_of
from contract.conformance.context import Context
from contract.conformance.registry import check, expect_error, expect_status, json_body, require


@check("iso.distinct_users", "the two tokens belong to different users (/auth/me ids differ)", needs_token2=True)
def iso_distinct(ctx: Context) -> None:
    me1 = json_body(expect_status(ctx.user.request("GET", "/auth/me"), 200))
    me2 = json_body(expect_status(ctx.second().request("GET", "/auth/me"), 200))
    require(me1["user"]["id"] != me2["user"]["id"], "--token and --token2 must be two different users")


@check("iso.foreign_brain", "user two gets 404 (never 403) for every operation on user one's brain, which stays unchanged", needs_token2=True)
def iso_foreign_brain(ctx: Context) -> None:
    owner, intruder = ctx.user, ctx.second()
    brain_id, _ = brain_with_archive(owner, "iso-a", 6)
    live = brain_archive("iso-b", 6)
    expect_status(owner.upload(brain_id, live), 200)
    (entry,) = versions_of(owner, brain_id)
    version = entry["version"]
    for target in (brain_id, brain_id.upper()):
        expect_error(intruder.record(target), 404)
        expect_error(intruder.download(target), 404)
        expect_error(intruder.download(target, headers={"If-None-Match": "*"}), 404)
        expect_error(intruder.download(target, version=version), 404)
        expect_error(intruder.versions(target), 404)
        expect_error(intruder.upload(target, brain_archive("iso-evil")), 404)
        expect_error(intruder.upload(target, brain_archive("iso-evil"), headers={"If-None-Match": "*"}), 404)
        expect_error(intruder.upload(target, empty_archive(), force=True), 404)
        expect_error(intruder.request("POST", f"/api/brains/{target}/versions/{version}/restore"), 404)
        expect_error(intruder.request("DELETE", f"/api/brains/{target}"), 404)
    listing = json_body(expect_status(intruder.request("GET", "/api/brains"), 200))
    require(brain_id not in [r.get("id") for r in listing], "user two's listing shows user one's brain")
    assert_live(owner, brain_id, live, "user one's brain after user two's attempts")
    require(len(versions_of(owner, brain_id)) == 1, "user two's attempts changed user one's snapshots")


@check("iso.own_brains_private", "a brain user two creates is invisible to user one", needs_token2=True)
def iso_own_private(ctx: Context) -> None:
    theirs = ctx.second().create_brain("conformance-iso-theirs")["id"]
    expect_error(ctx.user.record(theirs), 404)
    expect_error(ctx.user.versions(theirs), 404)
    listing = json_body(expect_status(ctx.user.request("GET", "/api/brains"), 200))
    require(theirs not in [r.get("id") for r in listing], "user one's listing shows user two's brain")
