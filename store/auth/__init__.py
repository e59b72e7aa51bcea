"""Authentication: static tokens, the users file, OIDC, and the request authenticator."""
