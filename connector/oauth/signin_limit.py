"""One budget of sign-in attempts per client address, for every sign-in page of the connector.

The OAuth sign-in page (``/authorize/complete``) and the web app's (``/app/signin``)
check tokens with the store; both take one attempt from the same bucket of the
person's address (an IPv6 address counts with its /64) before the store is asked.
For ``serve --workers N`` the buckets live in a small file in a private directory
``serve`` makes (``common.limits.SharedTokenBucketLimiter``), so the workers grant the
budget once, not N times; otherwise in this process's memory. Never in the state
directory: replicas sharing it would turn every stranger's wrong token into a write
there (docs/replicas.md, "Limits that are per replica").
"""

from __future__ import annotations

from pathlib import Path

from common.limits import SharedTokenBucketLimiter, TokenBucketLimiter, limit_key

SignInChecks = TokenBucketLimiter | SharedTokenBucketLimiter


def signin_limiter(limits_dir: Path | None, attempts_per_min: int) -> SignInChecks | None:
    """The sign-in attempts limiter, shared through ``limits_dir`` when given (None when
    ``attempts_per_min`` is 0: no limit)."""
    if attempts_per_min <= 0:
        return None
    if limits_dir is None:
        return TokenBucketLimiter(attempts_per_min)
    limits_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return SharedTokenBucketLimiter(limits_dir / "signin-attempts.bin", attempts_per_min, attempts_per_min, slots=16_384)


def signin_wait(checks: SignInChecks | None, client_address: str) -> float | None:
    """Take one attempt for ``client_address``: None when allowed, else seconds to wait."""
    return checks.hit(limit_key(client_address)) if checks is not None else None
