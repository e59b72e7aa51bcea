"""Run the registered checks against a store and present the results."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

import httpx

import contract.conformance.checks  # noqa: F401  (registers every check)
from common.http_failure import no_answer
from contract.conformance.context import Context, Pacer, UserClient
from contract.conformance.registry import CHECKS, Check, CheckFailed, CheckSkipped

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class SuiteConfig:
    """Where to run and what: ``only`` selects check ids (or id prefixes ending in '.')."""

    url: str
    token: str
    token2: str | None = None
    only: Sequence[str] = ()
    extensions: bool = True
    timeout: float = 30.0


@dataclass
class Result:
    """The outcome of one check."""

    id: str
    description: str
    extension: bool
    status: Status
    detail: str = ""
    seconds: float = 0.0
    leftovers: list[str] = field(default_factory=list)


def select(checks: Sequence[Check], only: Sequence[str], extensions: bool) -> list[Check]:
    """The checks to run, in registration order."""
    chosen = []
    for item in checks:
        if item.extension and not extensions and not only:
            continue
        if only and not any(item.id == sel or (sel.endswith(".") and item.id.startswith(sel)) for sel in only):
            continue
        chosen.append(item)
    return chosen


def run_check(item: Check, ctx: Context) -> Result:
    """Run one check, then delete the brains it created whatever happened."""
    started = time.monotonic()
    status: Status = "pass"
    detail = ""
    try:
        detail = item.fn(ctx) or ""
    except CheckFailed as exc:
        status, detail = "fail", str(exc)
    except CheckSkipped as exc:
        status, detail = "skip", str(exc)
    except httpx.HTTPError as exc:
        status, detail = "fail", no_answer(exc, "the store")
    leftovers = ctx.user.cleanup() + (ctx.other.cleanup() if ctx.other else [])
    if leftovers and status == "pass":
        status, detail = "fail", f"could not delete scratch brains {leftovers}"
    return Result(item.id, item.description, item.extension, status, detail, time.monotonic() - started, leftovers)


# The pre-flight requests wait at most this long: an unreachable store is said in seconds.
PREFLIGHT_TIMEOUT_S = 10.0


def normalize_url(given: str) -> tuple[str, str | None]:
    """The store URL to use for ``given`` and a note when it was completed: ``localhost:8787``
    (no scheme) means ``http://localhost:8787``. ``ValueError`` for a scheme other than http(s)."""
    url = given.strip()
    if "://" not in url:
        return f"http://{url}", f"no scheme in {given!r}: using http://{url}"
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"{given!r}: a store URL starts with http:// or https://, e.g. http://127.0.0.1:8787")
    return url, None


def preflight(config: SuiteConfig, *, transport: httpx.BaseTransport | None = None) -> str | None:
    """None when the store answers ``/health`` and accepts the token(s); else why no check can run."""
    base = config.url.rstrip("/")
    try:
        with httpx.Client(base_url=base, timeout=min(config.timeout, PREFLIGHT_TIMEOUT_S),
                          transport=transport) as http:
            health = http.get("/health")
            if health.status_code != 200:
                return f"{base} answered {health.status_code} to GET /health; is it a brain store?"
            for option, token in (("--token", config.token), ("--token2", config.token2)):
                if token is None:
                    continue
                me = http.get("/auth/me", headers={"Authorization": f"Bearer {token}"})
                if me.status_code in (401, 403):
                    return (f"the store at {base} refused the token given with {option} ({me.status_code}); "
                            "give the token of an existing user")
                if me.status_code == 404:
                    return _not_a_store(http, base)
                if me.status_code not in (200, 429):
                    return f"{base} answered {me.status_code} to GET /auth/me with the {option} token"
    except httpx.HTTPError as exc:
        # the system's reason is kept when it adds one ("Connection refused", a name not found)
        said = f" ({exc})" if str(exc) and not isinstance(exc, httpx.TimeoutException) else ""
        return no_answer(exc, f"the store at {base}", min(config.timeout, PREFLIGHT_TIMEOUT_S)) + said
    return None


def _not_a_store(http: httpx.Client, base: str) -> str:
    """Why a server without ``/auth/me`` is no store, naming the MCP connector when it is one."""
    try:
        connector = http.get("/.well-known/oauth-protected-resource").status_code == 200
    except httpx.HTTPError:
        connector = False
    if connector:
        return (f"{base} looks like an MCP connector (it publishes OAuth metadata), not a brain store: "
                "give the store's URL (the connector's CONNECTOR_STORE_URL; `brain-store dev` prints it as "
                "'store URL')")
    return (f"{base} answered 404 to GET /auth/me: it does not look like a brain store "
            "(every store answers /auth/me); check the URL and port")


def run_suite(
    config: SuiteConfig,
    checks: Sequence[Check] | None = None,
    *,
    transport: httpx.BaseTransport | None = None,
    on_result: Callable[[int, int, Result], None] | None = None,
    pacer: Pacer | None = None,
) -> list[Result]:
    """Run the selected checks in order against ``config.url`` (``transport``: for testing the suite).

    ``on_result(done, total, result)`` is called after each check (progress); ``pacer``
    collects how often the store answered 429 and how long the suite waited.
    """
    chosen = select(checks if checks is not None else CHECKS, config.only, config.extensions)
    base = config.url.rstrip("/")
    results: list[Result] = []
    pacer = pacer or Pacer()
    opts = {"base_url": base, "timeout": config.timeout, "transport": transport}
    with httpx.Client(**opts) as http1, httpx.Client(**opts) as http2:  # type: ignore[arg-type]
        user = UserClient(http1, config.token, pacer=pacer)
        other = UserClient(http2, config.token2, pacer=pacer) if config.token2 else None
        ctx = Context(base, user, other, config.timeout, transport)
        for item in chosen:
            if item.needs_token2 and other is None:
                result = Result(item.id, item.description, item.extension, "skip", "needs --token2")
            else:
                result = run_check(item, ctx)
            results.append(result)
            if on_result is not None:
                on_result(len(results), len(chosen), result)
    return results


def failed(results: Sequence[Result]) -> list[Result]:
    """The failing results."""
    return [r for r in results if r.status == "fail"]


def format_table(results: Sequence[Result], *, width: int = 100) -> str:
    """A plain-text table: status, id, description, and for failures the reason below."""
    id_width = max((len(r.id) for r in results), default=2)
    lines = [f"{'RESULT':6}  {'CHECK':{id_width}}  DESCRIPTION", "-" * min(width, id_width + 60)]
    for r in results:
        mark = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[r.status]
        desc = r.description + (" [extension]" if r.extension else "")
        lines.append(f"{mark:6}  {r.id:{id_width}}  {desc}")
        if r.status != "pass" and r.detail:
            lines.append(f"{'':6}  {'':{id_width}}  -> {r.detail}")
    counts = {s: sum(1 for r in results if r.status == s) for s in ("pass", "fail", "skip")}
    lines.append(f"\n{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    return "\n".join(lines)


def to_json(results: Sequence[Result]) -> list[dict[str, object]]:
    """Results as plain dicts for --json."""
    return [asdict(r) for r in results]
