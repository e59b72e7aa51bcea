"""Code both servers use: request limits, client addresses, ASGI watching, OIDC, the S3
client, and the conditional document store (``common.docstore``).

The store and the connector never import each other; what they share lives here,
and this package imports neither of them.
"""
