"""Request rate limits and the client address they are keyed on (pure logic, no I/O)."""

from store.limits.address import TrustedProxies, client_address
from store.limits.rate import TokenBucketLimiter
from store.limits.shared import SharedTokenBucketLimiter

__all__ = ["SharedTokenBucketLimiter", "TokenBucketLimiter", "TrustedProxies", "client_address"]
