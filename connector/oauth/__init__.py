"""The connector's OAuth 2.1 authorization server (clients, codes, tokens, metadata)."""
