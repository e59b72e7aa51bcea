"""Where text may be cut (connector/engine/format/graphemes.py): never inside a character as shown."""

from __future__ import annotations

import regex

from connector.engine.format.graphemes import boundary_at_or_before, shortened

SAMPLES = [
    "plain ascii text, cut anywhere",
    "line one\r\nline two\r\n",
    "family 👨‍👩‍👧‍👦 and flags 🇯🇵🇫🇷 here",
    "keycap 1\ufe0f\u20e3 and e\u0301 and a\u0308b",
    "か\u3099ナ\u309aｶﾞ text",
    "👍🏽ok!x\u200dy",
    "tag0001-" + "x" * 40 + "\u0301" + "y" * 10,
]


def _walked(text: str, at: int) -> int:
    """The boundary found by walking every cluster from the start (what the fast path must equal)."""
    start = 0
    for cluster in regex.finditer(r"\X", text):
        if cluster.end() > at:
            return cluster.start()
        start = cluster.end()
    return start


def test_every_cut_is_the_last_cluster_boundary_at_or_before_it() -> None:
    for text in SAMPLES:
        for at in range(-1, len(text) + 2):
            expected = _walked(text, max(0, min(at, len(text)))) if 0 < at < len(text) else max(0, min(at, len(text)))
            assert boundary_at_or_before(text, at) == expected, (text, at)


def test_a_long_tag_is_shortened_with_an_ellipsis_within_its_length() -> None:
    tag = "tag0001-" + "x" * 992
    cut = shortened(tag, 300)
    assert len(cut) == 300 and cut.endswith("\u2026") and tag.startswith(cut[:-1])
    assert shortened("short", 300) == "short"
