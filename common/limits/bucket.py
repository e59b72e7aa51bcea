"""The token-bucket arithmetic shared by the in-process and the cross-process limiters.

A bucket is ``(tokens, at)``: how many tokens it held at time ``at`` (monotonic
seconds). It refills at ``rate`` tokens per second up to ``burst``; a request
needs one whole token. Where the buckets live (a dict, a shared file) is the
limiters' business; this module only checks the settings and does the sums.
"""

from __future__ import annotations

__all__ = ["BucketRule"]


class BucketRule:
    """Refill and wait sums for buckets of ``rate_per_min`` tokens a minute, ``burst`` at most.

    ``burst`` defaults to one minute's worth; bad settings raise ``ValueError``.
    """

    __slots__ = ("burst", "full_after", "rate")

    def __init__(self, rate_per_min: float, burst: float | None = None) -> None:
        if not rate_per_min > 0:
            raise ValueError("rate_per_min must be positive (switch the limiter off instead of using 0)")
        burst = rate_per_min if burst is None else burst
        if not burst >= 1:
            raise ValueError("burst must be at least 1")
        self.rate = rate_per_min / 60.0  # tokens per second
        self.burst = float(burst)
        self.full_after = self.burst / self.rate  # idle seconds after which any bucket is full

    def refill(self, tokens: float, at: float, now: float) -> tuple[float, float]:
        """The bucket ``(tokens, at)`` brought forward to ``now``.

        A clock that steps back refills nothing and leaves ``at`` where it was.
        """
        if now > at:
            return min(self.burst, tokens + (now - at) * self.rate), now
        return tokens, at

    def wait(self, tokens: float) -> float | None:
        """None when ``tokens`` allow a request, else the seconds until one would."""
        return None if tokens >= 1.0 else (1.0 - tokens) / self.rate
