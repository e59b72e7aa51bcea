"""The sign-in page on a narrow screen: long host names, ids and names wrap, ordinary words stay whole."""

from __future__ import annotations

import secrets
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from connector.oauth.pkce import s256
from tests.support.browser import chromium, needs_chromium

from ..conftest import RunningStore
from .live import running_connector

pytestmark = [
    pytest.mark.timeout(240),
    needs_chromium(),
]

LONG_HOST = "an-unusually-long-host-name-that-must-wrap-somewhere.example.org"

# Every ordinary word (a whitespace-separated run of at most 20 letters, punctuation aside) of
# the page's muted paragraphs that spans two lines; long names and ids may wrap anywhere.
BROKEN_WORDS = """() => {
  const broken = [];
  for (const p of document.querySelectorAll('.muted')) {
    const walker = document.createTreeWalker(p, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/(?<=^|\\s|\\()[A-Za-z]{2,20}(?=[.,;:)]?(\\s|$))/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


def test_narrow_page_breaks_only_long_names(store: RunningStore, tmp_path: Path) -> None:
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as connector:
        base = connector.base_url
        redirect = f"https://{LONG_HOST}/callback"
        registered = httpx.post(base + "/register", json={"redirect_uris": [redirect], "client_name": "Narrow"})
        assert registered.status_code == 201, registered.text
        url = base + "/authorize?" + urlencode({
            "response_type": "code", "client_id": registered.json()["client_id"], "redirect_uri": redirect,
            "state": "s", "code_challenge": s256("v" * 43), "code_challenge_method": "S256",
            "resource": base + "/mcp", "scope": "brain.read"})
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 320, "height": 640})
            response = page.goto(url)
            assert response is not None and response.status == 200
            assert LONG_HOST in page.inner_text("body")
            broken = [w for w in page.evaluate(BROKEN_WORDS) if w not in LONG_HOST]
            assert broken == [], f"ordinary words broken mid-word: {broken}"
            # the long host name wraps instead of widening the page
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_a_long_client_or_brain_name_stays_inside_the_page(store: RunningStore, tmp_path: Path) -> None:
    # A client names itself (up to 200 characters) and a brain's URL names the brain (up to 300):
    # without a space to break at, either ran off the card and made a phone scroll sideways.
    long_name, long_brain = "W" * 200, "B" * 300
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as connector:
        base = connector.base_url
        redirect = "http://127.0.0.1:1/callback"
        client_id = httpx.post(base + "/register", json={"redirect_uris": [redirect], "client_name": long_name}).json()[
            "client_id"]
        query = {"response_type": "code", "client_id": client_id, "redirect_uri": redirect, "state": "s",
                 "code_challenge": s256(secrets.token_urlsafe(48)), "code_challenge_method": "S256"}
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 390, "height": 844})
            for resource in (base + "/mcp", base + "/mcp/brains/" + long_brain):
                response = page.goto(base + "/authorize?" + urlencode({**query, "resource": resource}))
                assert response is not None and response.status == 200
                assert page.get_by_text(long_name).is_visible()
                widths = page.evaluate("""() => ({
                    page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth,
                    card: document.querySelector('main').getBoundingClientRect().right,
                    names: Math.max(...[...document.querySelectorAll('main strong')].map(
                        node => node.getBoundingClientRect().right))})""")
                assert widths["page"] <= widths["view"], (resource, widths)
                assert widths["names"] <= widths["card"], (resource, widths)
