"""Sessions and Markdown rendering of the web app, without a server."""

from __future__ import annotations

import time
from typing import Any

from connector.engine.recall.hybrid import MODES
from connector.webapp import markdown
from connector.webapp.markdown import render_markdown, render_markdown_in
from connector.webapp.sessions import WebSessions
from connector.webapp.views import MODE_LABELS, explain


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sessions_are_stored_hashed_expire_and_end() -> None:
    clock = Clock()
    sessions = WebSessions(60.0, clock=clock)
    cookie, session = sessions.create(subject="static:u", credential="bst_secret", kind="static", read_only=False)
    assert sessions.get(cookie) == session
    assert cookie not in repr(sessions._records) and len(cookie) >= 40
    assert sessions.get(cookie + "x") is None and sessions.get("") is None and sessions.get(None) is None
    assert session.csrf_ok(session.csrf) and not session.csrf_ok("nope") and not session.csrf_ok(None)
    clock.now += 61
    assert sessions.get(cookie) is None and len(sessions) == 0
    cookie, _ = sessions.create(subject="static:u", credential="bst_secret", kind="static", read_only=True)
    assert sessions.end(cookie) and sessions.get(cookie) is None and not sessions.end(cookie)


def test_session_lifetime_is_bounded_by_the_credential_and_the_count() -> None:
    clock = Clock()
    sessions = WebSessions(3600.0, clock=clock, capacity=2)
    cookie, session = sessions.create(subject="oidc:x", credential="id-token", kind="oidc", read_only=False,
                                      credential_expires_at=clock.now + 30)
    assert session.expires_at == clock.now + 30
    second, _ = sessions.create(subject="a", credential="c", kind="static", read_only=False)
    third, _ = sessions.create(subject="b", credential="c", kind="static", read_only=False)
    deadline = time.monotonic() + 10  # beyond the count, a background pass drops the soonest to expire
    while sessions.get(cookie) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sessions.get(cookie) is None and sessions.get(second) and sessions.get(third)


def test_markdown_keeps_formatting_and_drops_everything_active() -> None:
    html = render_markdown(
        "# Title\n\n<script>alert(1)</script>\n\n<b onmouseover=x()>raw</b>\n\n"
        "[js](javascript:alert(1)) [vb](vbscript:x) [ok](https://example.org)\n\n"
        "![remote](https://tracker.example/p.png)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n~~old~~ `code`"
    )
    assert "<h1>Title</h1>" in html and "<table>" in html and "<s>old</s>" in html and "<code>code</code>" in html
    assert "<script" not in html and "<b " not in html and "&lt;script&gt;" in html
    assert 'href="javascript' not in html and 'href="vbscript' not in html
    assert '<a href="https://example.org" rel="noopener noreferrer nofollow">ok</a>' in html
    assert "<img" not in html and "[image: remote]" in html


def test_the_search_page_names_every_recall_mode_and_explains_similarity() -> None:
    assert tuple(MODE_LABELS) == MODES  # a new brain_recall mode must get a name on the search page
    exact = {"relevance": 0.8, "decayed_strength": 0.5, "spreading_bonus": 0.1}
    assert explain(exact) == "relevance 0.8, strength 0.5, association 0.1"
    assert explain({**exact, "similarity": 0.42}) == "relevance 0.8, strength 0.5, association 0.1, meaning similarity 0.42"
    assert explain({"relevance": 0.0, "similarity": 0.0}).endswith("meaning similarity 0")
    # A hybrid hit the exact engine did not match (every hit of a Chinese query) names what did.
    cjk = {"relevance": 0.0, "decayed_strength": 0.5, "similarity": 0.61}
    assert explain(cjk, ["疫苗", "三月"]) == "words of the query in it: 疫苗, 三月, strength 0.5, meaning similarity 0.61"
    assert explain(cjk, []) == "no word of the query in it: found by its meaning, strength 0.5, meaning similarity 0.61"
    assert explain({**cjk, "relevance": 0.3}, ["疫苗"]).startswith("relevance 0.3, ")  # the exact engine's own
    assert explain({**exact, "relevance": 0.0}, []).startswith("relevance 0, ")  # exact mode: as it is


def test_rendered_markdown_is_remembered_per_brain_only() -> None:
    """The Review page renders the same texts again and again: remembered, but per brain (issue 28)."""
    text = "Standup at **9:45**, see <script>x</script> ![pixel](https://tracker.example/p.png)"
    assert render_markdown_in("brain-a", text) == render_markdown(text)
    before = markdown._remembered.cache_info()
    assert render_markdown_in("brain-a", text) == render_markdown(text)
    after = markdown._remembered.cache_info()
    assert after.hits == before.hits + 1
    # Another brain's request for the same text is a miss: it cannot time what brain-a holds.
    render_markdown_in("brain-b", text)
    assert markdown._remembered.cache_info().misses == after.misses + 1
    long = "word " * 5000  # past the size bound: rendered every time, never kept
    assert render_markdown_in("brain-a", long) == render_markdown(long)
    assert markdown._remembered.cache_info().currsize == after.currsize + 1


def test_a_page_reads_its_session_off_the_event_loop() -> None:
    import asyncio
    import threading

    sessions = WebSessions(60.0)
    cookie, session = sessions.create(subject="static:u", credential="c", kind="static", read_only=False)
    readers: list[int] = []
    read = sessions._records.get

    def counted(key: str) -> Any:
        readers.append(threading.get_ident())
        return read(key)

    sessions._records.get = counted  # type: ignore[method-assign]
    assert asyncio.run(sessions.find(cookie)) == session
    assert readers and threading.get_ident() not in readers  # read in a worker thread (a bucket: two GETs)
    assert asyncio.run(sessions.find(None)) is None


def test_messages_isolate_their_text_parameters_and_escape_them() -> None:
    from connector.i18n import Text
    from connector.webapp.pages import environment

    page = environment("en").from_string("<li>{{ note|t }}</li><li>{{ tag|bdi }}</li><li>{{ plain|t }}</li>")
    html = page.render(note=Text("%(name)s: no text", name="a\u202e<b>.md"), tag="x\u202ey", plain="Pinned.")
    # A file's name in a message is isolated (and escaped): its override ends with it.
    assert html == ("<li><bdi>a\u202e&lt;b&gt;.md</bdi>: no text</li><li><bdi>x\u202ey</bdi></li>"
                    "<li>Pinned.</li>")
    translated = environment("ja").from_string("{{ note|t }}").render(note=Text("%(name)s: no text", name="n.md"))
    assert "<bdi>n.md</bdi>" in translated and "no text" not in translated
