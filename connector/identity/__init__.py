"""Who the user is: identity providers for the connector's sign-in (static, oidc, dev)."""
