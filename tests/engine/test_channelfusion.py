"""The channel fusion's arithmetic: z-scores, sparse channels, neighbours, the floor's cuts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from connector.engine.recall.channelfusion import ChannelFusion, Z_POPULATION, fuse_channels, neighbours, standout, zscores


def _population(count: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.3, 0.05, count).astype(np.float32)


def test_a_missing_channel_does_not_vote_and_the_scale_stays() -> None:
    use = _population(100)
    use[7] = 0.9
    eligible = np.ones(100, dtype=bool)
    fusion = ChannelFusion(exact=0.0, bm25=0.0, use=1.0, e5=1.0, clip=3.0)
    alone, _ = fuse_channels({"use": use, "e5": None}, fusion, eligible)
    both, _ = fuse_channels({"use": use, "e5": use.copy()}, fusion, eligible)
    # A weighted mean: the same channel twice scores as once; a missing one changes nothing.
    assert np.allclose(alone, both) and float(alone[7]) == 3.0  # clipped


def test_a_sparse_channel_is_scaled_by_its_best_not_z_scored() -> None:
    bm25 = np.zeros(100, dtype=np.float32)
    bm25[[3, 4]] = [4.0, 1.0]
    fused, _ = fuse_channels({"bm25": bm25}, ChannelFusion(exact=0, use=0, e5=0, bm25=1.0, clip=3.0), np.ones(100, bool))
    # z-scored, the weak match would stand over 2 deviations out (as high as a strong match by
    # meaning); scaled, it is a quarter of the best.
    assert fused[3] == 3.0 and fused[4] == 0.75 and fused[0] == 0.0
    assert zscores(bm25, np.ones(100, bool), 100.0)[4] > 2


def test_a_turn_gets_its_session_neighbours_share() -> None:
    folders = ["s1", "s1", "s1", "s2", "s2"]
    before, after = neighbours(folders)
    assert before.tolist() == [-1, 0, 1, -1, 3] and after.tolist() == [1, 2, -1, 4, -1]
    use = np.array([0.9, 0.1, 0.1, 0.1, 0.1], dtype=np.float32)
    fusion = ChannelFusion(exact=0, bm25=0, e5=0, use=1.0, context=0.5)
    fused, _ = fuse_channels({"use": use}, fusion, np.ones(5, bool), (before, after))
    plain, _ = fuse_channels({"use": use}, ChannelFusion(exact=0, bm25=0, e5=0, use=1.0), np.ones(5, bool), (before, after))
    # The turn after the strong one rises by half its score; a turn of another session does not.
    assert fused[1] > plain[1] and fused[3] == plain[3] and fused[2] == plain[2]


def test_the_floor_cuts_only_in_a_populated_brain_and_the_gate_empties() -> None:
    fusion = ChannelFusion(exact=0, bm25=0, e5=0, use=1.0, window=1.0, hit_floor=1.5)
    small = _population(Z_POPULATION - 1)
    small[0] = 0.9
    _, listed = fuse_channels({"use": small}, fusion, np.ones(len(small), bool))
    assert listed.all()  # too few memories for a z-score to say which stand out
    large = _population(200)
    large[0] = 0.9
    _, listed = fuse_channels({"use": large}, fusion, np.ones(200, bool))
    assert listed[0] and listed.sum() < 10
    _, gated = fuse_channels({"use": large}, fusion, np.ones(200, bool), matches_well=False)
    assert not gated.any()
    _, ungated = fuse_channels({"use": large}, ChannelFusion(exact=0, bm25=0, e5=0, use=1.0, gate=False), np.ones(200, bool),
                               matches_well=False)
    assert ungated.all()


def test_offsets_move_a_memory_before_anything_is_listed() -> None:
    use = _population(100)
    use[[1, 2]] = [0.9, 0.88]
    offsets = np.zeros(100, dtype=np.float32)
    offsets[1] = np.log(0.25)  # superseded
    fused, listed = fuse_channels({"use": use}, ChannelFusion(exact=0, bm25=0, e5=0, use=1.0), np.ones(100, bool),
                                  offsets=offsets)
    assert fused[2] > fused[1] and listed[1] and listed[2]


def test_a_lookalike_is_listed_only_when_a_model_sets_it_apart() -> None:
    # Memory 0 is the answer (a query word, both models); 1 shares no word and is close by
    # meaning (a lookalike); 2 shares no word but one model puts it at the clip (another language).
    use = _population(200)
    e5 = _population(200, seed=2)
    use[[0, 1, 2]] = [0.9, 0.5, 0.9]
    e5[[0, 1, 2]] = [0.9, 0.5, 0.35]
    bm25 = np.zeros(200, dtype=np.float32)
    bm25[0] = 2.0
    channels = {"bm25": bm25, "use": use, "e5": e5}
    fusion = ChannelFusion(exact=0, bm25=0.25, use=0.5, e5=1.0, clip=3.0, window=3.0, hit_floor=1.0)
    fused, listed = fuse_channels(channels, fusion, np.ones(200, bool))
    assert listed[[0, 1, 2]].all() and fused[1] >= 1.0
    _, cut = fuse_channels(channels, replace(fusion, lookalike=3.0), np.ones(200, bool))
    assert cut[0] and not cut[1] and cut[2]
    # A memory holding only a sliver of the query's words (a common one: a tenth of the best
    # memory's BM25) counts as holding none when ``lookalike_words`` asks for more.
    bm25[1] = 0.2
    _, some = fuse_channels(channels, replace(fusion, lookalike=3.0), np.ones(200, bool))
    _, sliver = fuse_channels(channels, replace(fusion, lookalike=3.0, lookalike_words=0.5), np.ones(200, bool))
    assert some[1] and not sliver[1] and sliver[0] and sliver[2]
    bm25[1] = 0.0
    # Before the brain's e5 vectors are there, USE alone decides, at its own standout.
    use[1] = 0.525  # a z-score near 2.87 over this brain
    no_e5 = {"bm25": bm25, "use": use, "e5": None}
    z = float(zscores(use, np.ones(200, bool), 3.0)[1])
    assert 2.75 < z < 3.0
    _, strict = fuse_channels(no_e5, replace(fusion, lookalike=3.0), np.ones(200, bool))
    _, alone = fuse_channels(no_e5, replace(fusion, lookalike=3.0, lookalike_use_alone=2.75), np.ones(200, bool))
    assert not strict[1] and alone[1]
    use[1] = 0.5
    # The best is always listed, whatever it holds.
    use[0] = 0.6  # no memory holds a query word: the best and the standout are listed
    fused, alone = fuse_channels({"bm25": np.zeros(200, np.float32), "use": use, "e5": e5},
                                 replace(fusion, lookalike=3.0, window=10.0, hit_floor=None), np.ones(200, bool))
    assert int(np.argmax(fused)) == 0 and alone[0] and alone[2] and not alone[1] and alone.sum() == 2


def test_e5_keeps_its_order_above_the_clip_of_the_others() -> None:
    # Two memories stand far out of the brain in both models; e5 (the stronger model) puts
    # memory 1 first, USE memory 0. Clipped alike, both reach the clip in both models and the
    # tie is broken elsewhere; with e5's own higher clip its order decides.
    use = _population(300)
    e5 = _population(300, seed=2)
    use[[0, 1]] = [0.95, 0.9]
    e5[[0, 1]] = [0.47, 0.52]  # z-scores ~3.2 and ~4.2
    eligible = np.ones(300, dtype=bool)
    fusion = ChannelFusion(exact=0, bm25=0, use=0.5, e5=1.0, clip=3.0)
    alike, _ = fuse_channels({"use": use, "e5": e5}, fusion, eligible)
    assert alike[0] == alike[1] == 3.0
    own, _ = fuse_channels({"use": use, "e5": e5}, replace(fusion, clip_e5=5.0), eligible)
    assert own[1] > own[0] > 3.0 and float(own.max()) <= 5.0
    # USE alone (e5 not ready) is clipped as before.
    alone, _ = fuse_channels({"use": use, "e5": None}, replace(fusion, clip_e5=5.0), eligible)
    assert alone[0] == alone[1] == 3.0


def test_a_turn_can_take_a_larger_share_from_the_turn_it_answers() -> None:
    folders = ["s1"] * 5
    use = np.array([0.1, 0.1, 0.9, 0.1, 0.1], dtype=np.float32)
    fusion = ChannelFusion(exact=0, bm25=0, e5=0, use=1.0, context=0.1, context_before=0.5)
    fused, _ = fuse_channels({"use": use}, fusion, np.ones(5, bool), neighbours(folders))
    plain, _ = fuse_channels({"use": use}, replace(fusion, context=0.0, context_before=None), np.ones(5, bool), neighbours(folders))
    # The reply (after the strong turn) takes half its score, the turn before it a tenth.
    assert fused[3] - plain[3] == pytest.approx(0.5 * plain[2], rel=1e-5)
    assert fused[1] - plain[1] == pytest.approx(0.1 * plain[2], rel=1e-5)


def test_the_turns_after_the_first_listed_ones_are_listed_after_them() -> None:
    # 60 memories in sessions of ten: memory 12 is the best, 30 the second; 13 (the reply to 12)
    # scores too low to be listed on its own; 31 scores above some listed memory (1).
    use = _population(60, seed=4)
    use[[12, 30, 1, 31, 40]] = [0.9, 0.85, 0.7, 0.8, 0.75]
    use[13] = 0.35
    folders = [f"s{n // 10}" for n in range(60)]
    fusion = ChannelFusion(exact=0, bm25=0, e5=0, use=1.0, clip=6.0, window=2.0, hit_floor=1.0)
    fused, alone = fuse_channels({"use": use}, fusion, np.ones(60, bool), neighbours(folders))
    assert not alone[13] and alone[[12, 30, 31, 1, 40]].all() and alone.sum() == 5
    followed, listed = fuse_channels({"use": use}, replace(fusion, follow=2), np.ones(60, bool), neighbours(folders))
    # The replies to the first two (12 and 30): 13 joins, 31 already is; nothing else moves.
    assert np.flatnonzero(listed).tolist() == [1, 12, 13, 30, 31, 40]
    lowest = float(fused[alone].min())
    assert followed[13] < lowest and np.array_equal(followed[alone], fused[alone])
    # A follower scoring above a memory listed on its own is put just below the lowest of them.
    use[13] = 0.78
    fused, alone = fuse_channels({"use": use}, replace(fusion, hit_floor=2.9), np.ones(60, bool), neighbours(folders))
    followed, listed = fuse_channels({"use": use}, replace(fusion, hit_floor=2.9, follow=2), np.ones(60, bool), neighbours(folders))
    assert not alone[13] and listed[13] and followed[13] < float(fused[alone].min())
    # The last turn of a session has no reply; an ineligible reply is not listed.
    eligible = np.ones(60, bool)
    eligible[13] = False
    _, listed = fuse_channels({"use": use}, replace(fusion, follow=2), eligible, neighbours(folders))
    assert not listed[13]


def _sessions(seed: int) -> tuple[np.ndarray, list[str], ChannelFusion]:
    # 60 memories in sessions of ten; memory 25 is the best and the only one listed on its own.
    # Its neighbours score low (26, 24, 23) or high but not enough to be listed (27).
    use = _population(60, seed=seed)
    use[25] = 0.95
    use[[23, 24, 26, 27]] = [0.25, 0.3, 0.32, 0.6]
    folders = [f"s{n // 10}" for n in range(60)]
    return use, folders, ChannelFusion(exact=0, bm25=0, e5=0, use=1.0, clip=6.0, window=2.0, hit_floor=4.0)


def test_followers_reach_further_and_before_nearer_first_below_every_own_listed() -> None:
    use, folders, fusion = _sessions(5)
    fused, alone = fuse_channels({"use": use}, fusion, np.ones(60, bool), neighbours(folders))
    assert np.flatnonzero(alone).tolist() == [25] and fused[27] > fused[26] > fused[24] > fused[23]
    # The turn after, two turns away: 26 then 27 (which outscores 26 but is farther).
    followed, listed = fuse_channels({"use": use}, replace(fusion, follow=1, follow_reach=2), np.ones(60, bool), neighbours(folders))
    assert np.flatnonzero(listed).tolist() == [25, 26, 27]
    assert followed[25] == fused[25] > followed[26] > followed[27]
    # And the turn before: 26 (after, 1), 24 (before, 1), 27 (after, 2), 23 (before, 2), in that order,
    # each below everything listed before it, whatever its own score.
    both = replace(fusion, follow=1, follow_reach=2, follow_before=True)
    followed, listed = fuse_channels({"use": use}, both, np.ones(60, bool), neighbours(folders))
    assert np.flatnonzero(listed).tolist() == [23, 24, 25, 26, 27]
    assert followed[25] == fused[25] > followed[26] > followed[24] > followed[27] > followed[23]
    assert followed[26] == fused[26] and followed[24] == fused[24]  # already lower: they keep their scores
    unlisted = ~listed
    assert np.array_equal(followed[unlisted], fused[unlisted])
    # Only the turn before, one turn away.
    _, listed = fuse_channels({"use": use}, replace(fusion, follow=1, follow_before=True), np.ones(60, bool), neighbours(folders))
    assert np.flatnonzero(listed).tolist() == [24, 25, 26]


def test_followers_never_displace_a_memory_listed_on_its_own() -> None:
    use, folders, fusion = _sessions(6)
    use[[27, 41]] = [0.85, 0.9]  # now listed on their own, below 25
    fusion = replace(fusion, hit_floor=3.5)
    fused, alone = fuse_channels({"use": use}, fusion, np.ones(60, bool), neighbours(folders))
    assert np.flatnonzero(alone).tolist() == [25, 27, 41]
    followed, listed = fuse_channels({"use": use}, replace(fusion, follow=2, follow_reach=2, follow_before=True),
                                     np.ones(60, bool), neighbours(folders))
    # The first two are 25 and 41: 27 (25's turn two after) keeps its own score and place; 26 is
    # listed once (after 25, before 27); 41's neighbours 42, 40 and 43 come in too (39 is in the
    # session before 41's).
    assert np.flatnonzero(listed).tolist() == [23, 24, 25, 26, 27, 40, 41, 42, 43]
    assert np.array_equal(followed[alone], fused[alone])
    lowest = float(fused[alone].min())
    assert float(followed[listed & ~alone].max()) < lowest


def test_followers_stay_in_their_folder_and_skip_ineligible_memories() -> None:
    use, folders, fusion = _sessions(7)
    both = replace(fusion, follow=1, follow_reach=2, follow_before=True)
    # The best is the last turn of its session: nothing after it, the two before it.
    use[25], use[29] = 0.3, 0.95
    _, listed = fuse_channels({"use": use}, both, np.ones(60, bool), neighbours(folders))
    assert np.flatnonzero(listed).tolist() == [27, 28, 29]
    # The first turn of its session: the two after it only.
    use[29], use[20] = 0.3, 0.95
    _, listed = fuse_channels({"use": use}, both, np.ones(60, bool), neighbours(folders))
    assert np.flatnonzero(listed).tolist() == [20, 21, 22]
    # An ineligible turn is not listed; the walk goes on past it to the turn two away.
    eligible = np.ones(60, bool)
    eligible[21] = False
    _, listed = fuse_channels({"use": use}, both, eligible, neighbours(folders))
    assert np.flatnonzero(listed).tolist() == [20, 22]
    # A session of two: the walk stops at the session's end (30 is in the next session).
    two = ["a"] * 28 + ["b", "b"] + ["c"] * 30
    use[20], use[28] = 0.3, 0.95
    _, listed = fuse_channels({"use": use}, both, np.ones(60, bool), neighbours(two))
    assert np.flatnonzero(listed).tolist() == [28, 29]


def _follow_before_generalised(fused: np.ndarray, listed: np.ndarray, eligible: np.ndarray, after: np.ndarray,
                               count: int) -> tuple[np.ndarray, np.ndarray]:
    """The rule as shipped in session 16 (the turn right after the first ``count``), for comparison."""
    candidates = np.flatnonzero(listed)
    firsts = candidates[np.lexsort((candidates, -fused[candidates]))][:count]
    following = after[firsts]
    following = following[(following >= 0) & ~listed[following] & eligible[following]]
    fused, listed = fused.copy(), listed.copy()
    cap = np.nextafter(np.float32(float(fused[candidates].min())), np.float32(-np.inf))
    fused[following] = np.minimum(fused[following], cap)
    listed[following] = True
    return fused, listed


@pytest.mark.parametrize("seed", range(8))
def test_the_defaults_follow_the_turn_right_after_as_before(seed: int) -> None:
    assert ChannelFusion().follow_reach == 1 and ChannelFusion().follow_before is False
    rng = np.random.default_rng(seed)
    count = 200
    use = _population(count, seed=seed + 10)
    use[rng.choice(count, 12, replace=False)] += rng.uniform(0.2, 0.6, 12).astype(np.float32)
    folders = sorted(f"f{n:03d}" for n in rng.integers(0, 40, count))
    eligible = rng.random(count) > 0.1
    adjacent = neighbours(folders)
    fusion = ChannelFusion(exact=0, bm25=0, e5=0, use=1.0, clip=6.0, window=2.5, hit_floor=1.5)
    fused, alone = fuse_channels({"use": use}, fusion, eligible, adjacent)
    for follow in (1, 2, 3):
        followed, listed = fuse_channels({"use": use}, replace(fusion, follow=follow), eligible, adjacent)
        expected_fused, expected_listed = _follow_before_generalised(fused, alone, eligible, adjacent[1], follow)
        assert np.array_equal(listed, expected_listed) and np.array_equal(followed, expected_fused)
        assert listed.sum() > alone.sum() or follow == 1


def test_a_query_fusion_takes_the_e5_regime_only_once_e5_votes() -> None:
    fusion = ChannelFusion(clip=3.0, clip_e5=5.0, hit_floor=1.6, clip_with_e5=5.0, hit_floor_with_e5=1.7)
    eligible = np.ones(50, dtype=bool)
    use = _population(50)
    assert fusion.for_query({"use": use, "e5": None}, eligible, None) == fusion
    with_e5 = fusion.for_query({"use": use, "e5": _population(50, seed=2)}, eligible, None)
    assert (with_e5.clip, with_e5.clip_e5, with_e5.hit_floor) == (5.0, None, 1.7)
    plain = ChannelFusion(clip=3.0, clip_e5=5.0, hit_floor=1.6)  # no regime, no adaptation: itself
    assert plain.for_query({"use": use, "e5": use}, eligible, np.ones(50, np.float32)) is plain


def test_a_query_fusion_weighs_each_channel_by_what_it_says_of_itself() -> None:
    eligible = np.ones(200, dtype=bool)
    flat = _population(200, seed=3)
    sharp = flat.copy()
    sharp[5] = 2.0  # one memory far above the rest: a large gap to the tenth best
    assert standout(sharp, eligible) > 5 * standout(flat, eligible)
    fusion = ChannelFusion(exact=0.2, bm25=0.5, use=0.25, e5=1.0, adapt_models=1.0, adapt_words=1.0)
    words = np.zeros(200, dtype=np.float32)
    words[7] = 0.5  # the best memory holds half of the query's words
    adapted = fusion.for_query({"use": flat, "e5": sharp}, eligible, words)
    assert adapted.e5 == pytest.approx(standout(sharp, eligible))
    assert adapted.use == pytest.approx(0.25 * standout(flat, eligible))
    assert (adapted.bm25, adapted.exact) == (pytest.approx(0.25), pytest.approx(0.1))
    # Ineligible memories say nothing; a channel that says nothing keeps a small weight, not none.
    eligible[7] = False
    assert fusion.for_query({"use": flat, "e5": None}, eligible, words).bm25 == pytest.approx(0.5 * 0.01)
    assert standout(np.full(200, 0.4, np.float32), np.ones(200, bool)) == pytest.approx(0.05)
    # Without its words share (no word channel), only the models adapt.
    assert fusion.for_query({"use": flat, "e5": None}, np.ones(200, bool), None).bm25 == pytest.approx(0.5 * 0.01)
    # In a small brain nothing adapts: two memories are always two deviations apart.
    few = np.zeros(200, dtype=bool)
    few[: Z_POPULATION - 1] = True
    assert fusion.for_query({"use": flat, "e5": sharp}, few, words) == fusion


def _outvoted(seed: int = 5) -> tuple[dict[str, np.ndarray], ChannelFusion]:
    # 80 memories: USE (weighing more) sets 0-4 apart; e5 is surest of memory 50, which USE
    # scores low, so the fusion alone ranks it far below them and does not list it.
    use = _population(80, seed=seed)
    use[[0, 1, 2, 3, 4]] = [0.9, 0.88, 0.86, 0.84, 0.82]
    use[50] = 0.2
    e5 = _population(80, seed=seed + 1)
    e5[50] = 0.5
    fusion = ChannelFusion(exact=0, bm25=0, use=1.0, e5=0.4, clip=4.0, window=1.5, hit_floor=1.0)
    return {"use": use, "e5": e5}, fusion


def test_e5s_best_takes_the_lowest_listed_place_among_the_first_three() -> None:
    channels, fusion = _outvoted()
    eligible = np.ones(80, bool)
    fused, alone = fuse_channels(channels, fusion, eligible)
    assert not alone[50] and alone[[0, 1, 2, 3, 4]].all()
    kept, listed = fuse_channels(channels, replace(fusion, e5_best_within=3), eligible)
    before = np.flatnonzero(alone)[np.argsort(-fused[alone], kind="stable")].tolist()
    # As many listed; the lowest of them gives its place; 50 ranks third, just below the second.
    assert listed.sum() == alone.sum() and listed[50] and not listed[before[-1]]
    ranked = np.flatnonzero(listed)[np.argsort(-kept[listed], kind="stable")].tolist()
    assert ranked == before[:2] + [50] + before[2:-1]
    assert kept[before[1]] > kept[50] > kept[before[2]] and np.array_equal(np.delete(kept, 50), np.delete(fused, 50))
    # Already among the first three, nothing changes; an ineligible best gives way to e5's next.
    channels["e5"][before[0]] = 0.6
    same, same_listed = fuse_channels(channels, replace(fusion, e5_best_within=3), eligible)
    plain, plain_listed = fuse_channels(channels, fusion, eligible)
    assert np.array_equal(same, plain) and np.array_equal(same_listed, plain_listed)
    eligible[before[0]] = False
    _, listed = fuse_channels(channels, replace(fusion, e5_best_within=3), eligible)
    assert listed[50] and not listed[before[0]]


def test_e5s_best_joins_a_memory_listed_alone_and_never_fills_an_empty_answer() -> None:
    channels, fusion = _outvoted()
    channels["use"][[1, 2, 3, 4]] = 0.3  # only 0 stands out
    eligible = np.ones(80, bool)
    _, alone = fuse_channels(channels, fusion, eligible)
    assert np.flatnonzero(alone).tolist() == [0]
    kept, listed = fuse_channels(channels, replace(fusion, e5_best_within=3), eligible)
    assert np.flatnonzero(listed).tolist() == [0, 50] and kept[0] > kept[50]
    # The gate said the query is not answered: nothing is listed, e5's best neither.
    _, gated = fuse_channels(channels, replace(fusion, e5_best_within=3), eligible, matches_well=False)
    assert not gated.any()
    # Without e5's vectors (not computed yet) there is no e5 best to keep.
    _, without = fuse_channels({"use": channels["use"], "e5": None}, replace(fusion, e5_best_within=3), eligible)
    assert np.flatnonzero(without).tolist() == [0]


def test_the_shipped_fusion_keeps_e5s_best_among_the_first_two() -> None:
    from connector.engine.recall.channelfusion import CHANNEL_FUSION

    assert CHANNEL_FUSION.e5_best_within == 2 and ChannelFusion().e5_best_within is None
