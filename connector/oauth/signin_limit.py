"""One budget of sign-in attempts per client address, for every sign-in page of the connector.

The OAuth sign-in page (``/authorize/complete``) and the web app's (``/app/signin``)
check tokens with the store; both take one attempt from the same bucket of the
person's address (an IPv6 address counts with its /64) before the store is asked.
Where the buckets live decides who shares the budget:

- with a shared state (``CONNECTOR_STATE_URL`` or a state directory shared by
  replicas, given as ``state``): in documents of that state
  (``common.limits.StoredTokenBucketLimiter``), so every replica and worker grants
  the budget once between them; each attempt costs one conditional read-modify-write
  there (docs/sign-in-limits.md);
- for ``serve --workers N`` without one: in a small file in a private directory
  ``serve`` makes (``common.limits.SharedTokenBucketLimiter``), so the workers grant
  it once;
- otherwise in this process's memory.
"""

from __future__ import annotations

from pathlib import Path

import anyio.to_thread

from common.docstore import DocumentStore
from common.limits import SharedTokenBucketLimiter, StoredTokenBucketLimiter, TokenBucketLimiter, limit_key

SignInChecks = TokenBucketLimiter | SharedTokenBucketLimiter | StoredTokenBucketLimiter

# Where the shared buckets live in the state (documents of their own, never read by anything else).
STATE_PREFIX = "limits/signin-attempts"


def signin_limiter(limits_dir: Path | None, attempts_per_min: int, state: DocumentStore | None = None) -> SignInChecks | None:
    """The sign-in attempts limiter: in ``state`` when given (shared by replicas), else shared through
    ``limits_dir`` when given, else in memory (None when ``attempts_per_min`` is 0: no limit)."""
    if attempts_per_min <= 0:
        return None
    if state is not None:
        return StoredTokenBucketLimiter(state, STATE_PREFIX, attempts_per_min, attempts_per_min)
    if limits_dir is None:
        return TokenBucketLimiter(attempts_per_min)
    limits_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return SharedTokenBucketLimiter(limits_dir / "signin-attempts.bin", attempts_per_min, attempts_per_min, slots=16_384)


async def signin_wait(checks: SignInChecks | None, client_address: str) -> float | None:
    """Take one attempt for ``client_address``: None when allowed, else seconds to wait
    (in a worker thread when the buckets are in a shared store)."""
    if checks is None:
        return None
    key = limit_key(client_address)
    if isinstance(checks, StoredTokenBucketLimiter):
        return await anyio.to_thread.run_sync(checks.hit, key)
    return checks.hit(key)
