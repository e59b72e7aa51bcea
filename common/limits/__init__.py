"""Request rate limits (per process, per host, or across replicas) and the client address they are keyed on."""

from common.limits.address import TrustedProxies, client_address, limit_key, parse_ip
from common.limits.rate import TokenBucketLimiter
from common.limits.shared import SharedTokenBucketLimiter
from common.limits.stored import StoredTokenBucketLimiter
from common.limits.synced import SyncedTokenBucketLimiter

__all__ = [
    "SharedTokenBucketLimiter",
    "StoredTokenBucketLimiter",
    "SyncedTokenBucketLimiter",
    "TokenBucketLimiter",
    "TrustedProxies",
    "client_address",
    "limit_key",
    "parse_ip",
]
