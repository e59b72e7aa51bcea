"""Conditional uploads: If-Match, If-Match: *, If-None-Match: *, and racing writers."""

from __future__ import annotations

import threading
from collections import Counter

import httpx

from contract.conformance.archives import brain_archive, sha256_hex
from contract.conformance.checks._common import assert_live, assert_no_archive, brain_with_archive, quoted
from contract.conformance.context import Context, UserClient
from contract.conformance.registry import check, expect_error, expect_status, require

RACE_WRITERS = 8
RACE_ROUNDS = 3


def _expect_412(resp: httpx.Response, current: str | None) -> None:
    body = expect_error(resp, 412)
    require("current_checksum" in body, "412 body must carry current_checksum", resp)
    require(body["current_checksum"] == current, f"current_checksum must be {current!r}", resp)


@check("cond.if_match_current", 'If-Match: "<stored checksum>" -> 200 and the new ETag')
def cond_if_match_current(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "im-ok")
    new = brain_archive("im-ok-2")
    resp = expect_status(ctx.user.upload(brain_id, new, headers={"If-Match": quoted(sha256_hex(archive))}), 200)
    require(resp.headers.get("etag") == quoted(sha256_hex(new)), "ETag must be the new checksum", resp)
    assert_live(ctx.user, brain_id, new, "after a matching If-Match")


@check("cond.if_match_stale", 'If-Match with another checksum -> 412 {error, current_checksum}, nothing changed')
def cond_if_match_stale(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "im-stale")
    resp = ctx.user.upload(brain_id, brain_archive("im-stale-2"), headers={"If-Match": quoted("a" * 64)})
    _expect_412(resp, sha256_hex(archive))
    assert_live(ctx.user, brain_id, archive, "after a failed If-Match")


@check("cond.if_match_star", "If-Match: * -> 412 (current_checksum null) with no archive, 200 once one exists")
def cond_if_match_star(ctx: Context) -> None:
    brain_id = ctx.user.create_brain("conformance-im-star")["id"]
    first = brain_archive("im-star")
    _expect_412(ctx.user.upload(brain_id, first, headers={"If-Match": "*"}), None)
    assert_no_archive(ctx.user, brain_id, "after If-Match: * on an empty brain")
    expect_status(ctx.user.upload(brain_id, first), 200)
    second = brain_archive("im-star-2")
    expect_status(ctx.user.upload(brain_id, second, headers={"If-Match": "*"}), 200)
    assert_live(ctx.user, brain_id, second, "after If-Match: *")


@check("cond.if_none_match_star", "If-None-Match: * creates only: 200 on an empty brain, then 412 with current_checksum")
def cond_if_none_match_star(ctx: Context) -> None:
    brain_id = ctx.user.create_brain("conformance-inm-star")["id"]
    first = brain_archive("inm-star")
    expect_status(ctx.user.upload(brain_id, first, headers={"If-None-Match": "*"}), 200)
    _expect_412(ctx.user.upload(brain_id, brain_archive("inm-star-2"), headers={"If-None-Match": "*"}), sha256_hex(first))
    assert_live(ctx.user, brain_id, first, "after a refused If-None-Match: *")


def _race_round(ctx: Context, brain_id: str, base: str, round_no: int) -> tuple[Counter[int], dict[int, bytes]]:
    """Fire RACE_WRITERS uploads with the same If-Match at once; return statuses and winners."""
    archives = [brain_archive(f"race-{round_no}-{i}") for i in range(RACE_WRITERS)]
    barrier = threading.Barrier(RACE_WRITERS)
    statuses: dict[int, int] = {}
    errors: list[str] = []

    def writer(i: int) -> None:
        with ctx.new_client() as http:
            client = UserClient(http, ctx.user.token, pacer=ctx.user.pacer)
            try:
                barrier.wait(timeout=30)
                statuses[i] = client.upload(brain_id, archives[i], headers={"If-Match": quoted(base)}).status_code
            except (httpx.HTTPError, threading.BrokenBarrierError) as exc:
                errors.append(f"writer {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(RACE_WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=ctx.timeout * 3)
    require(not errors, f"racing writers failed: {errors}")
    winners = {i: archives[i] for i, s in statuses.items() if s == 200}
    return Counter(statuses.values()), winners


@check("cond.race", f"{RACE_WRITERS} concurrent uploads with the same If-Match: exactly one 200, the rest 412 ({RACE_ROUNDS} rounds)")
def cond_race(ctx: Context) -> str | None:
    brain_id, archive = brain_with_archive(ctx.user, "race")
    base = sha256_hex(archive)
    limited = 0
    for round_no in range(RACE_ROUNDS):
        counts, winners = _race_round(ctx, brain_id, base, round_no)
        # A writer still rate limited after its retries (429) neither won nor lost; anything
        # else must be a 412.
        limited += counts[429]
        require(
            counts[200] == 1 and counts[412] + counts[429] == RACE_WRITERS - 1,
            f"round {round_no}: expected one 200 and {RACE_WRITERS - 1} 412, got {dict(counts)}",
        )
        (winner,) = winners.values()
        assert_live(ctx.user, brain_id, winner, f"round {round_no}: the live archive must be the winner's")
        base = sha256_hex(winner)
    return f"{limited} writers stayed rate limited" if limited else None


@check("cond.force_only_guard", "?force=true does not override If-Match: a stale tag still gets 412")
def cond_force_only_guard(ctx: Context) -> None:
    brain_id, archive = brain_with_archive(ctx.user, "force-cond")
    resp = ctx.user.upload(brain_id, brain_archive("force-cond-2"), headers={"If-Match": quoted("b" * 64)}, force=True)
    _expect_412(resp, sha256_hex(archive))
    assert_live(ctx.user, brain_id, archive, "after a forced upload with a stale If-Match")


