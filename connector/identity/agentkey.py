"""Agent keys (``bsk_...``) as bearer tokens at the MCP URLs, for scripts and jobs that cannot
sign in through a browser (docs/connecting.md, "Scripts: agent keys").

The key is checked at the store (``GET /auth/me``) on every request, so a revocation or an
expiry applies to the very next call; the store answers with the key's scope, which becomes
the request's MCP scopes (``read``: ``brain.read``; ``write``: also ``brain.write``). Which
brains it reaches is the store's business: the key's brains are all it lists or serves.
"""

from __future__ import annotations

import time

from common.limits import parse_ip
from connector.identity.static import subject_for
from connector.mcp.definitions import READ_SCOPE, WRITE_SCOPE
from connector.oauth.tokens import AccessClaims
from connector.workcopy.store_client import StoreClient, StoreError, StoreUnauthorized

KEY_PREFIX = "bsk_"
MAX_KEY_CHARS = 200
SCOPES_OF_KEY = {"read": frozenset({READ_SCOPE}), "write": frozenset({READ_SCOPE, WRITE_SCOPE})}
# The claims live for one request only; the expiry just fills the field.
CLAIMS_LIFETIME_S = 60


def looks_like_agent_key(token: str) -> bool:
    """A bearer token shaped like an agent key (checked at the store before anything is granted)."""
    return (token.startswith(KEY_PREFIX) and len(token) <= MAX_KEY_CHARS and token.isascii()
            and not any(ch.isspace() for ch in token))


class AgentKeyBearer:
    """Turns an agent key presented at ``/mcp`` into the claims of one request, or refuses it."""

    def __init__(self, store: StoreClient) -> None:
        self._store = store

    async def claims(self, token: str, base_url: str, client_address: str | None) -> AccessClaims | None:
        """The key's claims when the store accepts it now, else None (a 401); ``StoreError`` (other
        than a refusal) when the store cannot say (a 503, never a grant)."""
        if not looks_like_agent_key(token):
            return None
        address = parse_ip(client_address)
        try:
            me = await self._store.me(token, None if address is None else str(address))
        except StoreUnauthorized:
            return None
        except StoreError as exc:
            if exc.status == 429:
                return None  # the store is limiting wrong credentials from this address
            raise
        user, key = me.get("user"), me.get("key")
        if not isinstance(user, dict) or not isinstance(key, dict) or user.get("kind") != "agent-key":
            return None
        user_id, scope, prefix = user.get("id"), key.get("scope"), key.get("prefix")
        if not isinstance(user_id, str) or not user_id or scope not in SCOPES_OF_KEY or not isinstance(prefix, str):
            return None
        label = key.get("label") if isinstance(key.get("label"), str) else ""
        return AccessClaims(
            sub=subject_for(user_id, token), scope=SCOPES_OF_KEY[scope], aud=f"{base_url}/mcp",
            exp=int(time.time()) + CLAIMS_LIFETIME_S, client_id=f"agent-key:{prefix}",
            client_name=f"agent key {prefix}" + (f" ({label})" if label else ""), idp="static",
            store_credential=token)
