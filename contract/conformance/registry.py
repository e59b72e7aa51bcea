"""Check registration and the small assertion vocabulary checks use."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from contract.conformance.context import Context


class CheckFailed(AssertionError):
    """The store broke the contract; the message says how (with the exchange)."""


class CheckSkipped(Exception):
    """The check does not apply to this store (absent extension, no second token)."""


CheckFn = Callable[["Context"], "str | None"]


@dataclass(frozen=True)
class Check:
    """One named behaviour: ``fn`` raises CheckFailed/CheckSkipped or returns an optional note."""

    id: str
    description: str
    fn: CheckFn
    extension: bool = False
    needs_token2: bool = False


CHECKS: list[Check] = []


def check(check_id: str, description: str, *, extension: bool = False, needs_token2: bool = False) -> Callable[[CheckFn], CheckFn]:
    """Register the decorated function as a check (ids must be unique)."""

    def register(fn: CheckFn) -> CheckFn:
        if any(existing.id == check_id for existing in CHECKS):
            raise ValueError(f"duplicate check id {check_id}")
        CHECKS.append(Check(check_id, description, fn, extension, needs_token2))
        return fn

    return register


def describe(resp: httpx.Response) -> str:
    """One-line summary of an exchange, for failure messages (no tokens, short body)."""
    req = resp.request
    body = resp.content[:300]
    try:
        shown = body.decode()
    except UnicodeDecodeError:
        shown = f"<{len(resp.content)} binary bytes>"
    interesting = {k: v for k, v in resp.headers.items() if k.lower() in {"etag", "x-checksum", "www-authenticate", "content-type", "retry-after"}}
    return f"{req.method} {req.url} -> {resp.status_code} {interesting} {shown!r}"


def require(condition: object, message: str, resp: httpx.Response | None = None) -> None:
    """Fail the check with ``message`` (and the exchange) unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(message + (f" [{describe(resp)}]" if resp is not None else ""))


def expect_status(resp: httpx.Response, *statuses: int) -> httpx.Response:
    """Fail unless the response status is one of ``statuses``."""
    require(resp.status_code in statuses, f"expected status {' or '.join(map(str, statuses))}", resp)
    return resp


def json_body(resp: httpx.Response) -> Any:
    """The decoded JSON body, failing the check when it is not JSON."""
    try:
        return resp.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckFailed(f"response body is not JSON [{describe(resp)}]") from None


def expect_error(resp: httpx.Response, *statuses: int) -> dict[str, Any]:
    """Fail unless the status fits and the body is a JSON object with a string ``error``."""
    expect_status(resp, *statuses)
    body = json_body(resp)
    require(isinstance(body, dict) and isinstance(body.get("error"), str), 'error body must be {"error": "<text>"}', resp)
    return body
