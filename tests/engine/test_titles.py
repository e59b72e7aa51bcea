"""Titles read as text (Markdown marks out), and file names from titles: exactly the reference's
slug for ASCII titles, a transliteration for others, never a clash."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from connector.engine.format.brain import Brain
from connector.engine.format.titles import plain_title
from connector.engine.writes.memorize import connector_title, slugify
from connector.engine.writes.ops import connector_memorize
from connector.mcp import render
from tests.support.fixtures import project_parity_dir

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("raw,plain", [
    ("**blue flowerpot**", "blue flowerpot"),
    ("# Deploy *checklist*", "Deploy checklist"),
    ("Run `make dev` first", "Run make dev first"),
    ("[Docs](https://example.org) and ![logo](x.png)", "Docs and logo"),
    ("Tom &amp; Jerry", "Tom & Jerry"),
    ("snake_case_name stays", "snake_case_name stays"),
    ("1. Install first", "1. Install first"),
    ("<b>raw html</b> stays text", "<b>raw html</b> stays text"),
    ("Plain title", "Plain title"),
])
def test_plain_title_takes_out_markdown_marks(raw: str, plain: str) -> None:
    assert plain_title(raw) == plain


def test_titles_derived_or_given_carry_no_markdown() -> None:
    assert connector_title("**blue flowerpot** on the balcony\nmore") == "blue flowerpot on the balcony"
    assert connector_title("anything", "## *Kettle* rules") == "Kettle rules"


def test_mcp_texts_show_titles_without_markdown() -> None:
    text = render.recall_text({"count": 1, "results": [{"id": "mem_20260301_abcdef", "title": "**blue flowerpot**",
                                                         "score": 1.0}]})
    assert "1. blue flowerpot (mem_20260301_abcdef" in text and "**" not in text


def _reference_slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48].strip("-")
    return slug or "memory"


def test_ascii_titles_slug_exactly_as_the_reference_does() -> None:
    titles = []
    for index in sorted((project_parity_dir() / "brains").glob("*/index.json")):
        titles += [entry["title"] for entry in json.loads(index.read_text())["memories"].values()]
    titles += ["Dr. Smith's notes", "  --Weird__Title!!  ", "A" * 80, "", "123 go"]
    ascii_titles = [title for title in titles if title.isascii()]
    assert len(ascii_titles) > 100
    assert [slugify(title) for title in ascii_titles] == [_reference_slug(title) for title in ascii_titles]


@pytest.mark.parametrize("title,slug", [
    ("Dr. Müller's notes", "dr-muller-s-notes"),
    ("蓝色花盆", "lan-se-hua-pen"),
    ("東京の天気", "dong-jing-no-tian-qi"),
    # Kana read with the small kana after them (anyascii alone: "kiyatshiyu", "ofuisu", "chietku").
    ("Redisキャッシュ設定", "rediskyasshu-she-ding"),
    ("東京オフィスのチェックリスト", "dong-jing-ofisunochekkurisuto"),
    ("しゅっちょうのジャズ", "shutchounojazu"),
    ("Ça va? Straße", "ca-va-strasse"),
])
def test_other_titles_are_transliterated(title: str, slug: str) -> None:
    assert slugify(title) == slug


def test_file_names_of_non_ascii_titles_stay_unique() -> None:
    brain = Brain()
    paths = [connector_memorize("盆栽は毎朝水をやる", title="蓝色花盆").apply(brain, NOW)["stored"][0]["path"]
             for _ in range(3)]
    assert paths == ["captured/lan-se-hua-pen.md", "captured/lan-se-hua-pen-2.md", "captured/lan-se-hua-pen-3.md"]


def test_chatgpt_search_titles_carry_no_markdown() -> None:
    from connector.mcp.chatgpt import _title

    assert _title("**blue flowerpot**", "mem_20260301_abcdef") == "blue flowerpot"
