"""Request rate limits and the client address they are keyed on (pure logic, no I/O)."""

from common.limits.address import TrustedProxies, client_address, limit_key, parse_ip
from common.limits.rate import TokenBucketLimiter
from common.limits.shared import SharedTokenBucketLimiter

__all__ = [
    "SharedTokenBucketLimiter",
    "TokenBucketLimiter",
    "TrustedProxies",
    "client_address",
    "limit_key",
    "parse_ip",
]
