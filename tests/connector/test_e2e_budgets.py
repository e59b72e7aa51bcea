"""End to end, content budgets in tokens: Chinese and Japanese text counted as a tokenizer
would (a character about one token), in recall (hybrid and exact) and in brain_reflect's
evidence; the best hit always comes back, cut if it must be.

A real connector process and a real store process, driven by the official MCP client SDK.
"""

from __future__ import annotations

import asyncio
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from tests.connector.conftest import RunningStore
from tests.connector.test_e2e_tool_content import text_of
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured

pytestmark = pytest.mark.timeout(300)

RW = {"brain.read", "brain.write"}
ZH = ("我们的支付服务每周二上午发布。发布之前先运行数据库迁移，然后在预发布环境做冒烟测试，"
      "确认错误率没有上升之后才打开功能开关。发布后十分钟内要盯着监控面板，有异常就立刻回滚。") * 3
JA = ("週末は鎌倉で友達と海辺を散歩する予定です。朝は早めに出発して、昼は駅の近くの蕎麦屋で食べます。"
      "夕方には江ノ電に乗って藤沢まで戻り、夜は家でゆっくり写真を整理するつもりです。") * 3
EN = ("The payments service is released every Tuesday morning. Before a release we run the database "
      "migrations, then a smoke test on staging, and only flip the feature flag once the error rate "
      "holds steady. For ten minutes after a release someone watches the dashboards and rolls back. ") * 3
MIXED = ("周二发布 payments service 之前先跑 database migrations，然后在 staging 上做 smoke test，"
         "确认 error rate 正常以后再打开 feature flag。") * 4


def reference_tokens(text: str) -> int:
    """An estimate made apart from the connector's: East Asian wide characters one token each,
    the rest four characters a token (what tokenizers of current models give, roughly)."""
    wide = sum(1 for char in text if unicodedata.east_asian_width(char) in "WF")
    return wide + -(-(len(text) - wide) // 4)


def test_token_budgets_count_chinese_and_japanese_as_a_tokenizer_would(store: RunningStore, tmp_path: Path) -> None:
    user = store.add_user("budgets")

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, RW)) as client:
            ids = {}
            for name, content, title in (("zh", ZH, "支付服务发布流程"), ("ja", JA, "鎌倉の週末"),
                                         ("en", EN, "Payments release routine"), ("mixed", MIXED, "发布 checklist")):
                saved = structured(await client.call_tool("brain_memorize", {"content": content, "title": title}))
                ids[name] = saved["stored"]["id"]

            async def recall(query: str, **options: Any) -> dict[str, Any]:
                return structured(await client.call_tool("brain_recall", {"query": query, **options}))

            for query, name, content in (("支付服务发布", "zh", ZH), ("鎌倉の週末", "ja", JA),
                                         ("payments release migrations", "en", EN),
                                         ("发布 database migrations", "mixed", MIXED)):
                found = await recall(query, max_tokens=40)
                best = found["results"][0]
                assert best["id"] == ids[name]
                shown = best["content"]
                assert shown and content.startswith(shown) and best["content_truncated"] is True
                total = reference_tokens("".join(hit["content"] for hit in found["results"]))
                assert total <= 40, (name, total)
                # Not a quarter of the budget either: the cut uses most of it.
                assert reference_tokens(shown) >= 25, (name, shown)
                if name in ("zh", "ja"):
                    assert len(shown) <= 40  # a character about one token, not 160 characters for 40 tokens

            # Exact mode (the reference's scoring) takes the same budget.
            exact = await recall("payments release migrations", max_tokens=40, mode="exact")
            assert exact["results"][0]["id"] == ids["en"]
            assert 25 <= reference_tokens(exact["results"][0]["content"]) <= 40

            # max_chars and max_tokens together: both bound it.
            both = await recall("支付服务发布", max_tokens=40, max_chars=10)
            assert len(both["results"][0]["content"]) <= 10
            # The smallest budget still returns the best hit, cut to what fits.
            one = await recall("鎌倉の週末", max_tokens=1)
            assert one["results"][0]["id"] == ids["ja"] and one["results"][0]["content"] == JA[:1]

            # brain_reflect's evidence is counted the same way, and keeps its best memory.
            pack = structured(await client.call_tool("brain_reflect", {"query": "支付服务发布流程", "budget": 100}))
            assert pack["mode"] == "evidence" and pack["count"] >= 1
            first = pack["groups"][0]["memories"]
            assert ids["zh"] in [memory["id"] for group in pack["groups"] for memory in group["memories"]] and first
            assert pack["evidence_tokens"] <= pack["budget_tokens"] == 100
            quoted = "".join(memory["content"] for group in pack["groups"] for memory in group["memories"])
            assert reference_tokens(quoted) <= 100

    with connector(tmp_path, store) as server:
        asyncio.run(scenario(server.base_url))


def test_a_small_budget_cuts_a_japanese_heading_inside_its_words_and_counts_emoji(store: RunningStore, tmp_path: Path) -> None:
    # Chinese and Japanese have no spaces between words: the cut is not moved back to the
    # last space (after the heading's '#'), which left '#' as all of the best hit.
    user = store.add_user("budget-heading")
    heading = "# 東京オフィスの会議室予約ルール\n\n会議室は前日までに予約すること。キャンセルは１時間前まで。"
    mixed = "Redis のキャッシュ TTL は 300 秒。缓存过期时间是三百秒，超过以后重新读取数据库。"
    # Emoji are about a token each too (they were a quarter: ten rockets "cost" two and a half).
    emoji = "🚀🎉✅🍜🍺👍🙏🎊リリース完了" * 6

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, RW)) as client:
            for content in (heading, mixed, emoji):
                structured(await client.call_tool("brain_memorize", {"content": content}))
            for query, content in (("会議室の予約", heading), ("キャッシュ 缓存", mixed), ("リリース完了", emoji)):
                found = structured(await client.call_tool("brain_recall", {"query": query, "max_tokens": 5}))
                best = found["results"][0]
                assert content.startswith(best["content"]) and best["content_truncated"] is True
                assert 4 <= reference_tokens(best["content"]) <= 5, best["content"]

    with connector(tmp_path, store) as server:
        asyncio.run(scenario(server.base_url))


def test_a_cut_that_would_keep_almost_nothing_leaves_the_content_out(store: RunningStore, tmp_path: Path) -> None:
    # A hit after the best one was shown as "T" of 232 characters when the budget ran low: noise.
    # Below ten tokens (40 English characters, 10 Chinese ones) the content is left out and the
    # text says so; the hit keeps its id and title for brain_read. The best hit is always cut to fit.
    user = store.add_user("budget-floor")
    release = "Payments release: Tuesday mornings, after the smoke test on staging."
    ritual = "发布流程：支付服务每周二上午发布，先在预发布环境做冒烟测试。"

    async def scenario(base: str) -> None:
        async with mcp_session(base + "/mcp", mint(base, user, RW)) as client:
            for content, title in ((release, "Payments release"), (EN, "Payments release routine"),
                                   (ritual, "支付发布"), (ZH, "支付服务发布流程")):
                structured(await client.call_tool("brain_memorize", {"content": content, "title": title}))

            async def recall(query: str, **options: Any) -> Any:
                return await client.call_tool("brain_recall", {"query": query, "limit": 2, **options})

            for query, mode, unit in (("payments release", "exact", "max_chars"), ("支付服务发布", "hybrid", "max_tokens")):
                whole = structured(await recall(query, mode=mode))["results"]
                assert len(whole) == 2 and not any(hit.get("content_truncated") for hit in whole)
                first, other = whole[0]["content"], whole[1]["content"]
                budget = len(first) if unit == "max_chars" else reference_tokens(first)
                # Five left: the second hit's content is left out, said so, its id and title kept.
                answer = await recall(query, mode=mode, **{unit: budget + 5})
                best, second = structured(answer)["results"]
                assert best["content"] == first and "content_truncated" not in best
                assert second["id"] == whole[1]["id"] and second["title"] == whole[1]["title"]
                assert second["content"] == "" and second["content_truncated"] is True
                assert second["content_length"] == len(other)
                assert "content left out: too little of the recall budget was left" in text_of(answer)
                # Twelve tokens (of Chinese: twelve characters, each about a token) are worth showing.
                answer = await recall(query, mode=mode, **{unit: budget + (48 if unit == "max_chars" else 12)})
                second = structured(answer)["results"][1]
                assert second["content"] and other.startswith(second["content"]) and second["content_truncated"]
                assert "content cut by the recall budget" in text_of(answer)
                if unit == "max_tokens":
                    assert len(second["content"]) == 12
            # The best hit is still cut to whatever fits, however little.
            tiny = structured(await recall("payments release", mode="exact", max_chars=3))["results"]
            assert tiny[0]["content"] and len(tiny[0]["content"]) <= 3 and tiny[1]["content"] == ""

    with connector(tmp_path, store) as server:
        asyncio.run(scenario(server.base_url))
