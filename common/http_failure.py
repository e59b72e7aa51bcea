"""Plain words for an HTTP request that got no answer, for messages people read.

Python's class names (``ConnectError``, ``ReadTimeout``) mean nothing to a person reading a tool
result, a web page or a command's error; logs for operators may keep them.
"""

from __future__ import annotations

import httpx


def no_answer(exc: httpx.HTTPError, whom: str, timeout_s: float | None = None) -> str:
    """Why ``whom`` (e.g. ``"the store at http://h:8787"``) gave no answer to a request that
    raised ``exc``: "could not connect to ...", "... did not answer within N s", "the connection
    to ... broke off", else "the request to ... failed"."""
    if isinstance(exc, httpx.TimeoutException):
        return f"{whom} did not answer within {timeout_s:g} s" if timeout_s else f"{whom} did not answer in time"
    if isinstance(exc, httpx.ConnectError):
        return f"could not connect to {whom}"
    if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.CloseError)):
        return f"the connection to {whom} broke off"
    return f"the request to {whom} failed"
