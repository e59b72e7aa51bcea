"""Wrong tokens typed on the web app's sign-in page, as a stranger guessing would."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import httpx


def csrf_of(html: str) -> str:
    """The CSRF token hidden in a page's form."""
    return html.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def wrong_web_sign_ins(bases: Sequence[str], address: str, attempts: int) -> tuple[int, int]:
    """``attempts`` wrong tokens at ``/app/signin`` from client ``address`` (sent as
    X-Forwarded-For), taking ``bases`` in turn; (how many the store was asked about: 401,
    how many the connector's per-address limit refused: 429). Anything else fails."""
    checked = limited = 0
    for attempt in range(attempts):
        base = bases[attempt % len(bases)]
        headers = {"X-Forwarded-For": address, "Origin": base}
        with httpx.Client(base_url=base, timeout=30, follow_redirects=False) as browser:
            page = browser.get("/app/signin", headers=headers)
            answer = browser.post("/app/signin", headers=headers,
                                  data={"csrf": csrf_of(page.text), "token": "wrong-" + secrets.token_hex(16)})
        if answer.status_code == 401:
            checked += 1
        elif answer.status_code == 429 and "Too many sign-in attempts from here" in answer.text:
            limited += 1
        else:
            raise AssertionError(f"unexpected answer {answer.status_code}: {answer.text[:300]}")
    return checked, limited
