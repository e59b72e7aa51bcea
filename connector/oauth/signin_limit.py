"""One budget of sign-in attempts per client address, for every sign-in page of the connector.

The OAuth sign-in page (``/authorize/complete``) and the web app's (``/app/signin``)
check tokens with the store; both take one attempt from the same bucket of the
person's address (an IPv6 address counts with its /64) before the store is asked.
With a state directory the buckets live in a small file there
(``common.limits.SharedTokenBucketLimiter``), so the workers of ``serve --workers N``
(which must share one) grant the budget once, not N times; without one, in this
process's memory.
"""

from __future__ import annotations

from pathlib import Path

from common.limits import SharedTokenBucketLimiter, TokenBucketLimiter, limit_key

SignInChecks = TokenBucketLimiter | SharedTokenBucketLimiter
LIMITS_DIR = "limits"


def signin_limiter(state_dir: Path | None, attempts_per_min: int) -> SignInChecks | None:
    """The sign-in attempts limiter (None when ``attempts_per_min`` is 0: no limit)."""
    if attempts_per_min <= 0:
        return None
    if state_dir is None:
        return TokenBucketLimiter(attempts_per_min)
    directory = state_dir / LIMITS_DIR
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return SharedTokenBucketLimiter(directory / "signin-attempts.bin", attempts_per_min, attempts_per_min, slots=16_384)


def signin_wait(checks: SignInChecks | None, client_address: str) -> float | None:
    """Take one attempt for ``client_address``: None when allowed, else seconds to wait."""
    return checks.hit(limit_key(client_address)) if checks is not None else None
